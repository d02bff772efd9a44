"""Enforce a deadline on one httpx request whose reads are each within the timeout, and
end it at once when the process shuts down (``stop``, hooked to ``edge.stop.Halt``).

Split out of ``sources/fetch.py`` because it is the one piece that reaches below httpx (to
httpcore's ``trace`` extension and the socket). Deliberately not here: what the deadline is,
and the error reported (the fetcher decides both).
"""

from __future__ import annotations

import contextlib
import socket
import threading
from types import TracebackType
from typing import Any


class Watchdog:
    """Shuts down the connection of one request when the fetch's deadline passes.

    httpx's timeouts apply per read, and while httpx waits for the response headers none of
    our code runs, so a server sending a header byte every few seconds could hold the poll
    forever. A timer thread shutting the socket down wakes that read with an error, which
    the fetcher reports as the deadline (``fired`` tells it so). The socket comes from
    httpcore's documented ``trace`` request extension: the network stream returned by
    ``connect_tcp``/``start_tls``.

    The stream is forgotten when the response closes, so a connection handed back to the
    pool (which another thread may pick up) is never touched; the fetcher also asks for
    ``Connection: close``, so every request opens, and is watched on, its own connection.
    Without a captured stream (a pooled connection of a client shared elsewhere) the watchdog
    does nothing and the body loop's clock check and the client's timeouts still apply.
    """

    _OPENED = frozenset({"connection.connect_tcp.complete", "connection.start_tls.complete"})

    def __init__(self, seconds: float) -> None:
        self._lock = threading.Lock()
        self._stream: Any = None
        self._done = False
        self.fired = False
        self.stopped = False
        """Shut down for the process's shutdown (``stop``), not for the deadline."""
        self._timer = threading.Timer(max(seconds, 0.0), self._fire)
        self._timer.daemon = True

    def trace(self, event: str, info: dict[str, Any]) -> None:
        if event in self._OPENED:
            with self._lock:
                self._stream = info.get("return_value")
                if self.stopped:  # stopped while connecting: do not wait for an answer
                    self._shut_down()
        elif event == "http11.response_closed.started":
            with self._lock:
                self._stream = None

    def _fire(self) -> None:
        with self._lock:
            if self._done:
                return
            self.fired = True
            self._shut_down()

    def stop(self) -> None:
        """The process shuts down: end the request now (``stopped`` tells the fetcher)."""
        with self._lock:
            if self._done:
                return
            self.stopped = True
            self._shut_down()

    def _shut_down(self) -> None:
        """Wake the blocked read (call with the lock held)."""
        sock = None if self._stream is None else self._stream.get_extra_info("socket")
        if isinstance(sock, socket.socket):
            # The base class's shutdown, even on an SSLSocket: it only wakes the blocked
            # read (the reading thread still owns and closes the socket).
            with contextlib.suppress(OSError):
                socket.socket.shutdown(sock, socket.SHUT_RDWR)

    def __enter__(self) -> Watchdog:
        self._timer.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        with self._lock:
            self._done = True
            self._stream = None
        self._timer.cancel()
