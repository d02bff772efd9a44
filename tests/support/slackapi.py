"""A fake Slack Web API over real HTTP on 127.0.0.1, for tests of everything that talks to Slack.

It answers as Slack does (HTTP 200 with ``ok: true``/``ok: false``, 429 with
``Retry-After``, 5xx with an HTML body), checks the bearer token, keeps the messages it was
sent (with their metadata and threads) and records every call, so slack-sdk's real
``WebClient`` runs unchanged against it::

    with SlackApi(clock=lambda: T0.timestamp()) as slack:
        client = WebClient(token=slack.bot_token, base_url=slack.base_url)
        slack.fail("chat.postMessage", status=500, times=2)
        ...
        assert [m.text for m in slack.messages()] == [...]

Implemented: ``auth.test``, ``chat.postMessage``, ``chat.update``, ``conversations.history``
and ``conversations.replies`` (cursor paging, ``oldest``, ``include_all_metadata``), and
``apps.connections.open`` (the app token, a settable Socket Mode ``url``). Anything else
answers ``unknown_method``. Message timestamps follow ``clock``, so a test's fixed time
and the ``oldest`` of a history search agree.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from tests.support.servers import Started

BOT_TOKEN = "xoxb-test-token"
APP_TOKEN = "xapp-test-token"
CHANNEL = "C0RELEASES"


@dataclass(frozen=True)
class Call:
    method: str
    args: dict[str, Any]
    token: str | None
    status: int
    error: str | None
    """Slack's ``error`` code when the answer was not ``ok``."""


@dataclass
class Message:
    channel: str
    ts: str
    text: str
    blocks: list[dict[str, Any]]
    metadata: dict[str, Any] | None
    thread_ts: str | None = None
    updates: int = 0
    """How many times ``chat.update`` edited it."""


@dataclass
class _Failure:
    method: str | None
    remaining: int
    status: int
    error: str | None
    retry_after: int | None
    processed: bool


@dataclass
class _Answer:
    status: int
    body: dict[str, Any] | str
    headers: dict[str, str] = field(default_factory=dict)


