"""In-process electors: ``AlwaysLeader`` for one replica, ``MemoryElector`` for tests.

``AlwaysLeader`` is what ``leader_election = "none"`` wires: a single process outside a
cluster (or a developer's machine) leads from the start. ``MemoryElector`` behaves like the
Kubernetes Lease elector (expiry measured on the follower's own clock since it last saw
the record change, release clears the holder) over a ``MemoryLease`` several electors
share, with an injected clock, so runner tests can play two replicas without a server.

Neither talks to anything, so neither ever raises.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta


class AlwaysLeader:
    """The only replica: leads from the first ``ensure`` until ``release``."""

    def __init__(self, identity: str = "releasebot") -> None:
        self._identity = identity
        self._leader = False

    @property
    def identity(self) -> str:
        return self._identity

    @property
    def is_leader(self) -> bool:
        return self._leader

    def ensure(self) -> bool:
        self._leader = True
        return True

    def release(self) -> None:
        self._leader = False

    def close(self) -> None:
        self._leader = False


@dataclass
class MemoryLease:
    """The shared record several ``MemoryElector`` instances compete for."""

    holder: str = ""
    version: int = 0
    """Changes on every write, as a resourceVersion does."""
    transitions: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)


class MemoryElector:
    """One contender for a ``MemoryLease``; ``monotonic`` is its own clock (seconds)."""

    def __init__(
        self,
        lease: MemoryLease,
        identity: str,
        *,
        duration: timedelta = timedelta(seconds=30),
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._lease = lease
        self._identity = identity
        self._duration = duration.total_seconds()
        self._monotonic = monotonic
        self._renewed_at: float | None = None
        self._seen_version = -1
        self._seen_at = 0.0

    @property
    def identity(self) -> str:
        return self._identity

    @property
    def is_leader(self) -> bool:
        renewed = self._renewed_at
        return renewed is not None and self._monotonic() - renewed < self._duration * 2 / 3

    def ensure(self) -> bool:
        now = self._monotonic()
        lease = self._lease
        with lease.lock:
            if lease.version != self._seen_version:
                self._seen_version, self._seen_at = lease.version, now
            lapsed = now - self._seen_at >= self._duration
            if lease.holder not in ("", self._identity) and not lapsed:
                self._renewed_at = None
                return False
            if lease.holder != self._identity:
                lease.transitions += 1
            lease.holder = self._identity
            lease.version += 1
            self._seen_version, self._seen_at = lease.version, now
        self._renewed_at = now
        return True

    def release(self) -> None:
        lease = self._lease
        with lease.lock:
            if lease.holder == self._identity:
                lease.holder = ""
                lease.version += 1
        self._renewed_at = None

    def close(self) -> None:
        self._renewed_at = None
