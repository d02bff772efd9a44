"""A small real HTTP server on 127.0.0.1 that plays a feed upstream in tests.

Tests (fetcher, end-to-end plan tests, the benchmark) set routes on it and read back what
it received, so they exercise the real httpx stack, real sockets and real redirects
instead of mocks. It serves from a thread on a random free port::

    with FeedServer() as server:
        server.route("/releases-stable.json", FeedServer.static(body, etag='"v1"'))
        url = server.url("/releases-stable.json")

A route is a fixed ``Reply`` or a callable taking the ``RecordedRequest`` and returning one.
It deliberately does not implement HTTP beyond what the tests need (GET and HEAD, HTTP/1.0:
one request per connection).
"""

from __future__ import annotations

import contextlib
import ssl
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from tests.support.servers import Started


@dataclass(frozen=True)
class Reply:
    """What the server answers. ``delay`` (seconds) holds the answer back, to test timeouts;
    ``content_length`` overrides the header, to cut a body short of what it announces;
    ``trickle`` (seconds) is the pause before each byte of the body, to test deadlines."""

    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes = b""
    delay: float = 0.0
    content_length: int | None = None
    trickle: float = 0.0


@dataclass(frozen=True)
class RecordedRequest:
    method: str
    path: str
    headers: dict[str, str]
    """Header names lower-cased."""


Route = Reply | Callable[[RecordedRequest], Reply]


class FeedServer(Started):
    """A threaded HTTP server with settable routes; unknown paths answer 404."""

    def __init__(self, *, tls: tuple[Path, Path] | None = None) -> None:
        """``tls``: (certificate, key) files to serve https instead of http."""
        self._tls = tls
        self._routes: dict[str, Route] = {}
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self.requests: list[RecordedRequest] = []
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle ---------------------------------------------------------------------

    def start(self) -> FeedServer:
        self._stopping.clear()
        server = ThreadingHTTPServer(("127.0.0.1", 0), _handler_for(self))
        server.daemon_threads = True
        if self._tls is not None:
            context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
            context.load_cert_chain(*self._tls)
            server.socket = context.wrap_socket(server.socket, server_side=True)
        self._server = server
        self._thread = threading.Thread(
            target=server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopping.set()  # wakes delayed replies so no handler outlives the test
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._server = None
        self._thread = None

    # -- configuration -----------------------------------------------------------------

    @property
    def port(self) -> int:
        assert self._server is not None, "FeedServer is not started"
        return int(self._server.server_address[1])

    def url(self, path: str) -> str:
        scheme = "https" if self._tls is not None else "http"
        return f"{scheme}://127.0.0.1:{self.port}{path}"

    def route(self, path: str, route: Route) -> None:
        with self._lock:
            self._routes[path] = route

    def requests_to(self, path: str) -> list[RecordedRequest]:
        with self._lock:
            return [request for request in self.requests if request.path == path]

    # -- ready-made routes -------------------------------------------------------------

    @staticmethod
    def static(
        body: bytes,
        *,
        etag: str | None = None,
        last_modified: str | None = None,
        content_type: str = "application/json",
    ) -> Callable[[RecordedRequest], Reply]:
        """A file as a web server serves it: 304 when a conditional header matches."""
        headers = {"Content-Type": content_type}
        if etag is not None:
            headers["ETag"] = etag
        if last_modified is not None:
            headers["Last-Modified"] = last_modified
        cached = {name: value for name, value in headers.items() if name != "Content-Type"}

        def answer(request: RecordedRequest) -> Reply:
            if_none_match = request.headers.get("if-none-match")
            if_modified_since = request.headers.get("if-modified-since")
            if etag is not None and if_none_match is not None:
                if if_none_match == etag:
                    return Reply(304, cached)
            elif last_modified is not None and if_modified_since == last_modified:
                return Reply(304, cached)
            return Reply(200, headers, body)

        return answer

    @staticmethod
    def sequence(*replies: Reply) -> Callable[[RecordedRequest], Reply]:
        """Each request gets the next reply; the last one repeats."""
        pending: Iterator[Reply] = iter(replies)
        last = replies[-1]
        lock = threading.Lock()

        def answer(_request: RecordedRequest) -> Reply:
            with lock:
                return next(pending, last)

        return answer

    @staticmethod
    def redirect(location: str, status: int = 302) -> Reply:
        return Reply(status, {"Location": location})

    # -- serving -----------------------------------------------------------------------

    def _answer(self, request: RecordedRequest) -> Reply:
        with self._lock:
            self.requests.append(request)
            route = self._routes.get(request.path)
        if route is None:
            return Reply(404, {"Content-Type": "text/plain"}, b"not found\n")
        return route(request) if callable(route) else route


def _handler_for(server: FeedServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_HEAD(self) -> None:
            self._reply("HEAD")

        def do_GET(self) -> None:
            self._reply("GET")

        def do_POST(self) -> None:  # plays any JSON-over-POST API (Slack's) in hostile tests
            length = self.headers.get("Content-Length", "")
            if length.isascii() and length.isdigit():
                self.rfile.read(int(length))
            self._reply("POST")

        def _reply(self, method: str) -> None:
            request = RecordedRequest(
                method=method,
                path=self.path,
                headers={name.lower(): value for name, value in self.headers.items()},
            )
            reply = server._answer(request)
            if reply.delay and server._stopping.wait(reply.delay):
                return
            self.send_response(reply.status)
            for name, value in reply.headers.items():
                self.send_header(name, value)
            length = len(reply.body) if reply.content_length is None else reply.content_length
            self.send_header("Content-Length", str(length))
            self.end_headers()
            if method == "HEAD":
                return
            if not reply.trickle:
                self.wfile.write(reply.body)
                return
            for index in range(len(reply.body)):
                if server._stopping.wait(reply.trickle):
                    return
                self.wfile.write(reply.body[index : index + 1])

        def log_message(self, format: str, *args: Any) -> None:
            pass  # keep test output clean

        def handle(self) -> None:
            # A client that timed out and closed its socket: nothing left to tell it.
            with contextlib.suppress(OSError):
                super().handle()

    return Handler
