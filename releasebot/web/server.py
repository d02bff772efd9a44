"""``HttpServer``: probes, metrics and the Slack command endpoint on one port.

Routes:

- ``GET /healthz``: 200 while the process loop is alive (``alive()``), else 503. The
  kubelet restarts the container when it fails.
- ``GET /readyz``: 200 when ``ready()`` says so, else 503 with the reason as text.
- ``GET /metrics``: the Prometheus text format from ``metrics()``.
- the coverage page and its JSON API (``web/overview.py``) when ``pages`` is given: ``/``,
  ``/static/...``, ``/api/...``; GET and HEAD only.
- ``POST /slack/commands``: the RAW body and the headers go to ``slack(body, headers)``,
  which answers ``(status, content type, body)``; Slack signs the raw bytes, so nothing
  here parses them. 404 when no handler is mounted.

It is the standard library's ``ThreadingHTTPServer`` (one daemon thread per connection),
made to stay answerable under a crowd, because the kubelet restarts the container when
``/healthz`` misses its 3 s timeout:

- the listen backlog is ``LISTEN_BACKLOG`` (1024), not the standard library's 5: a burst
  of connections (a thousand browsers refreshing, a scraper) waits in the kernel's queue
  while the accept loop catches up, instead of having its SYNs dropped and retried 1, 3,
  7, 15 s later, which is how a probe went unanswered behind a crowd;
- probes, metrics and the static page get a thread at once and do no page work; an API
  answer kept and still current (``OverviewApp.quick``: one read of the store's change
  counters, then the kept bytes or a 304) is sent at once too; the page's expensive
  answers (``OverviewApp.costly``: the JSON API built from the store) are built by one
  client per answer while the others asking for it wait for that build, and the builds are
  limited to ``max_costly`` at once (Python runs one thread at a time: more in parallel
  only slows each and starves the probes), ``max_waiting`` more wait up to
  ``costly_wait`` for a turn, and the rest get ``503`` with ``Retry-After`` at once;
- every connection has a deadline: the request head and body must arrive within
  ``timeout`` of the connection's acceptance (not per socket read: a client trickling a
  byte every few seconds is cut off all the same), and each write of the answer is
  bounded by ``timeout`` too, so a slow or stalled client cannot hold a thread;
- at most ``max_connections`` connections are served at once; one more is answered
  ``503`` by the accept loop and closed, so a flood cannot make threads without end;
- a body limit (413 above it) so nobody can make it buffer megabytes.

Every request first has its ``Host`` checked (``web/hosts.py``: DNS rebinding): one the
server does not answer for is a 421 before any route runs. A callable that raises answers
500 with no detail (the error is logged). Deliberately not here: TLS (the Ingress
terminates it), authentication (Slack requests are verified by the handler by their
signature; probes and metrics are cluster-internal), keep-alive.
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import socket
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from releasebot.web.overview import OverviewApp

from releasebot.domain.shared.untrusted import quoted
from releasebot.edge.parse import ValueRefusedError, parse_content_length
from releasebot.web.hosts import HostPolicy

log = logging.getLogger("releasebot.web")

SlackHandler = Callable[[bytes, Mapping[str, str]], tuple[int, str, bytes]]
"""``(raw body, headers with lower-case names) -> (status, content type, body)``."""

METRICS_CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
MAX_BODY_BYTES = 64 * 1024
"""A slash command's form body is well under 4 KiB; Slack's own limit for the text is 4000
characters. Anything bigger is not Slack."""
REQUEST_TIMEOUT_SECONDS = 10.0
"""How long a client has to send its whole request (head and body) from the moment its
connection is accepted, and the longest one write of the answer may take. Slack waits 3 s
for an answer; the probes time out after 2-3 s; a browser sends a request in milliseconds."""
LISTEN_BACKLOG = 1024
"""Connections the kernel queues before the accept loop takes them (Linux caps it at
``net.core.somaxconn``, 4096 by default since 5.4). Enough for a burst of a thousand
connections at once; the accept loop only hands each to a thread, so the queue drains in
milliseconds."""
MAX_CONNECTIONS = 1024
"""Connections served at once (one thread each); each lasts at most a few ``timeout``s."""
MAX_COSTLY = 2
"""Expensive page answers computed at once. They are Python work under one interpreter
lock: a third in parallel does not finish sooner, it only slows the others and the probes."""
MAX_WAITING = 8
"""Expensive requests that wait for a turn beyond ``MAX_COSTLY``; more get 503 at once."""
COSTLY_WAIT_SECONDS = 5.0
"""How long such a request waits for its turn before it gets 503."""
RETRY_AFTER_SECONDS = 2
"""What a 503 for a busy page asks the client to wait (the page refreshes by itself)."""
BUSY = "the page is busy answering other requests; try again in a few seconds"
MAX_TOLD_HOSTS = 64
"""Refused ``Host`` values logged (once each): enough to see a misconfigured Ingress, too
few for a flood of made-up names to flood the log."""


class HttpServer:
    """Serves the routes above on ``host:port`` from a background thread."""

    def __init__(
        self,
        host: str,
        port: int,
        *,
        alive: Callable[[], bool] | None = None,
        ready: Callable[[], tuple[bool, str]] | None = None,
        metrics: Callable[[], bytes] | None = None,
        slack: SlackHandler | None = None,
        pages: OverviewApp | None = None,
        max_body: int = MAX_BODY_BYTES,
        timeout: float = REQUEST_TIMEOUT_SECONDS,
        allowed_hosts: Sequence[str] = (),
        max_connections: int = MAX_CONNECTIONS,
        max_costly: int = MAX_COSTLY,
        max_waiting: int = MAX_WAITING,
        costly_wait: float = COSTLY_WAIT_SECONDS,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        """``allowed_hosts``: names a request's ``Host`` may say besides ``localhost``,
        loopback and the listen address (``web.allowed_hosts``; see ``web/hosts.py``)."""
        self.hosts = HostPolicy(host, allowed_hosts)
        self.told_hosts: set[str] = set()
        self._told_lock = threading.Lock()
        self.alive = alive
        self.ready = ready
        self.metrics = metrics
        self.slack = slack
        self.pages = pages
        self.max_body = max_body
        self.timeout = timeout
        self.monotonic = monotonic
        self.costly = TurnLimit(max_costly, max_waiting, costly_wait)
        handler = type("Handler", (_Handler,), {"app": self, "timeout": timeout})
        family_host = host.strip("[]")
        server_class = _IPv6Server if ":" in family_host else _Server
        self._server = server_class((family_host, port), handler)
        self._server.connections = threading.BoundedSemaphore(max_connections)
        self._thread: threading.Thread | None = None

    def refused_host(self, host: str) -> None:
        """Log a refused ``Host`` once (at most ``MAX_TOLD_HOSTS`` distinct ones)."""
        shown = quoted(host, limit=80)
        with self._told_lock:
            if shown in self.told_hosts or len(self.told_hosts) >= MAX_TOLD_HOSTS:
                return
            self.told_hosts.add(shown)
        log.warning(
            "refused a request for Host %s (421): not localhost, a loopback or this "
            "server's address, nor in web.allowed_hosts; add an Ingress's name there",
            shown,
        )

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    def start(self) -> HttpServer:
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            kwargs={"poll_interval": 0.2},
            name="http-server",
            daemon=True,
        )
        self._thread.start()
        log.info("serving HTTP", extra={"port": self.port})
        return self

    def close(self) -> None:
        """Stop accepting, wait for the accept loop, close the socket. Idempotent."""
        if self._thread is not None:
            self._server.shutdown()
            self._thread.join(timeout=5)
            self._thread = None
        self._server.server_close()


class TurnLimit:
    """At most ``running`` holders at once; ``waiting`` more may wait up to ``wait`` s."""

    def __init__(self, running: int, waiting: int, wait: float) -> None:
        self._running, self._waiting, self._wait = running, waiting, wait
        self._busy = 0
        self._queued = 0
        self._changed = threading.Condition()

    @property
    def wait(self) -> float:
        """How long a block may wait for its turn, in seconds."""
        return self._wait

    @property
    def waiting(self) -> int:
        """Blocks waiting for a turn right now."""
        return self._queued

    def wait_for_waiting(self, count: int, timeout: float) -> bool:
        """Wait until ``count`` blocks wait for a turn (tests); False after ``timeout`` s."""
        with self._changed:
            return self._changed.wait_for(lambda: self._queued >= count, timeout)

    @contextlib.contextmanager
    def turn(self) -> Iterator[bool]:
        """Yields whether the block got its turn (False: answer "busy" and do nothing)."""
        with self._changed:
            granted = self._busy < self._running
            if not granted and self._queued < self._waiting and self._wait > 0:
                self._queued += 1
                self._changed.notify_all()  # for ``wait_for_waiting``
                try:
                    granted = self._changed.wait_for(lambda: self._busy < self._running, self._wait)
                finally:
                    self._queued -= 1
            if granted:
                self._busy += 1
        try:
            yield granted
        finally:
            if granted:
                with self._changed:
                    self._busy -= 1
                    self._changed.notify_all()  # waiters check for a free turn


_TOO_MANY = b"too many connections at once; try again in a few seconds\n"
_REFUSED = (
    b"HTTP/1.0 503 Service Unavailable\r\nContent-Type: text/plain; charset=utf-8\r\n"
    b"Retry-After: %d\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s"
    % (RETRY_AFTER_SECONDS, len(_TOO_MANY), _TOO_MANY)
)
"""What the accept loop sends a connection beyond ``max_connections``, without reading."""


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = LISTEN_BACKLOG
    connections: threading.BoundedSemaphore

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self.connections.acquire(blocking=False):
            # Full: a short answer from the accept loop, never a wait (nothing is read).
            with contextlib.suppress(OSError):
                request.setblocking(False)
                request.send(_REFUSED)
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self.connections.release()  # no thread started: the slot is free again
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self.connections.release()


class _IPv6Server(_Server):
    address_family = socket.AF_INET6


class _Handler(BaseHTTPRequestHandler):
    app: HttpServer
    server_version = "releasebot"
    sys_version = ""
    protocol_version = "HTTP/1.0"  # one request per connection: no idle keep-alive threads

    def setup(self) -> None:
        super().setup()
        # The whole request must arrive by the deadline, however it trickles in.
        app = self.app
        self.rfile.close()
        raw = _DeadlineReader(self.connection, app.monotonic() + app.timeout, app)
        self.rfile = io.BufferedReader(raw)

    def do_GET(self) -> None:
        if not self._host_allowed():
            return
        path = self.path.split("?", 1)[0]
        app = self.app
        if app.pages is not None and app.pages.owns(path):
            if app.pages.costly(path):
                if not self._page(app.pages, quick=True):  # kept: no turn, else built
                    self._page(app.pages, turns=app.costly)
            else:
                self._page(app.pages)
        elif path == "/healthz" and app.alive is not None:
            ok = self._call(app.alive)
            self._text(
                HTTPStatus.OK if ok else HTTPStatus.SERVICE_UNAVAILABLE, "ok" if ok else "dead"
            )
        elif path == "/readyz" and app.ready is not None:
            ready, why = self._call(app.ready) or (False, "readiness check failed")
            self._text(HTTPStatus.OK if ready else HTTPStatus.SERVICE_UNAVAILABLE, why or "ready")
        elif path == "/metrics" and app.metrics is not None:
            body = self._call(app.metrics)
            if body is None:
                self._text(HTTPStatus.INTERNAL_SERVER_ERROR, "metrics failed")
            else:
                self._send(HTTPStatus.OK, METRICS_CONTENT_TYPE, body)
        else:
            self._text(HTTPStatus.NOT_FOUND, "not found")

    do_HEAD = do_GET

    def _page(
        self, pages: OverviewApp, *, quick: bool = False, turns: TurnLimit | None = None
    ) -> bool:
        """Answer from ``pages``; with ``quick`` only what costs no page work (a kept
        answer, a 304): False when nothing was sent, and the answer must be built. The
        builder of an expensive answer takes one of ``turns`` (``pages`` asks for it only
        when it builds: clients waiting for the same answer wait for that build, not for
        turns of their own); no turn is "busy", a 503 in the API's own shape."""
        headers = self._headers()
        try:
            if quick:
                answer = pages.quick(self.path, headers)
                if answer is None:
                    return False  # to be built
            else:
                answer = pages(self.path, headers, turns)
                if answer is None:  # the page shows ``error``, and asks again
                    self._send(
                        HTTPStatus.SERVICE_UNAVAILABLE,
                        "application/json",
                        json.dumps({"error": BUSY}).encode(),
                        {"Retry-After": str(RETRY_AFTER_SECONDS)},
                    )
                    return True
        except Exception:  # one failing route must not kill the server (logged)
            log.exception("HTTP handler failed", extra={"path": self.path[:200]})
            if quick:
                return False  # the full call says so, once
            self._text(HTTPStatus.INTERNAL_SERVER_ERROR, "internal error")
            return True
        self._send(answer.status, answer.content_type, answer.body, answer.headers)
        return True

    def do_POST(self) -> None:
        if not self._host_allowed():
            return
        path = self.path.split("?", 1)[0]
        slack = self.app.slack
        if path != "/slack/commands" or slack is None:
            self._text(HTTPStatus.NOT_FOUND, "not found")
            return
        try:
            length = parse_content_length(self.headers.get("Content-Length"))
        except ValueRefusedError:
            self._text(HTTPStatus.BAD_REQUEST, "Content-Length must be ASCII digits")
            return
        if length is None:
            self._text(HTTPStatus.LENGTH_REQUIRED, "Content-Length required")
            return
        if length > self.app.max_body:
            self._text(HTTPStatus.REQUEST_ENTITY_TOO_LARGE, "body too large")
            return
        body = self.rfile.read(length)
        headers = self._headers()
        answer = self._call(lambda: slack(body, headers))
        if answer is None:
            self._text(HTTPStatus.INTERNAL_SERVER_ERROR, "internal error")
            return
        status, content_type, payload = answer
        self._send(status, content_type, payload)

    def _host_allowed(self) -> bool:
        """Answer 421 and return False unless the request's ``Host`` is one this server
        answers for (``web/hosts.py``): before any route, so DNS rebinding reads nothing."""
        values = self.headers.get_all("Host") or []
        host = values[0] if len(values) == 1 else None
        if len(values) <= 1 and self.app.hosts.allows(host):
            return True
        self.app.refused_host(", ".join(values))
        self._text(HTTPStatus.MISDIRECTED_REQUEST, "misdirected request: unknown Host")
        return False

    def _headers(self) -> dict[str, str]:
        """The request's headers by lower-case name; a repeated header's values joined with
        ``", "`` (RFC 9110's combined field value), so no route silently reads only the
        first or the last of two signatures, timestamps or ``If-None-Match`` values."""
        headers: dict[str, str] = {}
        for name, value in self.headers.items():
            key = name.lower()
            headers[key] = f"{headers[key]}, {value}" if key in headers else value
        return headers

    def _call(self, function: Callable[[], Any]) -> Any:
        try:
            return function()
        except Exception:  # one failing route must not kill the server (logged)
            log.exception("HTTP handler failed", extra={"path": self.path[:200]})
            return None

    def _text(self, status: int, text: str) -> None:
        self._send(status, "text/plain; charset=utf-8", (text + "\n").encode())

    def _send(
        self, status: int, content_type: str, body: bytes, headers: Mapping[str, str] = {}
    ) -> None:
        # Each write (the head, then the body) is one ``sendall``, which the socket's
        # timeout bounds as a whole: a client that stops reading is cut off.
        self.connection.settimeout(self.app.timeout)
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-cache" if "ETag" in headers else "no-store")
        for name, value in headers.items():
            self.send_header(name, value)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def handle(self) -> None:
        # A client that went away mid-request (a probe timing out): nothing left to tell it.
        with contextlib.suppress(OSError):
            super().handle()

    def log_message(self, format: str, *args: Any) -> None:
        pass  # probes every few seconds would drown the decisions; errors are logged above


class _DeadlineReader(io.RawIOBase):
    """A connection's reads, each bounded by what is left until ``deadline``."""

    def __init__(self, connection: socket.socket, deadline: float, app: HttpServer) -> None:
        super().__init__()
        self._connection = connection
        self._deadline = deadline
        self._app = app

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        left = self._deadline - self._app.monotonic()
        if left <= 0:
            raise TimeoutError(f"the request took longer than {self._app.timeout:g} s")
        self._connection.settimeout(min(left, self._app.timeout))
        return self._connection.recv_into(buffer)
