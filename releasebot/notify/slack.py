"""``SlackNotifier``: one outbox event told in Slack, through slack-sdk's ``WebClient``.

The first event of a key posts the build's message (Block Kit, a text fallback, and
message ``metadata`` naming the event); later events ``chat.update`` that message with the
whole re-rendered state and add the event's detail as a thread reply. A message a person
deleted is posted afresh.

Nothing is sent twice. The one window is "Slack took the post, then the process died before
the outbox was marked": before every post (first message or thread reply) the channel's
history (or the thread) is searched for a message whose metadata carries this event's id,
and a match is adopted instead of posting again. ``chat.update`` needs no such care: it
sets the same content again. For the same reason a failed ``chat.postMessage`` is never
retried inside the call on a 5xx or a dropped connection (Slack may have posted it); the
service's next round searches first. 429s are retried in the call (Slack did nothing), if
``Retry-After`` is short; a longer one becomes a ``ChatUnavailableError`` carrying it.

Every slack-sdk or network error becomes ``ChatUnavailableError`` (retry later) or
``ChatRejectedError`` (a human must act). Tokens never reach a message or a log line.
This module does not decide when to deliver or retry across rounds
(``service/notifications.py``), and does not store anything.
"""

from __future__ import annotations

import http.client
import logging
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from datetime import datetime, timedelta
from http.client import RemoteDisconnected
from typing import Any
from urllib.error import URLError

from slack_sdk import WebClient
from slack_sdk.errors import SlackApiError, SlackClientError
from slack_sdk.http_retry import RetryHandler
from slack_sdk.http_retry.request import HttpRequest
from slack_sdk.http_retry.response import HttpResponse
from slack_sdk.http_retry.state import RetryState

from releasebot.domain.shared.errors import ChatRejectedError, ChatUnavailableError
from releasebot.domain.targets.events import Event, MessageRef, StoredEvent
from releasebot.edge.redact import Redactor
from releasebot.edge.retry import parse_retry_after
from releasebot.edge.slackweb import BoundedWebClient
from releasebot.edge.text import one_line
from releasebot.notify import EVERY_CALL, HINTS
from releasebot.notify.render import RenderedMessage, render_message, render_thread_reply

log = logging.getLogger("releasebot.notify.slack")

EVENT_TYPE = "releasebot_event"
"""The ``metadata.event_type`` of every message releasebot posts."""

TEMPORARY_CODES = frozenset(
    {"ratelimited", "internal_error", "fatal_error", "service_unavailable", "request_timeout"}
)
"""``ok: false`` errors that go away by themselves; any other code needs a human."""

MESSAGE_GONE_CODES = frozenset({"message_not_found", "cant_update_message"})
"""``chat.update`` found no message of ours to edit: a person deleted it. Post a new one."""

RETRY_AFTER_UNKNOWN = timedelta(seconds=30)
"""The wait assumed after a 429 without a readable ``Retry-After``: Slack's tier limits reset
within a minute."""
_PAGE_SIZE = 200


def make_web_client(
    token: str,
    *,
    base_url: str,
    timeout: timedelta,
    retries: int = 2,
    max_rate_limit_wait: timedelta = timedelta(seconds=5),
    sleep: Callable[[float], None] = time.sleep,
) -> WebClient:
    """A ``WebClient`` retrying each call at most ``retries`` times, sleeping through
    ``sleep`` (tests pass a recorder); a ``Retry-After`` above ``max_rate_limit_wait`` is
    not waited for in the call but left to the service's backoff."""
    handlers: list[RetryHandler] = [
        _BoundedRetryHandler(retries, max_rate_limit_wait.total_seconds(), sleep)
    ]
    # slack-sdk's DEBUG lines carry whole response bodies (a channel's history): never on.
    sdk_log = logging.getLogger("releasebot.notify.slack.sdk")
    sdk_log.setLevel(logging.INFO)
    return BoundedWebClient(
        token=token,
        base_url=base_url,
        timeout=max(1, round(timeout.total_seconds())),
        retry_handlers=handlers,
        logger=sdk_log,
    )


