"""Leader election: the same contract for ``MemoryElector`` and ``KubernetesLeaseElector``
(over the fake API server's Leases, real HTTP), then what only the Lease elector does.

Contract: the first contender leads and the second follows; a lease that stops being
renewed is taken over only once it lapsed on the follower's own clock; a released lease is
taken over at once; a leader whose renewals stop drops ``is_leader`` before anyone could
take over. Lease only: the object written (holder, duration, times, transitions), the
409 races (create and stale resourceVersion), and API errors translated; a Lease that is
not a Lease (``null``, a number, fields of the wrong type) is one clean error and nothing
is written.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import pytest
from lightkube import Client

from releasebot.domain.ports import LeaderElector
from releasebot.domain.shared.errors import ClusterRejectedError, ClusterUnavailableError
from releasebot.runtime.leader.lease import KubernetesLeaseElector
from releasebot.runtime.leader.memory import AlwaysLeader, MemoryElector, MemoryLease
from tests.support.kubeapi import FakeKubeApi

DURATION = timedelta(seconds=15)
NAME = "releasebot-leader"


class Clock:
    """A contender's monotonic clock, in seconds, moved by the test."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


Make = Callable[[str, Clock], LeaderElector]


@pytest.fixture(params=["memory", "kubernetes"])
def make(request: pytest.FixtureRequest) -> Iterator[Make]:
    if request.param == "memory":
        lease = MemoryLease()
        yield lambda identity, clock: MemoryElector(
            lease, identity, duration=DURATION, monotonic=clock
        )
        return
    api: FakeKubeApi = request.getfixturevalue("kube_api")
    made: list[LeaderElector] = []

    def factory(identity: str, clock: Clock) -> LeaderElector:
        elector = lease_elector(api.client(), api, identity, clock)
        made.append(elector)
        return elector

    yield factory
    for elector in made:
        elector.close()


def lease_elector(
    client: Client, api: FakeKubeApi, identity: str, clock: Clock
) -> KubernetesLeaseElector:
    return KubernetesLeaseElector(
        client,
        name=NAME,
        namespace=api.namespace,
        identity=identity,
        duration=DURATION,
        monotonic=clock,
    )


def test_the_first_leads_the_second_follows(make: Make) -> None:
    clock = Clock()
    a, b = make("a", clock), make("b", clock)
    assert a.ensure()
    assert a.is_leader
    assert not b.ensure()
    assert not b.is_leader
    clock.now += 5
    assert a.ensure()
    assert not b.ensure()


def test_a_lapsed_lease_is_taken_over_on_the_followers_clock(make: Make) -> None:
    clock_a, clock_b = Clock(), Clock()
    a, b = make("a", clock_a), make("b", clock_b)
    assert a.ensure()
    assert not b.ensure()  # b saw the record now
    clock_b.now += 14  # a died; not yet a whole lease on b's clock
    assert not b.ensure()
    clock_b.now += 2
    assert b.ensure()
    clock_a.now += 100  # a wakes up: it must not believe it still leads
    assert not a.is_leader
    assert not a.ensure()


def test_a_renewing_leader_keeps_the_lease(make: Make) -> None:
    clock = Clock()
    a, b = make("a", clock), make("b", clock)
    for _ in range(6):  # 30 s of renewals every 5 s: b sees the record change each time
        assert a.ensure()
        assert not b.ensure()
        clock.now += 5
    assert a.is_leader


def test_a_released_lease_is_taken_over_at_once(make: Make) -> None:
    clock = Clock()
    a, b = make("a", clock), make("b", clock)
    assert a.ensure()
    assert not b.ensure()
    a.release()
    assert not a.is_leader
    assert b.ensure()
    assert not a.ensure()


def test_a_leader_that_cannot_renew_steps_down_before_the_lease_lapses(make: Make) -> None:
    clock = Clock()
    a = make("a", clock)
    assert a.ensure()
    clock.now += DURATION.total_seconds() * 2 / 3 - 1
    assert a.is_leader
    clock.now += 2  # no renewal for two thirds of the lease
    assert not a.is_leader


def test_always_leader() -> None:
    elector = AlwaysLeader("solo")
    assert not elector.is_leader
    assert elector.ensure()
    assert elector.is_leader
    elector.release()
    assert not elector.is_leader


# -- the Lease elector only ------------------------------------------------------------------


