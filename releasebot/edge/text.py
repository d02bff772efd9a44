"""Third-party text, shown safely: one printable line of bounded length.

Whatever a server or a library says (an exception's message, a reason phrase, an error body)
is hostile: it may be huge, span lines, or carry control characters that rewrite a
terminal or a log line. ``one_line`` is the only way such text enters releasebot's own
messages. Not here: escaping for a particular markup (chat messages escape their own).
"""

from __future__ import annotations

MAX_TEXT = 200
"""Characters of third-party text quoted in an error: enough to say why, never a body."""


def one_line(value: object, limit: int = MAX_TEXT) -> str:
    """``value`` as text on one line: whitespace runs become one space, other control
    characters are escaped (``\\x1b``), and more than ``limit`` characters end in ``…``."""
    text = " ".join(str(value)[: 4 * limit].split())
    if not text.isprintable():
        text = "".join(c if c.isprintable() else c.encode("unicode_escape").decode() for c in text)
    if len(text) > limit:
        return text[: limit - 1] + "…"
    return text
