"""A cycle that keeps what it read still sees what changed behind releasebot's back.

Real parts: the OCI registry (Debian's docker-registry), SQLite and PostgreSQL, feeds over
HTTP, the Kubernetes API over HTTP (the fake API server). One ``ReconcileService`` runs
every cycle, as ``releasebot run`` does, so what it kept between cycles is used.

Three changes nobody told releasebot about: a tag deleted in the registry (the listing
differs: seen at the next cycle), a Job deleted mid-build (the running build is asked every
cycle: seen at the next cycle), and a target row edited by hand in SQL (no change counter
moves: unseen by the steady cycles, seen by the next full pass, ``run.full_pass_seconds``).
A new leader's first cycle is a full pass too.

With a fleet configured (GPU nodes on the fake API server, one of them on a release the
channel policy no longer keeps), a steady cycle lists the Nodes but reads no release and
hands the registry check the same plan as the last cycle, so the kept check stands; a node
that changes (a pending reboot into another release) is planned for at the next cycle, and
a hand edit of the fleet's own target is seen at the next full pass.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import closing, contextmanager
from datetime import timedelta
from pathlib import Path

import httpx
import pytest
from sqlalchemy import Engine, event, text

from releasebot.builders.kaniko import KanikoOptions
from releasebot.builders.kubernetes import KubernetesJobLauncher
from releasebot.domain.shared.versions import Arch
from releasebot.domain.targets.builds import FailureReason
from releasebot.domain.targets.decisions import Action
from releasebot.domain.targets.models import TargetReason, TargetState
from releasebot.domain.targets.policy import DriverPolicy, FlatcarPolicy, Policy
from releasebot.fleet.kubernetes import KubernetesFleetSource
from releasebot.registry import OCI_MANIFEST
from releasebot.registry.oras import OrasRegistry
from releasebot.runtime.metrics import ServiceMetrics
from releasebot.service.fleet import FleetService
from releasebot.service.plan import FeedSpec, PlanService
from releasebot.service.reconcile import CycleReport, ReconcileOptions, ReconcileService
from releasebot.sources.fetch import HttpFeedFetcher
from releasebot.sources.flatcar import parse_flatcar_feed
from releasebot.sources.nvidia import parse_nvidia_feed
from releasebot.store import migrate
from releasebot.store.engine import make_engine
from releasebot.store.sql import SqlStateStore
from tests.support.builds import Clock, KanikoPlayer
from tests.support.feedserver import FeedServer
from tests.support.fleetnodes import gpu_node
from tests.support.kubeapi import FakeKubeApi
from tests.support.postgres import fresh_postgres_database
from tests.support.registryserver import RunningRegistry

CONTEXT = "git://git.example.test/gpu/recipes.git#refs/heads/main#" + "0123456789" * 4
FULL_PASS = timedelta(hours=1)
INTERVAL = timedelta(minutes=5)
DELETED, EDITED, KEPT, BUILDING = (f"580.100.01-flatcar5000.2.{n}" for n in range(4))
BEHIND, PENDING, SECOND, NEWEST = (f"580.100.01-flatcar5000.2.{n}" for n in range(4))
"""With a fleet: a node runs 5000.2.0 (behind ``keep=2``), will then reboot into 5000.2.1."""


def flatcar_feed() -> bytes:
    return json.dumps(
        {
            f"5000.2.{n}": {
                "channel": "stable",
                "architectures": ["amd64"],
                "release_date": "2026-08-13 15:48:35 +0000",
                "major_software": {"kernel": [f"6.12.{n}"]},
                "release_notes": "synthetic",
            }
            for n in range(4)
        }
    ).encode()


def nvidia_feed() -> bytes:
    info = {
        "release_version": "580.100.01",
        "release_date": "",
        "release_notes": "https://docs.nvidia.com/x",
        "architectures": ["x86_64"],
        "runfile_url": {"x86_64": "https://us.download.nvidia.com/tesla/580.100.01/x.run"},
    }
    return json.dumps({"580": {"type": "lts branch", "driver_info": [info]}}).encode()


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def engine(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Engine]:
    if request.param == "sqlite":
        made = make_engine(f"sqlite:///{tmp_path / 'state.db'}")
        migrate.upgrade(made)
        yield made
        made.dispose()
        return
    with fresh_postgres_database() as url:
        made = make_engine(url)
        try:
            migrate.upgrade(made)
            yield made
        finally:
            made.dispose()


def delete_tag(registry: RunningRegistry, name: str, tag: str) -> None:
    """What a person's ``crane delete`` or a registry's cleanup policy does."""
    with httpx.Client(base_url=registry.base_url, timeout=10) as client:
        head = client.head(f"/v2/{name}/manifests/{tag}", headers={"Accept": OCI_MANIFEST})
        head.raise_for_status()
        digest = head.headers["Docker-Content-Digest"]
        client.delete(f"/v2/{name}/manifests/{digest}").raise_for_status()


@contextmanager
def statements(engine: Engine) -> Iterator[list[str]]:
    """The SQL statements sent on ``engine`` inside the block."""
    sent: list[str] = []

    def note(conn: object, cursor: object, statement: str, *args: object) -> None:
        sent.append(" ".join(statement.split()))

    event.listen(engine, "before_cursor_execute", note)
    try:
        yield sent
    finally:
        event.remove(engine, "before_cursor_execute", note)


def edit(engine: Engine, tag: str) -> None:
    """A person's SQL: a published target called missing, its tag still in the registry."""
    with engine.begin() as conn:
        conn.execute(text("UPDATE targets SET state = 'missing' WHERE tag = :tag"), {"tag": tag})


