"""Third-party text, shown safely: one printable line of bounded length.

Whatever a server or a library says (an exception's message, a reason phrase, an error body)
is hostile: it may be huge, span lines, or carry control characters that rewrite a
terminal or a log line. ``one_line`` is the only way such text enters releasebot's own
messages: terminal escape sequences (CSI ``ESC [ … m``, OSC ``ESC ] … BEL``, and their
8-bit C1 forms) are removed whole, every other control or format character (C0, C1, DEL,
bidi overrides, line and paragraph separators) is dropped, and whitespace runs become one
space, so nothing that reaches a terminal, a log line, Slack or the store can move a
cursor, set a title, or hide text (``domain.shared.untrusted.strip_controls`` does the cleaning,
for the domain's ``clean`` too). Not here: escaping for a particular markup (chat messages
escape their own).
"""

from __future__ import annotations

from releasebot.domain.shared.untrusted import strip_controls

MAX_TEXT = 200
"""Characters of third-party text quoted in an error: enough to say why, never a body."""


def one_line(value: object, limit: int = MAX_TEXT) -> str:
    """``value`` as text on one line: escape sequences and other control characters
    removed, whitespace runs made one space, and more than ``limit`` characters end in ``…``."""
    text = " ".join(strip_controls(str(value)[: 4 * limit]).split())
    if len(text) > limit:
        return text[: limit - 1] + "…"
    return text