def test_the_lease_written_is_what_kubernetes_tools_expect(kube_api: FakeKubeApi) -> None:
    clock_a, clock_b = Clock(), Clock()
    with kube_api.client() as ca, kube_api.client() as cb:
        a, b = lease_elector(ca, kube_api, "a", clock_a), lease_elector(cb, kube_api, "b", clock_b)
        assert a.ensure()
        spec = kube_api.leases()[NAME]["spec"]
        assert spec["holderIdentity"] == "a"
        assert spec["leaseDurationSeconds"] == 15
        assert spec["leaseTransitions"] == 0
        assert spec["acquireTime"].endswith("Z")
        assert spec["renewTime"].endswith("Z")
        assert not b.ensure()
        clock_b.now += 16
        assert b.ensure()
        spec = kube_api.leases()[NAME]["spec"]
        assert (spec["holderIdentity"], spec["leaseTransitions"]) == ("b", 1)
        b.release()
        spec = kube_api.leases()[NAME]["spec"]
        assert "holderIdentity" not in spec
        assert spec["leaseDurationSeconds"] == 1


class _Interfering(Client):
    """A client after whose every GET of the Lease another replica writes it."""

    def __init__(self, api: FakeKubeApi, **kwargs: Any) -> None:
        base = api.client()
        super().__init__(config=base.config, **kwargs)
        base.close()
        self.other = api.client()

    def get(self, *args: Any, **kwargs: Any) -> Any:
        lease = super().get(*args, **kwargs)
        fresh = self.other.get(type(lease), lease.metadata.name, namespace=lease.metadata.namespace)
        self.other.replace(fresh)  # bumps the resourceVersion
        return lease


def test_a_stale_resource_version_loses_the_round(kube_api: FakeKubeApi) -> None:
    clock = Clock()
    with kube_api.client() as client:
        assert lease_elector(client, kube_api, "a", clock).ensure()
    interfering = _Interfering(kube_api, trust_env=False)
    a_again = lease_elector(interfering, kube_api, "a", clock)
    assert not a_again.ensure()  # its renewal PUT carried the version it read: 409
    assert not a_again.is_leader
    interfering.other.close()
    interfering.close()


def test_a_lost_create_race_is_not_an_error(kube_api: FakeKubeApi) -> None:
    clock = Clock()
    with kube_api.client() as ca, kube_api.client() as cb:
        assert lease_elector(ca, kube_api, "a", clock).ensure()
        # b read "no Lease" just before a created it: b's create answers 409.
        kube_api.fail_requests(1, status=404, reason="NotFound", method="GET", plural="leases")
        b = lease_elector(cb, kube_api, "b", clock)
        assert not b.ensure()
        assert kube_api.leases()[NAME]["spec"]["holderIdentity"] == "a"


def test_api_errors_are_translated_and_a_leader_rides_out_a_blip(kube_api: FakeKubeApi) -> None:
    clock = Clock()
    with kube_api.client() as client:
        a = lease_elector(client, kube_api, "a", clock)
        assert a.ensure()
        kube_api.fail_requests(1, plural="leases")
        clock.now += 5
        with pytest.raises(ClusterUnavailableError, match="503"):
            a.ensure()
        assert a.is_leader  # renewed 5 s ago: still within the renew deadline
        kube_api.fail_requests(1, status=403, reason="Forbidden", message="no", plural="leases")
        with pytest.raises(ClusterRejectedError, match="403"):
            a.ensure()
        clock.now += 6
        assert not a.is_leader
        assert a.ensure()


@pytest.mark.parametrize(
    "body",
    [b"null", b"7", b'"lease"', b"[]", b'{"metadata": "x"}', b'{"spec": {"holderIdentity": 7}}'],
)
def test_a_lease_that_is_not_a_lease_is_one_clean_error(kube_api: FakeKubeApi, body: bytes) -> None:
    clock = Clock()
    with kube_api.client() as client:
        a = lease_elector(client, kube_api, "a", clock)
        kube_api.fail_requests(None, status=200, method="GET", plural="leases", raw=body)
        with pytest.raises(
            ClusterUnavailableError, match=r"^kubernetes read the lease: "
        ) as caught:
            a.ensure()
        assert "\n" not in str(caught.value)
        assert not a.is_leader
        assert kube_api.requests_to("PUT", "leases") == []  # nothing written on a bad read
