"""``Halt``: the process's shutdown, reaching into the waits of a running cycle.

``releasebot run`` stops on SIGTERM. A cycle waiting on an upstream that does not answer
(a read timeout of 30 s, then the retries' pauses) used to hold the shutdown until the
runner's grace ran out and the process ended mid-cycle. With a ``Halt`` the adapters wait
on it instead: a retry pause (``Halt.sleep``) ends at once, a request in flight has its
connection shut down by a hook (``Halt.hook``: the feed fetcher's watchdog), and either
raises ``Stopped``, so the cycle unwinds through its ``with`` blocks (transactions roll
back, the cycle guard is given back) and the runner ends cleanly.

``Stopped`` is a ``BaseException``, as ``asyncio.CancelledError`` is: the handlers of
``ReleasebotError`` and ``Exception`` along the way would otherwise record "shutting down"
as the feed's or the registry's failure, or go on to the next step. Only the runner
catches it. Deliberately not here: signals (``wiring.run``), what stops (the callers).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import timedelta

log = logging.getLogger("releasebot.stop")


class Stopped(BaseException):
    """The process is shutting down: the work in progress unwinds, nothing is recorded."""


class Halt:
    """Set once, at shutdown; waits on it end at once, hooks run when it is set."""

    def __init__(self) -> None:
        self._event = threading.Event()
        self._lock = threading.Lock()
        self._hooks: dict[int, Callable[[], None]] = {}
        self._next = 0

    def is_set(self) -> bool:
        return self._event.is_set()

    def set(self) -> None:
        """Shut down: wake every wait and run every hook (each once)."""
        with self._lock:
            self._event.set()
            hooks, self._hooks = list(self._hooks.values()), {}
        for hook in hooks:
            try:
                hook()
            except Exception:  # one hook must not keep the others from running
                log.exception("a shutdown hook failed")

    def check(self) -> None:
        """Raise ``Stopped`` once the halt is set (before starting anything long)."""
        if self._event.is_set():
            raise Stopped

    def sleep(self, pause: timedelta) -> None:
        """``edge.retry``'s sleep: ``pause``, or ``Stopped`` as soon as the halt is set."""
        if self._event.wait(max(pause.total_seconds(), 0.0)):
            raise Stopped

    @contextmanager
    def hook(self, function: Callable[[], None]) -> Iterator[None]:
        """Run ``function`` if the halt is set during the block (at once if it already is)."""
        with self._lock:
            now = self._event.is_set()
            if not now:
                key, self._next = self._next, self._next + 1
                self._hooks[key] = function
        if now:
            function()
        try:
            yield
        finally:
            if not now:
                with self._lock:
                    self._hooks.pop(key, None)
