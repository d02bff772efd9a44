"""A TCP server on 127.0.0.1 that accepts connections and never says a word.

An upstream that is "up" but never answers: a feed, registry or API server behind a broken
proxy. Requests to it wait for their read timeout; tests use it to show what is bounded
(timeouts, deadlines) and what a shutdown interrupts.
"""

from __future__ import annotations

import contextlib
import socket
import threading


class BlackHole:
    """Accepts every connection on 127.0.0.1 and never reads or answers; ``accepted``
    counts them. Closed (with every connection) when the block ends."""

    def __init__(self) -> None:
        self._listener = socket.create_server(("127.0.0.1", 0), backlog=64)
        self._listener.settimeout(0.2)
        self._held: list[socket.socket] = []
        self._closing = threading.Event()
        self._thread = threading.Thread(target=self._accept, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._listener.getsockname()[1]}"

    @property
    def accepted(self) -> int:
        return len(self._held)

    def _accept(self) -> None:
        while not self._closing.is_set():
            try:
                connection, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            self._held.append(connection)

    def __enter__(self) -> BlackHole:
        self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._closing.set()
        self._thread.join(timeout=5)
        for connection in self._held:
            with contextlib.suppress(OSError):
                connection.close()
        self._listener.close()
