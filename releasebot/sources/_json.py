"""JSON-body helpers shared by the feed parsers: both feeds fail the same ways.

HTML and truncation detection with one-line problems, entry fingerprints, and trimming of
upstream text quoted in errors. Nothing here knows either feed's shape.
"""

from __future__ import annotations

import hashlib
import json
from typing import cast

from releasebot.domain.errors import FeedFormatError

MAX_QUOTED_CHARS = 80
"""Longest piece of upstream text (a key, a value) quoted in an error message."""


def quote(value: object) -> str:
    """``repr`` of upstream data for an error message, cut to ``MAX_QUOTED_CHARS``."""
    try:
        text = repr(value)
    except RecursionError:  # a value nested near the parser's limit
        text = f"<{type(value).__name__} nested too deeply to show>"
    if len(text) > MAX_QUOTED_CHARS:
        return text[: MAX_QUOTED_CHARS - 1] + "…"
    return text


def looks_like_html(body: bytes) -> bool:
    """True when the body starts (after whitespace) with ``<``: an error or login page."""
    return body[:1024].lstrip()[:1] == b"<"


def load_json_document(feed: str, body: bytes) -> object:
    """Decode a feed body as JSON, with one-line problems a person on call can act on."""
    if not body.strip():
        raise FeedFormatError(feed, "empty body, not JSON")
    if looks_like_html(body):
        raise FeedFormatError(feed, "returned HTML, not JSON (an error page or the wrong URL?)")
    try:
        return cast(object, json.loads(body))
    except json.JSONDecodeError as exc:
        detail = exc.msg.removesuffix(" at").lower()  # json's messages end "... starting at"
        raise FeedFormatError(
            feed, f"truncated or invalid JSON at line {exc.lineno} column {exc.colno} ({detail})"
        ) from exc
    except UnicodeDecodeError as exc:
        raise FeedFormatError(feed, f"body is not UTF-8 text (byte {exc.start})") from exc
    except RecursionError as exc:
        # json's C scanner recurses once per ``[``/``{``: a body like "[" * 200_000 would
        # otherwise escape as a traceback. Real feeds nest five levels at most.
        raise FeedFormatError(feed, "JSON nested too deeply") from exc


def content_sha256(value: object) -> str:
    """Digest of ``value``'s canonical JSON: key order and whitespace do not matter.

    The parsers pass only what releasebot stores of an entry, so the digest changes exactly
    when the stored release would (see each parser for the fields and why).
    """
    canonical = json.dumps(value, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()