class SlackNotifier:
    """Delivers outbox events to one channel; ``repository`` is for the pull references."""

    def __init__(
        self,
        client: WebClient,
        *,
        channel: str,
        repository: str,
        clock_skew: timedelta = timedelta(minutes=1),
        history_pages: int = 5,
        secrets: Sequence[str] = (),
    ) -> None:
        self._client = client
        # Messages mask credentials by their form (``render``); these values too, whatever
        # form they reach an event in (a token a server echoed into an error).
        self._redact = Redactor(secrets)
        self._channel = channel
        self._repository = repository
        self._clock_skew = clock_skew
        self._history_pages = history_pages

    def deliver(
        self, stored: StoredEvent, events_for_key: Sequence[Event], ref: MessageRef | None
    ) -> MessageRef:
        """Tell ``stored`` (the last of ``events_for_key``); the ref of its key's message."""
        message = self._masked(render_message(events_for_key, self._repository))
        if ref is None:
            return self._post_message(stored, message)
        try:
            self._call(
                "chat.update",
                self._client.chat_update,
                channel=ref.channel,
                ts=ref.ts,
                text=message.text,
                blocks=message.blocks,
            )
        except ChatRejectedError as error:
            if error.code not in MESSAGE_GONE_CODES:
                raise
            log.warning("message of %s is gone (%s); posting it again", ref.message_key, error)
            return self._post_message(stored, message)
        if self._find_reply(stored, ref) is None:
            reply = self._masked(render_thread_reply(stored.event, self._repository))
            self._post(stored, reply, channel=ref.channel, thread_ts=ref.ts)
        return ref

    def _masked(self, message: RenderedMessage) -> RenderedMessage:
        if not self._redact.knows_values:
            return message
        return RenderedMessage(self._redact(message.text), _mask(message.blocks, self._redact))

    # -- posting once ----------------------------------------------------------------------

    def _post_message(self, stored: StoredEvent, message: RenderedMessage) -> MessageRef:
        key = stored.event.message_key
        found = self._find_message(stored)
        if found is not None:
            log.info("adopting the message already posted for event %d (%s)", stored.id, key)
            return MessageRef(key, self._channel, found)
        return MessageRef(key, self._channel, self._post(stored, message, channel=self._channel))

    def _post(
        self,
        stored: StoredEvent,
        message: RenderedMessage,
        *,
        channel: str,
        thread_ts: str | None = None,
    ) -> str:
        metadata = {
            "event_type": EVENT_TYPE,
            "event_payload": {"event_id": stored.id, "message_key": stored.event.message_key},
        }
        data = self._call(
            "chat.postMessage",
            self._client.chat_postMessage,
            channel=channel,
            text=message.text,
            blocks=message.blocks,
            thread_ts=thread_ts,
            metadata=metadata,
            unfurl_links=False,
            unfurl_media=False,
        )
        ts = data.get("ts")
        if not isinstance(ts, str):
            raise ChatUnavailableError("slack chat.postMessage: answer without a ts")
        return ts

    def _find_message(self, stored: StoredEvent) -> str | None:
        """The ts of a channel message already posted for ``stored``, if any."""
        oldest = _slack_ts(stored.event.created_at - self._clock_skew)
        pages = self._pages(
            "conversations.history",
            self._client.conversations_history,
            channel=self._channel,
            oldest=oldest,
        )
        return _matching(pages, stored)

    def _find_reply(self, stored: StoredEvent, ref: MessageRef) -> str | None:
        """The ts of a thread reply already posted for ``stored``, if any."""
        pages = self._pages(
            "conversations.replies",
            self._client.conversations_replies,
            channel=ref.channel,
            ts=ref.ts,
        )
        return _matching(pages, stored)

    def _pages(
        self, method: str, call: Callable[..., Any], **args: Any
    ) -> Iterator[list[dict[str, Any]]]:
        """The ``messages`` of up to ``history_pages`` pages, newest first.

        Bounded: a channel that busy within the window means the search gives up and the
        event is posted; a duplicate is the lesser harm than a notification never sent.
        """
        cursor: str | None = None
        for _ in range(self._history_pages):
            data = self._call(
                method, call, include_all_metadata=True, limit=_PAGE_SIZE, cursor=cursor, **args
            )
            messages = data.get("messages")
            yield list(messages) if isinstance(messages, list) else []
            metadata = data.get("response_metadata")
            cursor = metadata.get("next_cursor") if isinstance(metadata, dict) else None
            if not cursor:
                return
        log.warning("gave up searching %s after %d pages", method, self._history_pages)

    # -- the boundary: slack-sdk and network errors become releasebot's -------------------

    def _call(self, method: str, call: Callable[..., Any], **args: Any) -> dict[str, Any]:
        try:
            response = call(**{name: value for name, value in args.items() if value is not None})
        except SlackApiError as error:
            raise _translate(method, error) from error
        except (SlackClientError, OSError, http.client.HTTPException) as error:
            raise ChatUnavailableError(
                f"slack {method}: {one_line(type(error).__name__ + ': ' + str(error))}"
            ) from error
        data = response.data
        return data if isinstance(data, dict) else {}


def _translate(method: str, error: SlackApiError) -> ChatUnavailableError | ChatRejectedError:
    response = error.response
    status = response.status_code
    data = response.data if isinstance(response.data, dict) else {}
    code = str(data.get("error") or f"HTTP {status}")
    if status == 429 or code == "ratelimited":
        wait = _retry_after(_header(response.headers, "retry-after"))
        return ChatUnavailableError(f"slack {method}: rate limited", retry_after=wait)
    if status >= 500:  # the body is often an HTML page: the status says enough
        return ChatUnavailableError(f"slack {method}: HTTP {status}")
    if code in TEMPORARY_CODES:
        return ChatUnavailableError(f"slack {method}: {code}")
    code = one_line(code)
    return ChatRejectedError(method, code, hint=HINTS.get(code), affects_all=code in EVERY_CALL)


