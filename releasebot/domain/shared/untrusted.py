"""Text from outside, made safe to keep and show: bounded, one line, no control characters.

Node labels, annotations and ``status.nodeInfo`` come from the API server, which takes
them from kubelets, NFD workers, the Flatcar update agent and anyone allowed to label a
node. None of them is trusted: a value may be missing, not a string, megabytes long, or
carry terminal escapes, CR/LF and bidi overrides. The parsers of the fleet and operator
views read every such value through ``clean`` (or ``quoted`` to show one in a message), so
what reaches a store, a log line or a Slack message is printable and short.

Deliberately not here: deciding what a value means (the parsers do) and trimming error
texts for the store (``store/limits.py``).
"""

from __future__ import annotations

import re
import unicodedata

TEXT_MAX_CHARS = 256
"""The longest value kept: Kubernetes label values are at most 63 characters and a node's
``osImage`` is one short line, so anything longer is garbage and gets cut."""

_QUOTES = "\"'"

_SEQUENCES = re.compile(
    r"""
    (?:\x1b\[|\x9b) [\x30-\x3f]* [\x20-\x2f]* [\x40-\x7e]?       # CSI: colours, cursor moves
  | (?:\x1b[\]PX^_]|[\x90\x98\x9d\x9e\x9f]) [^\x07\x1b\x9c]* (?:\x07|\x1b\\|\x9c)?
                                                              # OSC, DCS, SOS, PM, APC strings
  | \x1b[\x20-\x2f]*[\x30-\x7e]?                               # any other escape
    """,
    re.VERBOSE,
)
_DROPPED = frozenset(("Cc", "Cf", "Zl", "Zp", "Cs", "Co", "Cn"))
"""Unicode categories never shown: controls, format characters (bidi overrides,
zero-width joiners), line/paragraph separators, surrogates, private use, unassigned."""


def strip_controls(text: str) -> str:
    """``text`` without terminal escape sequences; whitespace controls (tab, CR, LF, the
    Unicode separators) become spaces, every other control or format character goes."""
    if text.isascii() and text.isprintable():
        return text
    text = _SEQUENCES.sub("", text)
    return "".join(
        " " if char.isspace() else char
        for char in text
        if char.isspace() or unicodedata.category(char) not in _DROPPED
    )


def clean(value: object, *, limit: int = TEXT_MAX_CHARS, unquote: bool = False) -> str | None:
    """``value`` as one printable line of at most ``limit`` characters; ``None`` when it is
    not a string or nothing printable is left.

    Whitespace runs (tabs, CR/LF included) become one space and the ends are stripped;
    terminal escape sequences and other control and format characters are dropped. With
    ``unquote``, one pair of matching surrounding quotes goes too (os-release writes
    ``VERSION_ID="4628.0.0"`` from 4628 on).
    """
    if not isinstance(value, str):
        return None
    head = value[: limit * 4]  # never walk a megabyte: what is kept is at most `limit`
    text = " ".join(strip_controls(head).split())
    if unquote and len(text) >= 2 and text[0] == text[-1] and text[0] in _QUOTES:
        text = text[1:-1].strip()
    if not text:
        return None
    if len(text) > limit or len(value) > len(head):
        text = text[: limit - 1] + "…"
    return text


def quoted(value: object, *, limit: int = 60) -> str:
    """``value`` for a human message: cleaned, cut short, in quotes (``'<none>'`` if empty)."""
    text = clean(value, limit=limit)
    return "<none>" if text is None else repr(text)


def escaped(value: object, *, limit: int = 60) -> str:
    """``value`` exactly as received, for a message that shows what needed cleaning: an
    ASCII-only Python literal (``'4593.2.5\\r\\n'``), cut at ``limit`` characters."""
    if not isinstance(value, str):
        return f"<{type(value).__name__}>"
    return ascii(value[:limit]) + ("…" if len(value) > limit else "")
