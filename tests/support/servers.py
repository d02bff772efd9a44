"""What every local test server shares: ``with Server() as server`` starts and stops it."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Self


class Started:
    """A ``start()``/``stop()`` pair used as a context manager; ``start`` returns self."""

    def start(self) -> Self:
        raise NotImplementedError

    def stop(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


class QuietHandler(BaseHTTPRequestHandler):
    """A request handler that logs nothing and answers with one call."""

    def log_message(self, format: str, *args: object) -> None:
        pass

    def answer(
        self, status: int, headers: dict[str, str], body: bytes, length: int | None = None
    ) -> None:
        """``body`` with ``headers``; ``length`` for a HEAD that names a body it does not send."""
        self.send_response(status)
        for key, value in headers.items():
            self.send_header(key, value)
        self.send_header("Content-Length", str(len(body) if length is None else length))
        self.end_headers()
        if body:
            self.wfile.write(body)


@contextmanager
def serving(handler: type[BaseHTTPRequestHandler]) -> Iterator[str]:
    """``handler`` served on 127.0.0.1 on a free port, in a thread; yields ``host:port``."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
