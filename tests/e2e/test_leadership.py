"""Several releasebot processes on ONE PostgreSQL database and ONE Kubernetes API: exactly
one builds, a dead leader is replaced within about a lease, nothing is built twice.

Real processes (``python -m releasebot``), a fresh PostgreSQL database, the real registry,
HTTP feeds on loopback and the fake API server, whose Leases answer a stale
``resourceVersion`` with 409 as a real API server does (tests/support/kubeapi.py). The test plays
Kaniko. Every wait is bounded; every process is killed in ``finally`` (the context
managers of ``tests/support/runprocess.py``).

- Two ``releasebot run`` replicas (3 s lease, 1 s interval): only the Lease holder creates
  Jobs; after ``kill -9`` of the leader the other takes over, adopts the running build,
  publishes both targets, and no Job is ever created twice.
- Two overlapping ``reconcile --once`` (a CronJob run that outlives its schedule): while
  the first holds the database guard, the second skips and exits 0; no duplicate Job.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy.engine import URL

from tests.support.builds import KanikoPlayer
from tests.support.feedserver import FeedServer, RecordedRequest, Reply
from tests.support.kubeapi import FakeKubeApi
from tests.support.postgres import fresh_postgres_database
from tests.support.registryserver import RunningRegistry
from tests.support.runprocess import ReleasebotProcess, free_port, wait_for, write_config

pytestmark = [pytest.mark.postgres, pytest.mark.timeout(150)]

LEASE_SECONDS = 3


@pytest.fixture
def database() -> Iterator[str]:
    with fresh_postgres_database() as url:
        yield render(url)


def render(url: URL) -> str:
    return url.render_as_string(hide_password=False)


@pytest.fixture
def feeds(test_data: Path) -> Iterator[FeedServer]:
    with FeedServer() as server:
        server.route(
            "/releases-stable.json",
            FeedServer.static(
                (test_data / "flatcar/releases-stable.json").read_bytes(), etag='"1"'
            ),
        )
        server.route(
            "/nvidia.json",
            FeedServer.static((test_data / "nvidia/releases.json").read_bytes(), etag='"1"'),
        )
        yield server


def config_for(
    path: Path,
    database: str,
    feeds: FeedServer,
    registry: RunningRegistry,
    name: str,
    api: FakeKubeApi,
) -> Path:
    return write_config(
        path,
        database_url=database,
        flatcar_url=feeds.url("/releases-{channel}.json"),
        nvidia_url=feeds.url("/nvidia.json"),
        repository=registry.repository(name),
        kubeconfig=api.write_kubeconfig(path.parent / "kubeconfig"),
        namespace=api.namespace,
        keep=2,  # two targets: 580.178.04 on 4593.2.5 and on 4593.2.4
        lease_seconds=LEASE_SECONDS,
    )


def test_one_leader_builds_and_a_killed_leader_is_replaced(
    tmp_path: Path,
    database: str,
    feeds: FeedServer,
    plain_registry: RunningRegistry,
    registry_name: str,
    kube_api: FakeKubeApi,
) -> None:
    config = config_for(
        tmp_path / "releasebot.toml", database, feeds, plain_registry, registry_name, kube_api
    )
    player = KanikoPlayer(kube_api, plain_registry)
    ports = {"a": free_port(), "b": free_port()}

    def replica(name: str) -> ReleasebotProcess:
        env = {"RELEASEBOT_RUN_IDENTITY": name, "RELEASEBOT_RUN_LISTEN": f"127.0.0.1:{ports[name]}"}
        args = ["run", "--config", str(config)]
        return ReleasebotProcess(args, tmp_path / f"{name}.log", port=ports[name], env=env)

    with replica("a") as a, replica("b") as b:
        a.wait_serving()
        b.wait_serving()
        jobs = wait_for(lambda: len(player.job_names()) == 2 and player.job_names(), timeout=30)
        holder = kube_api.leases()["releasebot-leader"]["spec"]["holderIdentity"]
        leader, follower = (a, b) if holder == "a" else (b, a)
        # A few more cycles: the follower must stay idle, the leader must not launch again.
        wait_for(
            lambda: (leader.metric("releasebot_cycles_total", outcome="completed") or 0) >= 3,
            timeout=30,
            what="three cycles on the leader",
        )
        assert leader.metric("releasebot_is_leader") == 1
        assert follower.metric("releasebot_is_leader") == 0
        assert leader.metric("releasebot_builds_started_total") == 2
        assert follower.metric("releasebot_builds_started_total") == 0
        assert follower.metric("releasebot_cycles_total", outcome="completed") == 0
        assert follower.get("/readyz").status_code == 200  # type: ignore[union-attr]

        player.build(jobs[0])  # one build finishes; the other is still running
        killed_at = time.monotonic()
        leader.kill()  # kill -9: no lease release, no guard release
        wait_for(
            lambda: follower.metric("releasebot_is_leader") == 1,
            timeout=LEASE_SECONDS * 4,
            every=0.1,
            what="the follower to take over",
        )
        took = time.monotonic() - killed_at
        print(f"takeover {took:.2f} s after kill -9 (lease {LEASE_SECONDS} s)")
        # Lapse is judged on the follower's clock since it last saw a renewal (at most a
        # third of a lease before the kill), then it needs its next round (a third more).
        assert took < LEASE_SECONDS * 5 / 3 + 1.5, f"takeover took {took:.1f} s"
        new_holder = kube_api.leases()["releasebot-leader"]["spec"]
        assert new_holder["holderIdentity"] != holder
        assert new_holder["leaseTransitions"] == 1

        player.build(jobs[1])
        wait_for(
            lambda: follower.metric("releasebot_targets", state="published") == 2,
            timeout=30,
            what="both targets published by the new leader",
        )
        assert follower.metric("releasebot_required_tags_unpublished") == 0
        assert follower.metric("releasebot_targets", state="published") == 2
        assert follower.terminate() == 0

    assert len(kube_api.requests_to("POST", "jobs")) == 2  # each target's Job created once
    assert sorted(player.job_names()) == sorted(jobs)


def test_overlapping_reconcile_once_runs_do_not_build_twice(
    tmp_path: Path,
    database: str,
    feeds: FeedServer,
    plain_registry: RunningRegistry,
    registry_name: str,
    kube_api: FakeKubeApi,
    test_data: Path,
) -> None:
    config = config_for(
        tmp_path / "releasebot.toml", database, feeds, plain_registry, registry_name, kube_api
    )
    # The first run's NVIDIA poll hangs until the test lets it go: it holds the guard then.
    body = (test_data / "nvidia/releases.json").read_bytes()
    polled, go_on = threading.Event(), threading.Event()

    def held_back(_request: RecordedRequest) -> Reply:
        polled.set()
        go_on.wait(30)
        return Reply(200, {"Content-Type": "application/json", "ETag": '"1"'}, body)

    feeds.route("/nvidia.json", held_back)
    once = ["reconcile", "--once", "--config", str(config)]
    with ReleasebotProcess(once, tmp_path / "first.log") as first:
        assert polled.wait(30), first.output()
        feeds.route("/nvidia.json", FeedServer.static(body, etag='"1"'))
        with ReleasebotProcess(once, tmp_path / "second.log") as second:
            assert second.wait(timeout=30) == 0
            assert "another cycle is running" in second.output()
        assert kube_api.jobs() == []  # the second run launched nothing while skipped
        go_on.set()
        assert first.wait(timeout=30) == 0, first.output()
    assert len(kube_api.jobs()) == 2
    with ReleasebotProcess(once, tmp_path / "third.log") as third:
        assert third.wait(timeout=30) == 0  # the guard is free again; nothing left to launch
        assert "launched" not in third.output()
    assert len(kube_api.requests_to("POST", "jobs")) == 2
