"""What a dry run asks the real store: each table read once, in bulk, never per target.

Covers: a dry-run cycle (``reconcile --once --dry-run``'s) over a real SQL store sends the
same statements at 30 and at 300 stored targets, none of them a write, and launches what
the real cycle would; what ``DryRunStore`` keeps from one bulk read is read again once the
real store's change counter of that table moves, and once ``kept_for`` has passed (the
counters do not see a row edited behind releasebot's back).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest
from sqlalchemy import Engine, event, update

from releasebot.builders.kaniko import KanikoOptions
from releasebot.builders.memory import MemoryJobLauncher
from releasebot.domain.ports import StateStore
from releasebot.domain.shared.versions import Arch
from releasebot.domain.targets.decisions import Action
from releasebot.domain.targets.models import TargetState
from releasebot.domain.targets.policy import DriverPolicy, FlatcarPolicy, Policy
from releasebot.registry.memory import MemoryRegistry
from releasebot.service.plan import FeedSpec, PlanService
from releasebot.service.reconcile import CycleReport, ReconcileOptions, ReconcileService
from releasebot.sources.fetch import HttpFeedFetcher
from releasebot.sources.flatcar import parse_flatcar_feed
from releasebot.sources.nvidia import parse_nvidia_feed
from releasebot.store.dryrun import DryRunStore
from releasebot.store.tables import targets as targets_table
from tests.contract.conftest import Backend
from tests.contract.test_store_contract import driver, flatcar, plan
from tests.support.feedserver import FeedServer

T0 = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
DRIVERS = 10
MISSING = 3
"""Targets of each size the registry lacks: the dry run would launch them."""
CONTEXT = "git://git.example.test/gpu/recipes.git#refs/heads/main#" + "0123456789" * 4


@contextmanager
def statements(engine: Engine | None) -> Iterator[list[str]]:
    """Every statement sent to the database while the block runs."""
    assert engine is not None
    sent: list[str] = []

    def record(_conn: Any, _cursor: Any, statement: str, *_args: Any) -> None:
        sent.append(statement)

    event.listen(engine, "before_cursor_execute", record)
    try:
        yield sent
    finally:
        event.remove(engine, "before_cursor_execute", record)


def flatcar_feed(releases: int) -> bytes:
    return json.dumps(
        {
            f"5000.2.{n}": {
                "channel": "stable",
                "architectures": ["amd64"],
                "release_date": "2026-08-13 15:48:35 +0000",
                "major_software": {"kernel": [f"6.12.{n}"]},
                "release_notes": "synthetic",
            }
            for n in range(releases)
        }
    ).encode()


def nvidia_feed() -> bytes:
    info = [
        {
            "release_version": f"580.{200 - n}.01",
            "release_date": "",
            "release_notes": "https://docs.nvidia.com/x",
            "architectures": ["x86_64"],
            "runfile_url": {"x86_64": f"https://us.download.nvidia.com/tesla/580.{200 - n}.01/x"},
        }
        for n in range(DRIVERS)
    ]
    return json.dumps({"580": {"type": "lts branch", "driver_info": info}}).encode()


class Rig:
    """A real cycle and a dry-run cycle over one SQL store, the feeds on loopback HTTP."""

    def __init__(self, backend: Backend, feeds: FeedServer, client: httpx.Client) -> None:
        self.backend = backend
        self.feeds = feeds
        self.client = client
        self.registry = MemoryRegistry()
        feeds.route("/nvidia.json", FeedServer.static(nvidia_feed(), etag='"n"'))

    def grow_to(self, releases: int) -> None:
        """Serve ``releases`` Flatcar releases; all but ``MISSING`` targets in the registry."""
        self.releases = releases
        self.feeds.route(
            "/stable.json", FeedServer.static(flatcar_feed(releases), etag=f'"f{releases}"')
        )
        tags = [
            f"580.{200 - d}.01-flatcar5000.2.{r}" for r in range(releases) for d in range(DRIVERS)
        ]
        for tag in tags[MISSING:]:
            self.registry.add_image(tag)

    def service(self, store: StateStore, *, dry_run: bool) -> ReconcileService:
        planner = PlanService(
            store=store,
            fetcher=HttpFeedFetcher(self.client, retries=0),
            flatcar_feeds=[FeedSpec.flatcar("stable", self.feeds.url("/stable.json"))],
            nvidia_feed=FeedSpec.nvidia(self.feeds.url("/nvidia.json")),
            parse_flatcar=parse_flatcar_feed,
            parse_nvidia=parse_nvidia_feed,
            policy=Policy(
                FlatcarPolicy(("stable",), frozenset({Arch.AMD64}), keep=self.releases),
                DriverPolicy(frozenset({"580"}), frozenset(), keep=DRIVERS),
            ),
            clock=lambda: T0,
        )
        options = KanikoOptions(
            namespace="builds",
            registry_repository=self.registry.repository,
            registry_secret="push",
            context=CONTEXT,
        )
        return ReconcileService(
            planner=planner,
            store=store,
            registry=self.registry,
            launcher=MemoryJobLauncher(options),
            clock=lambda: T0,
            options=ReconcileOptions(max_concurrent_builds=MISSING),
            dry_run=dry_run,
        )

    def real_plan(self) -> CycleReport:
        """Poll, plan, check the registry and save, as ``releasebot plan`` does."""
        return self.service(self.backend.store, dry_run=False).plan()

    def dry_cycle(self) -> tuple[CycleReport, list[str]]:
        with statements(self.backend.engine) as sent:
            report = self.service(DryRunStore(self.backend.store), dry_run=True).cycle()
        return report, sent


@pytest.fixture
def rig(sql_backend: Backend) -> Iterator[Rig]:
    with FeedServer() as feeds, httpx.Client(timeout=10) as client:
        yield Rig(sql_backend, feeds, client)


def test_a_dry_run_sends_as_many_statements_at_300_targets_as_at_30(rig: Rig) -> None:
    sent_by_size = {}
    for releases in (3, 30):
        rig.grow_to(releases)
        assert not rig.real_plan().errors
        stored = rig.backend.store.targets()
        assert len(stored) == releases * DRIVERS
        report, sent = rig.dry_cycle()
        assert not report.errors
        # Nothing written, and what the real cycle would launch is what the dry run prints.
        assert [s for s in sent if s.split()[0].upper() in ("INSERT", "UPDATE", "DELETE")] == []
        would = {d.tag for d in report.decisions if d.action is Action.WOULD_LAUNCH}
        missing = {r.tag for r in stored if r.state is not TargetState.PUBLISHED}
        assert len(missing) == MISSING
        assert would == missing
        sent_by_size[releases * DRIVERS] = sent
    small, large = sent_by_size[30], sent_by_size[300]
    assert len(large) == len(small), "the statements a dry run sends grew with the targets"
    # Per table at most a few reads (the change counters are asked before each kept read):
    # the same kinds of statements, not one SELECT per target.
    assert len(large) < 60


def test_what_a_dry_run_keeps_is_read_again_when_the_store_moves(sql_backend: Backend) -> None:
    store, engine = sql_backend.store, sql_backend.engine
    store.sync_targets([plan(driver("580.178.04"), flatcar("4593.2.5"))], T0)
    seconds = [0.0]
    dry = DryRunStore(store, kept_for=timedelta(seconds=60), clock=lambda: seconds[0])
    [before] = dry.targets()
    assert before.state is TargetState.UNKNOWN

    # Kept: asked again, no SELECT of the targets table.
    with statements(engine) as sent:
        assert dry.targets() == [before]
        assert dry.target(before.tag) == before
    assert not [s for s in sent if "FROM targets" in s]

    # A releasebot write moves the counter: read again at once.
    store.sync_targets([plan(driver("580.178.04"), flatcar("4593.2.6"))], T0)
    assert [r.target.flatcar_version.text for r in dry.targets()] == ["4593.2.6"]
    assert len(dry.targets(required_only=False)) == 2

    # An edit behind releasebot's back moves no counter: seen once kept_for has passed.
    assert engine is not None
    with engine.begin() as conn:
        conn.execute(update(targets_table).values(state=TargetState.FAILED.value))
    assert {r.state for r in dry.targets(required_only=False)} == {TargetState.UNKNOWN}
    seconds[0] = 60.0
    assert {r.state for r in dry.targets(required_only=False)} == {TargetState.FAILED}
    assert dry.targets(state=TargetState.UNKNOWN) == []
