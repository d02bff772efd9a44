"""The one way an answer from outside is decoded as JSON: bounded, and every failure one line.

Feeds, the registry, the Kubernetes API server and the Slack Web API all answer JSON, and
every byte of it is hostile. Python's ``json`` fails in ways no adapter expects: an integer
of more than 4,300 digits raises ``ValueError``, deep nesting ``RecursionError``, bytes that
are not UTF-8 ``UnicodeDecodeError``, and ``NaN`` or ``Infinity`` are accepted although JSON
has neither. ``decode_json`` bounds the size, the nesting depth and the digits of an integer
before any of that can happen, and raises ``JsonRefusedError`` naming the problem in one
line; each adapter turns that into its own domain error (``raise Feed…Error(...) from``),
so a bad body is the failure of that one feed or that one call, never of a whole cycle.

Deliberately not here: what a document means (each adapter's ``parse_…``), and the
fetching (the adapters bound the bytes they read with the same ``max_bytes``).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

__all__ = ["DEFAULT_LIMITS", "JsonLimits", "JsonRefusedError", "decode_json"]


@dataclass(frozen=True)
class JsonLimits:
    """What one document may be; validated on construction (``ValueError``)."""

    max_bytes: int = 16 * 1024 * 1024
    """The longest body decoded. 16 MiB: a busy cluster's node list or a registry's tag page
    is well under a megabyte; the feed reader passes its own, larger limit."""
    max_depth: int = 64
    """The deepest nesting of arrays and objects. Real answers nest ten levels at most."""
    max_digits: int = 40
    """The longest integer (in digits). Every number releasebot reads fits 64 bits (20
    digits); twice that leaves room, and is far from Python's 4,300-digit failure."""

    def __post_init__(self) -> None:
        if self.max_bytes < 1 or self.max_depth < 1 or self.max_digits < 1:
            raise ValueError("JSON limits must be positive")
        if self.max_depth > 500:  # json recurses once per level: stay far from the stack
            raise ValueError("max_depth must be at most 500")
        if self.max_digits > 4000:
            raise ValueError("max_digits must be at most 4000")


DEFAULT_LIMITS = JsonLimits()


class JsonRefusedError(Exception):
    """A body that is not a JSON document within the limits. ``problem`` is one line."""

    def __init__(self, problem: str) -> None:
        super().__init__(problem)
        self.problem = problem


def decode_json(body: bytes | str, limits: JsonLimits = DEFAULT_LIMITS) -> object:
    """``body`` decoded as one JSON document within ``limits``.

    Raises ``JsonRefusedError`` (and nothing else) when the body is empty, too big, not
    UTF-8, not JSON, nested too deeply, or carries an integer too long or a non-finite
    constant (``NaN``, ``Infinity``).
    """
    size = len(body)
    if size > limits.max_bytes:
        raise JsonRefusedError(f"body of {size} bytes is over the limit of {limits.max_bytes}")
    if isinstance(body, bytes):
        if body.startswith(b"\xef\xbb\xbf"):
            body = body[3:]  # a UTF-8 byte-order mark: harmless, json refuses it
        try:
            text = body.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise JsonRefusedError(f"body is not UTF-8 text (byte {exc.start})") from exc
    else:
        text = body
    if not text.strip():
        raise JsonRefusedError("empty body, not JSON")
    _check_depth(text, limits.max_depth)

    def parse_int(digits: str) -> int:
        if len(digits.lstrip("-")) > limits.max_digits:
            raise JsonRefusedError(
                f"an integer of {len(digits.lstrip('-'))} digits (the limit is {limits.max_digits})"
            )
        return int(digits)

    def parse_constant(name: str) -> object:
        raise JsonRefusedError(f"{name} is not JSON")

    try:
        return json.loads(text, parse_int=parse_int, parse_constant=parse_constant)
    except json.JSONDecodeError as exc:
        detail = exc.msg.removesuffix(" at").lower()  # json's messages end "... starting at"
        raise JsonRefusedError(
            f"truncated or invalid JSON at line {exc.lineno} column {exc.colno} ({detail})"
        ) from exc
    except RecursionError as exc:  # unreachable past _check_depth, kept as the last guard
        raise JsonRefusedError(
            f"JSON nested too deeply (more than {limits.max_depth} levels)"
        ) from exc
    except ValueError as exc:  # a float json cannot read; never a traceback
        raise JsonRefusedError(f"unreadable JSON ({type(exc).__name__})") from exc


_STRINGS = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_NOT_BRACKETS = re.compile(r"[^\[\]{}]+")


def _check_depth(text: str, max_depth: int) -> None:
    """Refuse nesting deeper than ``max_depth`` before ``json`` recurses into it.

    Strings go first (brackets inside them do not count), then everything but brackets;
    each pass then removes the innermost pairs, so ``max_depth`` passes empty a document
    nested no deeper. All of it runs in C: about 30 ms per megabyte.
    """
    brackets = _NOT_BRACKETS.sub("", _STRINGS.sub("", text))
    for _ in range(max_depth):
        inner = brackets.replace("[]", "").replace("{}", "")
        if inner == brackets:
            break  # empty, or brackets that do not match (json points at them)
        brackets = inner
    else:
        if "[]" in brackets or "{}" in brackets:
            raise JsonRefusedError(f"JSON nested too deeply (more than {max_depth} levels)")
    if len(brackets) - len(brackets.lstrip("[{")) > max_depth:  # opened, never closed
        raise JsonRefusedError(f"JSON nested too deeply (more than {max_depth} levels)")
