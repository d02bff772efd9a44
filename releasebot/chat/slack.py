"""The ``/releasebot`` slash command: Slack's HTTP front door and the handler both doors share.

``SlashCommandEndpoint.handle`` is framework-agnostic: the web server passes the RAW body,
the headers and the time, and sends back the ``HttpAnswer``. The signature is checked
first, on the raw bytes, with slack-sdk's ``SignatureVerifier`` and its 5-minute replay
window; a bad, missing or stale one is a 401 and nothing else happens. Before the verifier
sees them, both headers must have Slack's exact form (ASCII digits; ``v0=`` and 64
lower-case hex), one of each (the web server joins repeated headers with ``, ``, which
neither form allows): any other value is a 401 too, never an exception. What is not a
form (another ``Content-Type``) is a 415 and an oversized body a 413, before any HMAC.

``SlashCommandHandler`` is what both doors (this one and ``chat.socket``) call with the
command's fields: parse strictly, refuse changes to anyone not allowed (with an audit log
line), answer quick commands inline and slow ones with "working on it", running them on a
small bounded pool that posts the result to the ``response_url`` (Slack wants an answer
within 3 s). It reaches the use cases only through ``CommandRunner``.

Not here: the web server itself, leader election, and what a command does. Never logged:
the signing secret, raw bodies, command text or the ``response_url`` (a credential).
"""

from __future__ import annotations

import json
import logging
import re
import threading
from collections.abc import Collection, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Protocol
from urllib.parse import parse_qs

from slack_sdk.signature import Clock, SignatureVerifier
from slack_sdk.webhook import WebhookClient

from releasebot.chat.commands import parse_command
from releasebot.domain.shared.errors import CommandError, ConfigError
from releasebot.domain.targets.commands import Command

log = logging.getLogger("releasebot.chat")
audit = logging.getLogger("releasebot.audit")
# slack-sdk's WebhookClient logs the URL at DEBUG (the body) and INFO (its retries); the
# URL is a credential. Its own logger keeps only warnings, which never carry the URL.
_webhook_log = logging.getLogger("releasebot.chat.response_url")
_webhook_log.setLevel(logging.WARNING)

SLACK_RESPONSE_URL_PREFIX = "https://hooks.slack.com/"
MAX_BODY_BYTES = 16 * 1024
"""A slash command form is well under 2 KiB; anything bigger is not from Slack."""
_MAX_FIELD = 1000
_SLACK_ID = re.compile(r"[A-Z0-9]{2,20}")
_TIMESTAMP = re.compile(r"[0-9]{1,12}")
_SIGNATURE = re.compile(r"v0=[0-9a-f]{64}")
"""Slack's only signature version: HMAC-SHA256 in lower-case hex. Checked before anything
compares it: ``hmac.compare_digest`` raises on a non-ASCII string."""
FORM_TYPE = "application/x-www-form-urlencoded"
"""What Slack posts a slash command as."""
_FIELDS = ("command", "text", "user_id", "channel_id", "response_url")

Payload = dict[str, Any]


class CommandRunner(Protocol):
    """Runs a validated command for a Slack user; returns a Slack message payload.

    ``service.commands.CommandService`` is the real one. It must not raise for expected
    failures; anything it does raise becomes a generic apology.
    """

    def run(self, command: Command, user: str) -> Payload: ...


@dataclass(frozen=True)
class SlashRequest:
    """The fields of a slash command releasebot reads (HTTP form or Socket Mode payload)."""

    command: str
    text: str
    user_id: str
    channel_id: str
    response_url: str

    @classmethod
    def from_fields(cls, fields: Mapping[str, object]) -> SlashRequest:
        values = {}
        for name in _FIELDS:
            value = fields.get(name)
            values[name] = value[:_MAX_FIELD] if isinstance(value, str) else ""
        return cls(**values)

    @property
    def user(self) -> str:
        """The user ID if it looks like one, else ``""`` (safe to log and to show)."""
        return self.user_id if _SLACK_ID.fullmatch(self.user_id) else ""

    @property
    def channel(self) -> str:
        return self.channel_id if _SLACK_ID.fullmatch(self.channel_id) else ""