class SlackApi(Started):
    """The fake Web API; ``base_url`` is what ``WebClient(base_url=...)`` takes."""

    def __init__(
        self,
        *,
        bot_token: str = BOT_TOKEN,
        app_token: str = APP_TOKEN,
        channels: tuple[str, ...] = (CHANNEL,),
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.bot_token = bot_token
        self.app_token = app_token
        self.channels = set(channels)
        self.socket_url = "ws://127.0.0.1:9/"
        """What ``apps.connections.open`` answers (point it at a local websocket server)."""
        self._clock = clock
        self._lock = threading.Lock()
        self._calls: list[Call] = []
        self._messages: list[Message] = []
        self._failures: list[_Failure] = []
        self._raw: list[tuple[str | None, _Answer, bytes]] = []
        self._last_ts = 0.0
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle -----------------------------------------------------------------------

    def start(self) -> SlackApi:
        server = ThreadingHTTPServer(("127.0.0.1", 0), _handler_for(self))
        server.daemon_threads = True
        self._server = server
        self._thread = threading.Thread(
            target=server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._server = self._thread = None

    @property
    def base_url(self) -> str:
        assert self._server is not None, "SlackApi is not started"
        return f"http://127.0.0.1:{self._server.server_address[1]}/api/"

    # -- what tests set and read -------------------------------------------------------------

    def fail(
        self,
        method: str | None = None,
        *,
        times: int = 1,
        status: int = 200,
        error: str | None = None,
        retry_after: int | None = None,
        processed: bool = False,
    ) -> None:
        """The next ``times`` calls of ``method`` (any when ``None``) fail: with HTTP
        ``status`` (429 answers ``Retry-After: retry_after``), or ``ok: false, error``.

        ``processed``: the call takes effect, and only its answer is the failure (Slack
        posted the message, then the load balancer answered 500)."""
        with self._lock:
            self._failures.append(_Failure(method, times, status, error, retry_after, processed))

    def answer_raw(
        self, method: str | None, status: int, body: bytes, headers: dict[str, str]
    ) -> None:
        """Every call of ``method`` (any when ``None``) answers these exact bytes and headers
        (``Content-Type`` included) until ``heal``: hostile answers, for tests."""
        with self._lock:
            self._raw.append((method, _Answer(status, "", dict(headers)), body))

    def heal(self) -> None:
        """Forget every failure not yet served."""
        with self._lock:
            self._raw.clear()
            self._failures.clear()

    def delete(self, ts: str, channel: str = CHANNEL) -> None:
        """A person deleted the message ``ts``."""
        with self._lock:
            self._messages = [m for m in self._messages if (m.channel, m.ts) != (channel, ts)]

    def calls(self, method: str | None = None) -> list[Call]:
        with self._lock:
            return [c for c in self._calls if method is None or c.method == method]

    def messages(self, channel: str = CHANNEL) -> list[Message]:
        """The channel's top-level messages, oldest first."""
        with self._lock:
            return [m for m in self._messages if m.channel == channel and m.thread_ts is None]

    def replies(self, ts: str, channel: str = CHANNEL) -> list[Message]:
        """The replies in the thread of ``ts``, oldest first (without the parent)."""
        with self._lock:
            return [m for m in self._messages if m.channel == channel and m.thread_ts == ts]

    # -- answering ---------------------------------------------------------------------------

    def _answer(self, method: str, args: dict[str, Any], token: str | None) -> _Answer:
        with self._lock:
            injected = self._injected(method)
            if injected is None:
                answer = self._dispatch(method, args, token)
            else:
                answer, processed = injected
                if processed:
                    self._dispatch(method, args, token)
            error = answer.body.get("error") if isinstance(answer.body, dict) else "http"
            self._calls.append(Call(method, args, token, answer.status, error))
            return answer

    def _raw_answer(
        self, method: str, args: dict[str, Any], token: str | None
    ) -> tuple[_Answer, bytes] | None:
        with self._lock:
            for wanted, answer, body in self._raw:
                if wanted in (None, method):
                    self._calls.append(Call(method, args, token, answer.status, "raw"))
                    return answer, body
        return None

    def _injected(self, method: str) -> tuple[_Answer, bool] | None:
        """The injected answer for this call, and whether the call takes effect anyway."""
        for failure in self._failures:
            if failure.remaining > 0 and failure.method in (None, method):
                failure.remaining -= 1
                if failure.status == 429:
                    headers = {"Retry-After": str(failure.retry_after or 1)}
                    answer = _Answer(429, {"ok": False, "error": "ratelimited"}, headers)
                elif failure.status >= 500:
                    answer = _Answer(failure.status, "<html><body>Server Error</body></html>")
                else:
                    answer = _Answer(failure.status, {"ok": False, "error": failure.error})
                return answer, failure.processed
        return None

    def _dispatch(self, method: str, args: dict[str, Any], token: str | None) -> _Answer:
        expected = self.app_token if method == "apps.connections.open" else self.bot_token
        if token is None:
            return _error("not_authed")
        if token != expected:
            return _error("invalid_auth")
        handler = _METHODS.get(method)
        return _error("unknown_method") if handler is None else handler(self, args)

    def _new_ts(self) -> str:
        self._last_ts = max(self._clock(), self._last_ts + 0.000001)
        return f"{self._last_ts:.6f}"

    def _find(self, channel: str, ts: str) -> Message | None:
        return next((m for m in self._messages if m.channel == channel and m.ts == ts), None)

    def _auth_test(self, args: dict[str, Any]) -> _Answer:
        return _ok(url="https://fake.slack.test/", team="test", user="releasebot", user_id="U0BOT")

    def _post_message(self, args: dict[str, Any]) -> _Answer:
        channel = str(args.get("channel", ""))
        if channel not in self.channels:
            return _error("channel_not_found")
        text, blocks = str(args.get("text") or ""), _json_arg(args.get("blocks")) or []
        problem = _check_message(text, blocks)
        if problem:
            return _error(problem)
        thread_ts = args.get("thread_ts")
        if thread_ts is not None and self._find(channel, str(thread_ts)) is None:
            return _error("thread_not_found")
        message = Message(
            channel=channel,
            ts=self._new_ts(),
            text=text,
            blocks=blocks,
            metadata=_json_arg(args.get("metadata")),
            thread_ts=None if thread_ts is None else str(thread_ts),
        )
        self._messages.append(message)
        return _ok(channel=channel, ts=message.ts, message=_shown(message, metadata=False))

    def _update(self, args: dict[str, Any]) -> _Answer:
        channel = str(args.get("channel", ""))
        if channel not in self.channels:
            return _error("channel_not_found")
        message = self._find(channel, str(args.get("ts", "")))
        if message is None:
            return _error("message_not_found")
        text, blocks = str(args.get("text") or ""), _json_arg(args.get("blocks")) or []
        problem = _check_message(text, blocks)
        if problem:
            return _error(problem)
        message.text, message.blocks, message.updates = text, blocks, message.updates + 1
        if args.get("metadata") is not None:
            message.metadata = _json_arg(args["metadata"])
        return _ok(channel=channel, ts=message.ts, text=text)

    def _history(self, args: dict[str, Any]) -> _Answer:
        channel = str(args.get("channel", ""))
        if channel not in self.channels:
            return _error("channel_not_found")
        oldest = float(args.get("oldest") or 0)
        found = [
            m
            for m in self._messages
            if m.channel == channel and m.thread_ts is None and float(m.ts) > oldest
        ]
        return _page(list(reversed(found)), args)

    def _replies(self, args: dict[str, Any]) -> _Answer:
        channel = str(args.get("channel", ""))
        if channel not in self.channels:
            return _error("channel_not_found")
        parent = self._find(channel, str(args.get("ts", "")))
        if parent is None:
            return _error("thread_not_found")
        thread = [m for m in self._messages if m.channel == channel and m.thread_ts == parent.ts]
        return _page([parent, *thread], args)

    def _connections_open(self, args: dict[str, Any]) -> _Answer:
        return _ok(url=self.socket_url)


_METHODS: dict[str, Callable[[SlackApi, dict[str, Any]], _Answer]] = {
    "auth.test": SlackApi._auth_test,
    "chat.postMessage": SlackApi._post_message,
    "chat.update": SlackApi._update,
    "conversations.history": SlackApi._history,
    "conversations.replies": SlackApi._replies,
    "apps.connections.open": SlackApi._connections_open,
}


def _ok(**fields: Any) -> _Answer:
    return _Answer(200, {"ok": True, **fields})


def _error(code: str) -> _Answer:
    return _Answer(200, {"ok": False, "error": code})


def _page(messages: list[Message], args: dict[str, Any]) -> _Answer:
    start = int(args.get("cursor") or 0)
    limit = int(args.get("limit") or 100)
    chunk = messages[start : start + limit]
    more = start + limit < len(messages)
    metadata = _true(args.get("include_all_metadata"))
    return _ok(
        messages=[_shown(m, metadata=metadata) for m in chunk],
        has_more=more,
        response_metadata={"next_cursor": str(start + limit) if more else ""},
    )


def _shown(message: Message, *, metadata: bool) -> dict[str, Any]:
    shown: dict[str, Any] = {
        "type": "message",
        "user": "U0BOT",
        "bot_id": "B0BOT",
        "ts": message.ts,
        "text": message.text,
        "blocks": message.blocks,
    }
    if message.thread_ts is not None:
        shown["thread_ts"] = message.thread_ts
    if metadata and message.metadata is not None:
        shown["metadata"] = message.metadata
    return shown


def _check_message(text: str, blocks: Any) -> str | None:
    if len(text) > 40000:
        return "msg_too_long"
    if not isinstance(blocks, list) or len(blocks) > 50:
        return "invalid_blocks"
    if any(not isinstance(block, dict) or "type" not in block for block in blocks):
        return "invalid_blocks"
    return None


def _json_arg(value: Any) -> Any:
    """Form-encoded calls send blocks and metadata as JSON strings, JSON calls as objects."""
    return json.loads(value) if isinstance(value, str) else value


def _true(value: Any) -> bool:
    return value is True or str(value).lower() in ("1", "true")


def _handler_for(api: SlackApi) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self._serve()

        def do_POST(self) -> None:
            self._serve()

        def _serve(self) -> None:
            parts = urlsplit(self.path)
            args: dict[str, Any] = dict(parse_qsl(parts.query))
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else b""
            if body:
                if (self.headers.get("Content-Type") or "").startswith("application/json"):
                    args.update(json.loads(body))
                else:
                    args.update(parse_qsl(body.decode()))
            auth = self.headers.get("Authorization") or ""
            token = auth.removeprefix("Bearer ") if auth.startswith("Bearer ") else None
            method = parts.path.removeprefix("/api/")
            raw = api._raw_answer(method, args, token)
            if raw is not None:
                self.send_response(raw[0].status)
                for name, value in raw[0].headers.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(raw[1])))
                self.end_headers()
                self.wfile.write(raw[1])
                return
            answer = api._answer(method, args, token)
            if isinstance(answer.body, dict):
                data, kind = json.dumps(answer.body).encode(), "application/json; charset=utf-8"
            else:
                data, kind = answer.body.encode(), "text/html; charset=utf-8"
            self.send_response(answer.status)
            self.send_header("Content-Type", kind)
            for name, value in answer.headers.items():
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: Any) -> None:
            pass  # keep test output clean

    return Handler
