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

It is the standard library's ``ThreadingHTTPServer`` (one thread per request, daemon
threads), with a socket timeout per request so a slow client cannot hold a thread, and a
body limit (413 above it) so nobody can make it buffer megabytes. A callable that raises
answers 500 with no detail (the error is logged). Every request first has its ``Host``
checked (``web/hosts.py``: DNS rebinding): one the server does not answer for is a 421
before any route runs. Deliberately not here: TLS (the
Ingress terminates it), authentication (Slack requests are verified by the handler by
their signature; probes and metrics are cluster-internal), keep-alive.
"""

from __future__ import annotations

import contextlib
import logging
import socket
import threading
from collections.abc import Callable, Mapping, Sequence
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from releasebot.web.overview import OverviewApp

from releasebot.domain.untrusted import quoted
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
"""Per socket operation. Slack waits 3 s for an answer; probes time out after 1 s."""
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
        handler = type("Handler", (_Handler,), {"app": self, "timeout": timeout})
        family_host = host.strip("[]")
        server_class = _IPv6Server if ":" in family_host else _Server
        self._server = server_class((family_host, port), handler)
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


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True


class _IPv6Server(_Server):
    address_family = socket.AF_INET6


class _Handler(BaseHTTPRequestHandler):
    app: HttpServer
    server_version = "releasebot"
    sys_version = ""
    protocol_version = "HTTP/1.0"  # one request per connection: no idle keep-alive threads

    def do_GET(self) -> None:
        if not self._host_allowed():
            return
        path = self.path.split("?", 1)[0]
        app = self.app
        if app.pages is not None and app.pages.owns(path):
            pages = app.pages
            headers = self._headers()
            answer = self._call(lambda: pages(self.path, headers))
            if answer is None:
                self._text(HTTPStatus.INTERNAL_SERVER_ERROR, "internal error")
            else:
                self._send(answer.status, answer.content_type, answer.body, answer.headers)
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