@dataclass(frozen=True)
class HttpAnswer:
    status: int
    content_type: str
    body: bytes


class SlashCommandHandler:
    """Authorizes, parses and dispatches one slash command; the same for HTTP and Socket Mode."""

    def __init__(
        self,
        runner: CommandRunner,
        *,
        allowed_users: Collection[str] = (),
        allowed_channels: Collection[str] = (),
        response_url_prefix: str = SLACK_RESPONSE_URL_PREFIX,
        workers: int = 2,
        max_pending: int = 8,
        follow_up_timeout: timedelta = timedelta(seconds=10),
    ) -> None:
        """``allowed_*`` may run commands that change something (none: nobody may).
        ``response_url_prefix`` is where follow-ups may go (tests point it at loopback).
        At most ``max_pending`` slow commands wait or run at once; more are turned away."""
        if not response_url_prefix.endswith("/") or "://" not in response_url_prefix:
            raise ValueError("response_url_prefix must be a URL ending in '/'")
        if not 1 <= workers <= max_pending:
            raise ValueError("need 1 <= workers <= max_pending")
        self._runner = runner
        self._allowed_users = frozenset(allowed_users)
        self._allowed_channels = frozenset(allowed_channels)
        self._prefix = response_url_prefix
        self._timeout = max(1, round(follow_up_timeout.total_seconds()))
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="slash")
        self._slots = threading.BoundedSemaphore(max_pending)
        self._closed = False

    def close(self) -> None:
        """Stop taking slow commands; wait for those running, drop those still queued
        (their askers saw "working on it" and get no follow-up)."""
        self._closed = True
        self._pool.shutdown(wait=True, cancel_futures=True)

    def answer(self, request: SlashRequest) -> Payload:
        """The immediate answer to ``request`` (a Slack message payload)."""
        try:
            command = parse_command(request.text)
        except CommandError as error:
            return ephemeral(str(error))
        if command.verb.mutates:
            if not self._allowed(request):
                audit.warning(
                    "refused user=%s channel=%s command=%r",
                    request.user or "?",
                    request.channel or "?",
                    str(command),
                )
                return ephemeral(
                    f"Sorry, you are not allowed to run `{command.verb.value}` here. "
                    "Ask someone on the releasebot allow list."
                )
            audit.info(
                "accepted user=%s channel=%s command=%r",
                request.user,
                request.channel,
                str(command),
            )
        if not command.verb.slow:
            return self._run(command, request)
        return self._start(command, request)

    def _allowed(self, request: SlashRequest) -> bool:
        return bool(
            (request.user and request.user in self._allowed_users)
            or (request.channel and request.channel in self._allowed_channels)
        )

    def _run(self, command: Command, request: SlashRequest) -> Payload:
        try:
            return self._runner.run(command, request.user)
        except Exception:  # the chat gets an apology, the log the details
            log.exception("chat command %s failed", command)
            return ephemeral(f"Sorry, `{command}` failed unexpectedly; the logs have details.")

    def _start(self, command: Command, request: SlashRequest) -> Payload:
        url = request.response_url
        if not self._follow_up_allowed(url):
            log.warning("slash command %s has no usable response_url; not run", command.verb)
            return ephemeral("I could not answer this request later, so I did not start it.")
        if self._closed or not self._slots.acquire(blocking=False):
            return ephemeral("I am busy with other commands; please try again in a minute.")
        try:
            self._pool.submit(self._work, command, request)
        except RuntimeError:  # closed meanwhile
            self._slots.release()
            return ephemeral("I am shutting down; please try again in a minute.")
        return ephemeral(
            f"Queued `{command}`; I will answer here when it is done"
            " (after the running build cycle, if there is one)."
        )

    def _work(self, command: Command, request: SlashRequest) -> None:
        try:
            self._post(request.response_url, self._run(command, request), command)
        finally:
            self._slots.release()

    def _follow_up_allowed(self, url: str) -> bool:
        return (
            url.startswith(self._prefix)
            and url.isascii()
            and url.isprintable()
            and not any(char.isspace() or char == "\\" for char in url)
        )

    def _post(self, url: str, payload: Payload, command: Command) -> None:
        client = WebhookClient(url, timeout=self._timeout, logger=_webhook_log)
        try:
            response = client.send_dict(payload)
        except Exception as error:  # noqa: BLE001 - urllib and slack-sdk raise many kinds
            log.warning("follow-up for %s not delivered: %s", command.verb, type(error).__name__)
            return
        if response.status_code != 200:
            log.warning("follow-up for %s refused: HTTP %s", command.verb, response.status_code)


