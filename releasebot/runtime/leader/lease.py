"""``KubernetesLeaseElector``: leader election through a ``coordination.k8s.io/v1`` Lease.

The algorithm is client-go's ``leaderelection`` with a Lease lock, synchronous and small:

- no Lease yet: create it holding it (a 409 means another replica created it first);
- held by us: renew ``renewTime``, writing with the ``resourceVersion`` we read, so a
  concurrent write makes ours fail with 409 (optimistic concurrency) and we lose;
- held by another: take it over only once it has lapsed, i.e. the record has not changed
  for ``leaseDurationSeconds`` as measured on OUR monotonic clock since we last saw it
  change (never by comparing the holder's ``renewTime`` with our wall clock: nodes' clocks
  disagree). A fresh process therefore waits one lease period before taking over a lease
  left behind by a dead leader; a leader that shuts down clears the holder, and then the
  next ``ensure`` of any replica takes over at once;
- a leader whose renewals fail stops calling itself leader ``renew_deadline`` after its
  last successful renewal (two thirds of the lease by default), before anyone else can
  take over.

Every call has the client's bounded timeout and is tried once: the runner calls ``ensure``
again a third of a lease later on the leader, and every ``RunnerOptions.follow_every``
(a fifteenth of the lease) on a follower, which bounds how late a follower sees the last
renewal and notices the lapse (the takeover bound in ``docs/architecture.md``). lightkube
and httpx2 errors are translated into ``ClusterUnavailableError``/``ClusterRejectedError``
(``edge.kube``). Deliberately not here: watching the Lease, the database guard
(``runtime.lock``), and what a leader does (``runtime.runner``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import TypeVar

from lightkube import Client
from lightkube.models.coordination_v1 import LeaseSpec
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.coordination_v1 import Lease

from releasebot.domain.shared.errors import ReleasebotError
from releasebot.edge.kube import Answered, kube_call
from releasebot.edge.retry import RetryPolicy

T = TypeVar("T")

log = logging.getLogger("releasebot.leader")

_ONCE = RetryPolicy(retries=0)
_LABELS = {"app.kubernetes.io/name": "releasebot", "app.kubernetes.io/component": "leader"}


def _utc_now() -> datetime:
    return datetime.now(UTC)


class KubernetesLeaseElector:
    """Competes for the Lease ``name`` in ``namespace`` as ``identity``."""

    def __init__(
        self,
        client: Client,
        *,
        name: str,
        namespace: str,
        identity: str,
        duration: timedelta = timedelta(seconds=30),
        renew_deadline: timedelta | None = None,
        clock: Callable[[], datetime] = _utc_now,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._client = client
        self._name = name
        self._namespace = namespace
        self._identity = identity
        self._duration = duration
        self._renew_deadline = (renew_deadline or duration * 2 / 3).total_seconds()
        self._clock = clock
        self._monotonic = monotonic
        self._renewed_at: float | None = None  # our last successful write as the holder
        self._announced = False  # the leadership last logged, to log each change once
        self._seen: tuple[str, str] | None = None  # (holder, resourceVersion) last read
        self._seen_at = 0.0

    @property
    def identity(self) -> str:
        return self._identity

    @property
    def is_leader(self) -> bool:
        renewed = self._renewed_at
        return renewed is not None and self._monotonic() - renewed < self._renew_deadline

    def ensure(self) -> bool:
        # The renewal counts from before the round: the API server wrote renewTime after
        # this moment, so a follower (which counts from when it saw that write) can never
        # take over while this replica still calls itself the leader.
        started = self._monotonic()
        try:
            leader = self._try()
        except ReleasebotError:
            self._announce(self.is_leader, "could not renew the lease in time")
            raise
        self._renewed_at = started if leader else None
        self._announce(leader, "another replica holds the lease")
        return leader

    def _announce(self, leader: bool, why: str) -> None:
        if leader == self._announced:
            return
        self._announced = leader
        extra = {"lease": self._name, "identity": self._identity}
        if leader:
            log.warning("became the leader", extra=extra)
        else:
            log.warning("lost the leadership: %s", why, extra=extra)

    def release(self) -> None:
        if self._renewed_at is None:
            return
        self._renewed_at = None
        self._announced = False
        try:
            lease = self._read()
            spec = (lease.spec if lease is not None else None) or LeaseSpec()
            if lease is None or spec.holderIdentity != self._identity:
                return
            now = self._clock()
            released = LeaseSpec(
                holderIdentity=None,
                leaseDurationSeconds=1,
                acquireTime=now,
                renewTime=now,
                leaseTransitions=spec.leaseTransitions,
            )
            self._won("release the lease", lambda: self._replace(lease, released))
            log.info("released the leadership", extra={"lease": self._name})
        except ReleasebotError as error:
            log.warning("could not release the lease (it lapses by itself): %s", error)

    def close(self) -> None:
        self._client.close()

    # -- one round ---------------------------------------------------------------------

    def _try(self) -> bool:
        lease = self._read()
        now = self._clock()
        seconds = max(1, int(self._duration.total_seconds()))
        if lease is None:
            created = Lease(
                metadata=ObjectMeta(name=self._name, namespace=self._namespace, labels=_LABELS),
                spec=LeaseSpec(
                    holderIdentity=self._identity,
                    leaseDurationSeconds=seconds,
                    acquireTime=now,
                    renewTime=now,
                    leaseTransitions=0,
                ),
            )
            return self._won("create the lease", lambda: self._client.create(created))
        spec = lease.spec or LeaseSpec()
        holder = spec.holderIdentity or ""
        version = (lease.metadata.resourceVersion if lease.metadata else None) or ""
        mono = self._monotonic()
        if self._seen != (holder, version):
            self._seen, self._seen_at = (holder, version), mono
        if holder == self._identity:
            renewed = LeaseSpec(
                holderIdentity=self._identity,
                leaseDurationSeconds=seconds,
                acquireTime=spec.acquireTime or now,
                renewTime=now,
                leaseTransitions=spec.leaseTransitions or 0,
            )
            return self._won("renew the lease", lambda: self._replace(lease, renewed))
        duration = spec.leaseDurationSeconds or seconds
        if holder and mono - self._seen_at < duration:
            return False  # someone else leads and renews
        taken = LeaseSpec(
            holderIdentity=self._identity,
            leaseDurationSeconds=seconds,
            acquireTime=now,
            renewTime=now,
            leaseTransitions=(spec.leaseTransitions or 0) + 1,
        )
        won = self._won("take over the lease", lambda: self._replace(lease, taken))
        if won and holder:
            log.warning("took over the lease from %s, which stopped renewing it", holder)
        return won

    def _read(self) -> Lease | None:
        """The Lease; ``None`` when there is none yet."""
        try:
            return kube_call(
                "read the lease",
                lambda: self._client.get(Lease, self._name, namespace=self._namespace),
                policy=_ONCE,
                answers={404},
            )
        except Answered:
            return None

    def _replace(self, lease: Lease, spec: LeaseSpec) -> Lease:
        # PUT with the resourceVersion we read: the API server refuses (409) if anyone
        # wrote the Lease since, which is exactly "someone else won this round".
        return self._client.replace(Lease(metadata=lease.metadata, spec=spec))

    def _call(self, what: str, operation: Callable[[], T]) -> T:
        """``operation()`` once, every library error translated."""
        return kube_call(what, operation, policy=_ONCE)

    def _won(self, what: str, operation: Callable[[], object]) -> bool:
        """Write the Lease; False when another replica wrote it first (409 Conflict on a
        stale resourceVersion, or AlreadyExists on create)."""
        try:
            kube_call(what, operation, policy=_ONCE, answers={409})
        except Answered:
            return False
        return True
