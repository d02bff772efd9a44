"""JSON-body helpers shared by the feed parsers: both feeds fail the same ways.

HTML and truncation detection with one-line problems, entry fingerprints, and trimming of
upstream text quoted in errors. Nothing here knows either feed's shape.
"""

from __future__ import annotations

import hashlib
import json

from releasebot.domain.shared.errors import FeedFormatError
from releasebot.edge.json import JsonLimits, JsonRefusedError, decode_json

FEED_JSON_LIMITS = JsonLimits(max_bytes=64 * 1024 * 1024)
"""The fetcher's body limit (``fetch.DEFAULT_MAX_BYTES``); depth and digits as for any
answer (real feeds nest five levels, their longest number is a size in bytes)."""

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
        return decode_json(body, FEED_JSON_LIMITS)
    except JsonRefusedError as exc:
        raise FeedFormatError(feed, exc.problem) from exc


def content_sha256(value: object) -> str:
    """Digest of ``value``'s canonical JSON: key order and whitespace do not matter.

    The parsers pass only what releasebot stores of an entry, so the digest changes exactly
    when the stored release would (see each parser for the fields and why).
    """
    canonical = json.dumps(value, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()