class SlashCommandEndpoint:
    """The HTTP slash command endpoint: verify, parse the form, hand to the handler."""

    def __init__(
        self,
        handler: SlashCommandHandler,
        *,
        signing_secret: str,
        max_body_bytes: int = MAX_BODY_BYTES,
    ) -> None:
        if not signing_secret.strip():
            raise ConfigError("slack.signing_secret", "is needed for the slash command endpoint")
        self._handler = handler
        self._secret = signing_secret
        self._max_body = max_body_bytes

    def __repr__(self) -> str:  # the secret stays out of any repr
        return "SlashCommandEndpoint()"

    def handle(self, raw_body: bytes, headers: Mapping[str, str], now: float) -> HttpAnswer:
        """The answer to one POST; ``now`` is the Unix time (injectable for tests)."""
        if len(raw_body) > self._max_body:
            return _plain(413, "request too large")
        lowered = {name.lower(): value for name, value in headers.items()}
        media_type = lowered.get("content-type", "").split(";", 1)[0].strip().lower()
        if media_type != FORM_TYPE:
            return _plain(415, f"a slash command is posted as {FORM_TYPE}")
        if not self._verified(raw_body, headers, now):
            return _plain(401, "invalid or missing signature")
        try:
            fields = parse_qs(
                raw_body.decode("utf-8"),
                keep_blank_values=True,
                strict_parsing=bool(raw_body),
                max_num_fields=40,
            )
        except ValueError:  # also UnicodeDecodeError
            return _plain(400, "malformed form body")
        if any(len(values) != 1 for values in fields.values()):
            return _plain(400, "a form field is repeated")
        request = SlashRequest.from_fields({name: values[0] for name, values in fields.items()})
        body = json.dumps(self._handler.answer(request)).encode("utf-8")
        return HttpAnswer(200, "application/json; charset=utf-8", body)

    def _verified(self, raw_body: bytes, headers: Mapping[str, str], now: float) -> bool:
        lowered = {name.lower(): value for name, value in headers.items()}
        timestamp = lowered.get("x-slack-request-timestamp", "")
        signature = lowered.get("x-slack-signature", "")
        if _TIMESTAMP.fullmatch(timestamp) is None or _SIGNATURE.fullmatch(signature) is None:
            log.info("slash command refused: signature headers missing or malformed")
            return False
        try:
            raw_body.decode("utf-8")  # SignatureVerifier decodes; garbage is not Slack's
        except UnicodeDecodeError:
            log.info("slash command refused: body is not UTF-8")
            return False
        verifier = SignatureVerifier(self._secret, clock=_FixedClock(now))
        if not verifier.is_valid(raw_body, timestamp, signature):
            log.info("slash command refused: bad signature or outside the 5-minute window")
            return False
        return True


class _FixedClock(Clock):
    """The request's ``now`` for ``SignatureVerifier``'s replay window."""

    def __init__(self, now: float) -> None:
        self._now = now

    def now(self) -> float:
        return self._now


def ephemeral(text: str) -> Payload:
    """A message only the asking user sees; ``&``, ``<`` and ``>`` in ``text`` are escaped
    (Slack reads ``<...>`` as a link or a mention)."""
    text = text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return {
        "response_type": "ephemeral",
        "text": text,
        "blocks": [{"type": "section", "text": {"type": "mrkdwn", "text": text}}],
    }


def _plain(status: int, text: str) -> HttpAnswer:
    return HttpAnswer(status, "text/plain; charset=utf-8", text.encode("utf-8"))