def actions(report: CycleReport, tag: str) -> list[Action]:
    return [decision.action for decision in report.decisions if decision.tag == tag]


@contextmanager
def cycles(
    engine: Engine,
    registry: RunningRegistry,
    name: str,
    kube_api: FakeKubeApi,
    *,
    keep: int = 4,
    fleet: bool = False,
) -> Iterator[tuple[SqlStateStore, ReconcileService, Callable[[], CycleReport], Clock]]:
    """One ``ReconcileService`` as ``run`` keeps it, and a function running its next cycle
    five minutes after the last; ``fleet``: the planner lists the fake API server's Nodes."""
    clock = Clock()
    with (
        FeedServer() as feeds,
        httpx.Client(timeout=5) as http,
        closing(OrasRegistry(registry.repository(name), insecure=True)) as oras,
        closing(KubernetesFleetSource(kube_api.client(), sleep=lambda _: None)) as source,
    ):
        feeds.route("/stable.json", FeedServer.static(flatcar_feed(), etag='"s"'))
        feeds.route("/nvidia.json", FeedServer.static(nvidia_feed(), etag='"n"'))
        store = SqlStateStore(engine)
        options = KanikoOptions(
            namespace=kube_api.namespace,
            registry_repository=registry.repository(name),
            registry_secret="registry-push",
            context=CONTEXT,
            insecure_registry=True,
        )
        launcher = KubernetesJobLauncher(kube_api.client(), options, sleep=lambda _delay: None)
        planner = PlanService(
            store=store,
            fetcher=HttpFeedFetcher(http, retries=0),
            flatcar_feeds=[FeedSpec.flatcar("stable", feeds.url("/stable.json"))],
            nvidia_feed=FeedSpec.nvidia(feeds.url("/nvidia.json")),
            parse_flatcar=parse_flatcar_feed,
            parse_nvidia=parse_nvidia_feed,
            policy=Policy(
                FlatcarPolicy(("stable",), frozenset({Arch.AMD64}), keep=keep),
                DriverPolicy(frozenset({"580"}), frozenset(), keep=1),
            ),
            clock=clock,
            fleet=FleetService(
                source=source, store=store, clock=clock, repository=registry.repository(name)
            )
            if fleet
            else None,
        )
        service = ReconcileService(
            planner=planner,
            store=store,
            registry=oras,
            launcher=launcher,
            clock=clock,
            options=ReconcileOptions(max_concurrent_builds=4, max_attempts=3),
            full_pass_every=FULL_PASS,
        )
        metrics = ServiceMetrics()

        def cycle() -> CycleReport:
            clock.advance(INTERVAL)
            report = service.cycle()
            assert report.errors == []
            metrics.observe_cycle(report, store, duration=timedelta(1), finished_at=clock())
            return report

        try:
            yield store, service, cycle, clock
        finally:
            launcher.close()


def steady_statements(sent: list[str]) -> tuple[list[str], list[str], set[str]]:
    """Whole-table reads of the targets, release reads, and the tables written."""
    reads = [
        s
        for s in sent
        if s.startswith("SELECT") and "FROM targets" in s and "targets.tag = " not in s
    ]
    releases = [s for s in sent if "flatcar_releases" in s or "driver_releases" in s]
    writes = {s.split()[1] for s in sent if s.startswith(("INSERT", "UPDATE", "DELETE"))}
    return reads, releases, writes


