"""Leader election: which of several ``releasebot run`` replicas runs cycles.

Every replica that starts a scheduler would run every job, and Socket Mode hands each
event to one connection at random, so exactly one replica, the leader, runs cycles,
delivers notifications and holds the Socket Mode connection; the others serve probes and
wait. ``LeaderElector`` is the port; ``lease.KubernetesLeaseElector`` elects through a
``coordination.k8s.io/v1`` Lease, ``memory.AlwaysLeader`` is the single-replica choice and
``memory.MemoryElector`` the in-process one for tests.

An elector only says who leads. It does not guard the database: a lease can misbehave
(a paused leader, skewed clocks), and ``store.lock.CycleGuard`` is what keeps two cycles
from ever writing at once. Importing this package imports neither lightkube nor anything
that connects.
"""

from __future__ import annotations

from typing import Protocol


class LeaderElector(Protocol):
    """Acquires, renews and gives up the leadership of one process.

    ``ensure`` is called periodically (every third of the lease) and right before each
    cycle; it is not called from two threads at once (the runner serialises it).
    """

    @property
    def identity(self) -> str:
        """This process's name in the election."""

    @property
    def is_leader(self) -> bool:
        """Whether this process leads now: False as soon as a renewal is overdue."""

    def ensure(self) -> bool:
        """Acquire the leadership if free (or lapsed), renew it if held; whether we lead.

        Raises ``ClusterUnavailableError`` (try again next round) or
        ``ClusterRejectedError`` (e.g. no RBAC for Leases: a human must fix it), after
        updating ``is_leader``.
        """

    def release(self) -> None:
        """Give the leadership up so another replica takes over at once; never raises."""

    def close(self) -> None:
        """Release connections; the elector is not used afterwards."""
