"""``AnswerCache``: the page's answers built once per change and shared by every client.

The page's API answers are read from the store and built in Python: at 10,000 targets the
matrix is about 2 MB of JSON and a few hundred milliseconds of CPU. Every open tab asks for
it every 15 s. So an answer, once built, is kept with the store's change counters it was
built at (``StateStore.revisions``: one small read), and handed to every client for as long
as those counters stay where they were: a client whose ``If-None-Match`` names it gets a
304 after that one read, a new client gets the same bytes, and nothing is built again.

Bounded, so memory does not grow with the number of clients, tabs or addresses asked:

- at most ``max_entries`` answers and ``max_bytes`` of bodies, the least recently used
  dropped first; an answer bigger than ``max_bytes`` is handed out but not kept;
- one build per name at a time (``building``): the clients that ask while it is built wait
  for it (a bounded time) and take it, rather than each building its own copy;
- an answer is trusted for ``recheck_after`` seconds at most, then built again on the next
  request, because an edit behind releasebot's back moves no counter. Built again to the
  same bytes, it keeps its ETag (the ETag is the body's hash), so the clients' next
  conditional requests still get 304.

Deliberately not here: what an answer depends on (``service/overview.py`` says it), HTTP.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterator
from dataclasses import dataclass
from typing import Generic, TypeVar

T = TypeVar("T")

MAX_ENTRIES = 256
"""Answers kept: every filter of the matrix a team uses, and the details people open."""
MAX_BYTES = 16 * 1024 * 1024
"""Bodies kept, in bytes: the matrix at 10,000 targets (about 2 MB) several times over, in
a process whose steady RSS at that size is meant to stay under 100 MB."""


@dataclass(frozen=True)
class Built(Generic[T]):
    """One answer as built: ``key`` the counters it was read at, ``basis`` what it took from
    tables it reads only in part, ``built_at`` on the monotonic clock."""

    value: T
    size: int
    key: tuple[int, ...]
    basis: Hashable
    built_at: float


class AnswerCache(Generic[T]):
    """Answers by name (an address with its query), each with the counters it was read at."""

    def __init__(
        self,
        *,
        max_entries: int = MAX_ENTRIES,
        max_bytes: int = MAX_BYTES,
        recheck_after: float,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self.recheck_after = recheck_after
        self._monotonic = monotonic
        self._entries: OrderedDict[str, Built[T]] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()
        self._builders: dict[str, tuple[threading.Lock, int]] = {}

    @property
    def size(self) -> tuple[int, int]:
        """(answers kept, bytes kept)."""
        with self._lock:
            return len(self._entries), self._bytes

    def get(self, name: str) -> Built[T] | None:
        """The answer kept for ``name`` if it is not older than ``recheck_after``."""
        with self._lock:
            built = self._entries.get(name)
            if built is None:
                return None
            if self._monotonic() - built.built_at >= self.recheck_after:
                self._drop(name)
                return None
            self._entries.move_to_end(name)
            return built

    def put(self, name: str, built: Built[T]) -> None:
        """Keep ``built`` (unless it is bigger than the whole budget), dropping the least
        recently used answers until both bounds hold."""
        with self._lock:
            if name in self._entries:
                self._drop(name)
            if built.size > self.max_bytes:
                return
            self._entries[name] = built
            self._bytes += built.size
            while len(self._entries) > self.max_entries or self._bytes > self.max_bytes:
                self._drop(next(iter(self._entries)))

    def now(self) -> float:
        return self._monotonic()

    @contextlib.contextmanager
    def building(self, name: str, wait: float) -> Iterator[bool]:
        """One builder per name at a time; the others wait here up to ``wait`` seconds,
        then find its answer. Yields whether the block got its turn (False: gave up)."""
        with self._lock:
            lock, users = self._builders.get(name, (threading.Lock(), 0))
            self._builders[name] = (lock, users + 1)
        try:
            if lock.acquire(timeout=wait):
                try:
                    yield True
                finally:
                    lock.release()
            else:
                yield False
        finally:
            with self._lock:
                lock, users = self._builders[name]
                if users == 1:
                    del self._builders[name]  # nobody waits: the lock goes, no growth
                else:
                    self._builders[name] = (lock, users - 1)

    def _drop(self, name: str) -> None:
        self._bytes -= self._entries.pop(name).size