def test_changes_behind_releasebots_back_are_seen_within_one_full_pass(
    engine: Engine,
    plain_registry: RunningRegistry,
    registry_name: str,
    kube_api: FakeKubeApi,
) -> None:
    for tag in (DELETED, EDITED, KEPT):  # distinct labels: distinct digests
        plain_registry.push_image(registry_name, tag, labels={"tag": tag})
    with cycles(engine, plain_registry, registry_name, kube_api) as (store, service, cycle, clock):
        first = cycle()
        assert first.full_pass
        assert actions(first, BUILDING) == [Action.LAUNCHED]
        cycle()  # reads what the first one wrote
        with statements(engine) as sent:
            steady = cycle()
        assert not steady.full_pass
        assert steady.decisions == []
        # Nothing changed: no release read, targets read only one by one (the running
        # build's), nothing written but the feeds' poll times.
        reads, releases, writes = steady_statements(sent)
        assert (reads, releases) == ([], [])
        assert writes <= {"feeds", "store_revisions"}, writes
        assert {r.tag: r.state for r in steady.targets}[EDITED] is TargetState.PUBLISHED

        # A row edited by hand moves no counter: the steady cycles do not see it ...
        edit(engine, EDITED)
        blind = cycle()
        assert actions(blind, EDITED) == []
        assert {r.tag: r.state for r in blind.targets}[EDITED] is TargetState.PUBLISHED
        # ... the next full pass does: the tag is there, so the target is published.
        clock.advance(FULL_PASS)
        full = cycle()
        assert full.full_pass
        assert actions(full, EDITED) == [Action.PUBLISHED]
        record = store.target(EDITED)
        assert record is not None
        assert record.state is TargetState.PUBLISHED
        assert cycle().decisions == []  # settled: what the full pass wrote is read

        # A new leader's first cycle is a full pass, whatever the period says.
        edit(engine, KEPT)
        assert actions(cycle(), KEPT) == []
        service.full_pass()
        again = cycle()
        assert again.full_pass
        assert actions(again, KEPT) == [Action.PUBLISHED]

        # A tag deleted in the registry and a Job deleted in the cluster: the registry
        # is listed and every running build asked every cycle, so the next one sees both.
        assert cycle().decisions == []
        delete_tag(plain_registry, registry_name, DELETED)
        [job] = KanikoPlayer(kube_api, plain_registry).job_names()
        kube_api.delete_job(job)
        seen = cycle()
        assert not seen.full_pass
        assert actions(seen, DELETED)[0] is Action.MISSING
        assert Action.LAUNCHED in actions(seen, DELETED)
        [build] = [b for b in store.builds(tag=BUILDING) if b.attempt == 1]
        assert build.reason is FailureReason.JOB_DELETED
        assert store.target(BUILDING).state is TargetState.RETRYING  # type: ignore[union-attr]


def test_a_steady_cycle_with_a_fleet_touches_only_what_changed(
    engine: Engine,
    plain_registry: RunningRegistry,
    registry_name: str,
    kube_api: FakeKubeApi,
) -> None:
    for tag in (BEHIND, PENDING, NEWEST, SECOND):  # every image exists: nothing to build
        plain_registry.push_image(registry_name, tag, labels={"tag": tag})
    kube_api.fleet.add_nodes(gpu_node("gpu-0", "5000.2.0"), gpu_node("gpu-1", "5000.2.3"))
    with cycles(engine, plain_registry, registry_name, kube_api, keep=2, fleet=True) as (
        _,
        _,
        cycle,
        clock,
    ):
        first = cycle()
        assert first.full_pass
        assert first.plan is not None
        assert first.plan.fleet is not None
        assert [record.tag for record in first.targets] == [NEWEST, SECOND, BEHIND]
        assert {record.state for record in first.targets} == {TargetState.PUBLISHED}
        last = cycle()  # reads what the first one wrote
        assert last.plan is not None
        with statements(engine) as sent:
            steady = cycle()
        assert not steady.full_pass
        assert steady.decisions == []
        assert steady.plan is not None
        assert steady.plan.fleet is not None
        assert steady.fleet is not None  # the fleet was judged all the same
        # The Nodes were listed, and nothing they need changed: no release read, no whole
        # read of the targets, nothing written but the feeds' poll times and the nodes'
        # last-seen times, and the very plan of the last cycle, so the registry check kept.
        reads, releases, writes = steady_statements(sent)
        assert (reads, releases) == ([], [])
        assert writes <= {"feeds", "store_revisions", "fleet_nodes"}, writes
        assert steady.plan.targets is last.plan.targets
        assert steady.targets is last.targets

        # A node that will reboot into another release: its target at the next cycle.
        kube_api.fleet.add_nodes(gpu_node("gpu-0", "5000.2.0", pending="5000.2.1"))
        moved = cycle()
        assert not moved.full_pass
        assert moved.plan is not None
        assert [record.tag for record in moved.targets] == [NEWEST, SECOND, PENDING, BEHIND]
        pending = {record.tag: record for record in moved.targets}[PENDING]
        assert pending.target.reasons == frozenset({TargetReason.PENDING_REBOOT})
        assert pending.state is TargetState.PUBLISHED
        settled = cycle()
        assert settled.decisions == []
        assert settled.plan is not None
        with statements(engine) as sent:
            again = cycle()
        assert again.plan is not None
        assert again.plan.targets is settled.plan.targets
        assert steady_statements(sent)[:2] == ([], [])

        # The fleet's own target edited by hand: unseen until the full pass, which reads
        # the releases and plans the fleet again.
        edit(engine, BEHIND)
        assert actions(cycle(), BEHIND) == []
        clock.advance(FULL_PASS)
        with statements(engine) as sent:
            full = cycle()
        assert full.full_pass
        assert actions(full, BEHIND) == [Action.PUBLISHED]
        reads, releases, _ = steady_statements(sent)
        assert reads
        assert releases
        assert cycle().decisions == []
