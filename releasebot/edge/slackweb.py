"""slack-sdk's ``WebClient`` with every answer read by the one bounded JSON reader.

slack-sdk reads a whole body whatever its size, decodes it with the charset the server
names (an unknown one raises ``LookupError``), and parses it with ``json.loads``: a huge
integer, deep nesting or bad bytes escape as ``ValueError``/``RecursionError``; a 200
answer that is not JSON (a proxy's HTML page) becomes ``ok: false`` with the page quoted
as the "error", which callers take for a permanent refusal. ``BoundedWebClient`` reads each
answer itself (at most ``SLACK_JSON_LIMITS.max_bytes``, UTF-8, bounded JSON): a 2xx body
that is not JSON within the limits raises ``SlackUnreadableAnswerError`` (a
``SlackClientError``: the adapters call it a temporary failure, retried soon), and a
non-2xx body that is not is replaced by ``{"ok": false}`` (the status says enough).

Used by the notifier (``notify.slack``) and the Socket Mode front door (``chat.socket``).
"""

from __future__ import annotations

import io
from email.message import Message
from typing import Any
from urllib.error import HTTPError
from urllib.request import Request, urlopen

from slack_sdk import WebClient
from slack_sdk.errors import SlackClientError, SlackRequestError

from releasebot.edge.json import JsonLimits, JsonRefusedError, decode_json

__all__ = ["SLACK_JSON_LIMITS", "BoundedWebClient", "SlackUnreadableAnswerError"]

SLACK_JSON_LIMITS = JsonLimits(max_bytes=8 * 1024 * 1024)
"""A page of channel history (200 messages with their blocks) is well under a megabyte."""


class SlackUnreadableAnswerError(SlackClientError):
    """A Slack answer of status 2xx that is not a JSON document within the limits."""

    def __init__(self, status: int, problem: str) -> None:
        super().__init__(f"unreadable answer (HTTP {status}): {problem}")
        self.status = status
        self.problem = problem


class BoundedWebClient(WebClient):
    """``WebClient`` whose HTTP answers are read bounded and decoded by ``decode_json``."""

    def _perform_urllib_http_request_internal(self, url: str, req: Request) -> dict[str, Any]:
        # The one override: slack-sdk's own would read and decode without limits. No proxy
        # is ever configured by releasebot, so urlopen with the client's TLS context is all.
        if not url.lower().startswith(("http://", "https://")):
            raise SlackRequestError(f"Invalid URL detected: {url}")
        limit = SLACK_JSON_LIMITS.max_bytes
        try:
            with urlopen(req, context=self.ssl, timeout=self.timeout) as response:  # noqa: S310
                status = int(response.status)
                headers = response.headers
                body = response.read(limit + 1)
        except HTTPError as error:
            # slack-sdk's retry handlers and error translation read the HTTPError: hand them
            # one whose body is JSON within the limits, or empty.
            raw = error.read(limit + 1) if error.fp is not None else b""
            safe = raw if _readable(raw) else b'{"ok": false}'  # the status says the rest
            fixed = Message()
            for name, value in (error.headers or Message()).items():
                if name.lower() != "content-type":
                    fixed[name] = value
            fixed["Content-Type"] = "application/json; charset=utf-8"
            raise HTTPError(error.url, error.code, error.msg, fixed, io.BytesIO(safe)) from None
        try:
            document = decode_json(body, SLACK_JSON_LIMITS)
        except JsonRefusedError as error:
            raise SlackUnreadableAnswerError(status, error.problem) from None
        return {"status": status, "headers": headers, "body": body, "parsed_body": document}


def _readable(body: bytes) -> bool:
    try:
        decode_json(body, SLACK_JSON_LIMITS)
    except JsonRefusedError:
        return False
    return True