def _matching(pages: Iterator[list[dict[str, Any]]], stored: StoredEvent) -> str | None:
    for messages in pages:
        for message in messages:
            metadata = message.get("metadata")
            if not isinstance(metadata, dict) or metadata.get("event_type") != EVENT_TYPE:
                continue
            payload = metadata.get("event_payload")
            if (
                isinstance(payload, dict)
                and payload.get("event_id") == stored.id
                and payload.get("message_key") == stored.event.message_key
                and isinstance(message.get("ts"), str)
            ):
                return str(message["ts"])
    return None


def _slack_ts(moment: datetime) -> str:
    return f"{moment.timestamp():.6f}"


def _header(headers: Mapping[str, Any], name: str) -> object:
    """A header's value from slack-sdk's headers, whatever case and shape they come in."""
    for key, value in headers.items():
        if key.lower() == name:
            return value
    return None


def _retry_after(value: object) -> timedelta:
    """Slack's ``Retry-After`` (slack-sdk hands headers over as lists), kept within
    ``[1 s, 1 h]``; ``RETRY_AFTER_UNKNOWN`` when Slack sent none or nonsense."""
    text = value[0] if isinstance(value, list) and value else value
    wait = parse_retry_after(None if text is None else str(text))
    if wait is None:
        return RETRY_AFTER_UNKNOWN
    return max(timedelta(seconds=1), min(wait, timedelta(hours=1)))


# -- slack-sdk's retries, bounded and sleep-injectable, in one handler ---------------------


def _is_post(request: HttpRequest) -> bool:
    return request.url.split("?")[0].endswith("/chat.postMessage")


_CONNECTION_ERRORS = (URLError, ConnectionResetError, RemoteDisconnected)
"""What slack-sdk calls a dropped connection (its ``ConnectionErrorRetryHandler``'s list)."""


class _BoundedRetryHandler(RetryHandler):
    """Which failed calls slack-sdk repeats, and after how long (``_wait``); every wait goes
    through ``sleep``, and the retries of one call, whatever their reasons, are at most
    ``retries`` (slack-sdk counts them in the call's one ``RetryState``)."""

    def __init__(self, retries: int, max_wait: float, sleep: Callable[[float], None]) -> None:
        super().__init__(max_retry_count=retries)
        self._max_wait = max_wait
        self._sleep = sleep

    def _can_retry(
        self,
        *,
        state: RetryState,
        request: HttpRequest,
        response: HttpResponse | None = None,
        error: Exception | None = None,
    ) -> bool:
        return self._wait(state, request, response, error) is not None

    def prepare_for_next_attempt(
        self,
        *,
        state: RetryState,
        request: HttpRequest,
        response: HttpResponse | None = None,
        error: Exception | None = None,
    ) -> None:
        wait = self._wait(state, request, response, error)
        state.next_attempt_requested = True
        self._sleep(0.0 if wait is None else wait)
        state.increment_current_attempt()

    def _wait(
        self,
        state: RetryState,
        request: HttpRequest,
        response: HttpResponse | None,
        error: Exception | None,
    ) -> float | None:
        """Seconds to sleep before the call is repeated; ``None``: it is not repeated.

        - 429: Slack did nothing, so any call may be repeated, after ``Retry-After`` (one
          above ``max_wait`` is left to the service's backoff);
        - 500/503: only a call that is safe to repeat, not a post, which Slack may have made;
        - a dropped connection (an error without an answer): for a post only when it was
          refused (nothing was sent).
        """
        if response is not None and response.status_code == 429:
            wait = _retry_after(_header(response.headers, "retry-after")).total_seconds()
            return wait if wait <= self._max_wait else None
        if response is not None and response.status_code in (500, 503):
            repeat = not _is_post(request)
        elif isinstance(error, _CONNECTION_ERRORS) and not (
            isinstance(error, URLError) and response is not None  # an answer: a 4xx
        ):
            refused = isinstance(error, URLError) and isinstance(
                error.reason, ConnectionRefusedError
            )
            repeat = refused or not _is_post(request)
        else:
            return None
        if not repeat:
            return None
        return self.interval_calculator.calculate_sleep_duration(state.current_attempt)


def _mask(value: Any, redact: Redactor) -> Any:
    """``value`` (blocks: dicts, lists, strings) with every string passed through ``redact``."""
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, list):
        return [_mask(item, redact) for item in value]
    if isinstance(value, dict):
        return {key: _mask(item, redact) for key, item in value.items()}
    return value
