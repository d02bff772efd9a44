"""Leader election: which of several ``releasebot run`` replicas runs cycles.

Every replica that starts a scheduler would run every job, and Socket Mode hands each
event to one connection at random, so exactly one replica, the leader, runs cycles,
delivers notifications and holds the Socket Mode connection; the others serve probes and
wait. ``LeaderElector`` is the port (``domain/ports.py``); ``lease.KubernetesLeaseElector``
elects through a ``coordination.k8s.io/v1`` Lease, ``memory.AlwaysLeader`` is the
single-replica choice and ``memory.MemoryElector`` the in-process one for tests.

An elector only says who leads. It does not guard the database: a lease can misbehave
(a paused leader, skewed clocks), and ``runtime.lock.CycleGuard`` is what keeps two cycles
from ever writing at once. Importing this package imports neither lightkube nor anything
that connects.
"""
