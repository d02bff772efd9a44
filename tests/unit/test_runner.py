"""``Runner``: what a tick does on a leader and a follower, the guard, the hooks, the probes,
and the real APScheduler loop started and stopped.

Two replicas are played in-process with ``MemoryElector`` over one ``MemoryLease`` and the
SQLite ``CycleGuard``; clocks are injected, so leadership changes without waiting. The
scheduler tests use a real ``BackgroundScheduler`` with intervals of a few milliseconds.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import Engine, text

from releasebot.domain.ports import StateStore
from releasebot.domain.shared.errors import StoreUnavailableError
from releasebot.runtime.leader.memory import MemoryElector, MemoryLease
from releasebot.runtime.lock import CycleGuard
from releasebot.runtime.metrics import ServiceMetrics
from releasebot.runtime.runner import RETENTION_FLAG, Runner, RunnerOptions
from releasebot.service.reconcile import CycleReport
from releasebot.store import migrate
from releasebot.store.engine import make_engine
from releasebot.store.memory import MemoryStateStore
from releasebot.store.sql import SqlStateStore

T0 = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
OPTIONS = RunnerOptions(
    interval=timedelta(minutes=5), jitter=timedelta(0), lease=timedelta(seconds=30)
)


@dataclass
class Replica:
    """One process: its clocks, its hooks' record, its runner."""

    runner: Runner
    clock: list[float]
    now: list[datetime]
    events: list[str] = field(default_factory=list)
    metrics: ServiceMetrics = field(default_factory=ServiceMetrics)

    def advance(self, seconds: float) -> None:
        self.clock[0] += seconds
        self.now[0] += timedelta(seconds=seconds)

    def metric(self, name: str, **labels: str) -> float:
        for family in text_string_to_metric_families(self.metrics.render().decode()):
            for sample in family.samples:
                if sample.name == name and all(
                    sample.labels.get(k) == v for k, v in labels.items()
                ):
                    return sample.value
        raise AssertionError(f"no sample {name} {labels}")


@pytest.fixture
def guard_engine(tmp_path: Path) -> Iterator[Engine]:
    engine = make_engine(f"sqlite:///{tmp_path / 'state.db'}")
    migrate.upgrade(engine)
    yield engine
    engine.dispose()


@pytest.fixture
def replica(guard_engine: Engine) -> Callable[..., Replica]:
    lease = MemoryLease()

    def make(
        name: str,
        *,
        cycle: Callable[[], CycleReport] = CycleReport,
        ping: Callable[[], None] = lambda: None,
        socket: Callable[[], bool | None] = lambda: None,
        deliver: Callable[[], object] = lambda: None,
        retention: Callable[[], object] | None = None,
        options: RunnerOptions = OPTIONS,
        guard: CycleGuard | None = None,
        store: StateStore | None = None,
    ) -> Replica:
        clock, now = [0.0], [T0]
        events: list[str] = []
        metrics = ServiceMetrics()
        runner = Runner(
            cycle=cycle,
            elector=MemoryElector(lease, name, duration=options.lease, monotonic=lambda: clock[0]),
            guard=guard or CycleGuard(guard_engine),
            holder=name,
            store=store or MemoryStateStore(),
            metrics=metrics,
            ping=ping,
            deliver=deliver,
            on_lead_start=lambda: events.append("start"),
            on_lead_stop=lambda: events.append("stop"),
            socket_connected=socket,
            retention=retention,
            options=options,
            clock=lambda: now[0],
            monotonic=lambda: clock[0],
        )
        return Replica(runner, clock, now, events, metrics)

    return make


def test_only_the_leader_cycles_and_the_hooks_follow_the_leadership(
    replica: Callable[..., Replica],
) -> None:
    cycles: list[str] = []
    a = replica("a", cycle=lambda: cycles.append("a") or CycleReport())
    b = replica("b", cycle=lambda: cycles.append("b") or CycleReport())
    assert a.runner.tick() == "completed"
    assert b.runner.tick() == "follower"
    assert cycles == ["a"]
    assert (a.events, b.events) == (["start"], [])
    assert a.runner.last_cycle_at == T0
    assert a.metric("releasebot_is_leader") == 1
    assert b.metric("releasebot_is_leader") == 0
    assert a.metric("releasebot_cycles_total", outcome="completed") == 1
    assert a.metric("releasebot_last_cycle_timestamp_seconds") == T0.timestamp()
    # a stops renewing (it hangs); 30 s later on b's clock, b takes over.
    b.advance(31)
    assert b.runner.tick() == "completed"
    a.advance(31)
    assert a.runner.lead() is False
    assert (a.events, b.events) == (["start", "stop"], ["start"])
    assert cycles == ["a", "b"]


def test_a_leader_skips_the_cycle_while_another_process_holds_the_guard(
    replica: Callable[..., Replica], guard_engine: Engine
) -> None:
    ran: list[int] = []
    a = replica("a", cycle=lambda: ran.append(1) or CycleReport())
    other = CycleGuard(guard_engine)
    assert other.try_acquire("cronjob", timedelta(minutes=1), T0)
    assert a.runner.tick() == "busy"
    assert ran == []
    assert a.metric("releasebot_cycles_total", outcome="busy") == 1
    other.release()
    assert a.runner.tick() == "completed"
    assert ran == [1]


def test_a_failing_cycle_is_logged_and_the_next_one_runs(
    replica: Callable[..., Replica], caplog: pytest.LogCaptureFixture
) -> None:
    outcomes = iter([StoreUnavailableError("database down"), RuntimeError("a bug")])

    def cycle() -> CycleReport:
        error = next(outcomes, None)
        if error is not None:
            raise error
        return CycleReport()

    a = replica("a", cycle=cycle)
    assert a.runner.tick() == "failed"
    assert a.runner.tick() == "failed"
    assert a.runner.tick() == "completed"
    assert a.metric("releasebot_cycles_total", outcome="failed") == 2
    assert "database down" in caplog.text
    assert "a bug" in caplog.text  # with its traceback


def test_readiness(replica: Callable[..., Replica]) -> None:
    socket: list[bool | None] = [None]
    a = replica("a", socket=lambda: socket[0])
    b = replica("b", ping=lambda: (_ for _ in ()).throw(StoreUnavailableError("no db")))
    assert a.runner.readiness() == (True, "ready (follower)")  # not even elected yet
    a.runner.tick()
    assert a.runner.readiness() == (True, "ready (leader)")
    socket[0] = False
    assert a.runner.readiness() == (False, "Socket Mode is not connected")
    socket[0] = True
    a.advance(OPTIONS.stale_after.total_seconds() + 1)
    a.runner.lead()
    ready, why = a.runner.readiness()
    assert not ready
    assert why.startswith("no cycle completed since 2026-11-30T12:00:00")
    assert b.runner.readiness() == (False, "store unreachable: no db")


def test_delivery_runs_on_the_leader_only(replica: Callable[..., Replica]) -> None:
    delivered: list[str] = []
    a = replica("a", deliver=lambda: delivered.append("a"))
    b = replica("b", deliver=lambda: delivered.append("b"))
    a.runner.lead()
    b.runner.lead()
    a.runner.deliver()
    b.runner.deliver()
    assert delivered == ["a"]


def test_the_scheduler_runs_cycles_and_stops_cleanly(replica: Callable[..., Replica]) -> None:
    ticks = threading.Semaphore(0)
    fast = RunnerOptions(
        interval=timedelta(milliseconds=20),
        jitter=timedelta(0),
        lease=timedelta(seconds=30),
        deliver_every=timedelta(milliseconds=20),
    )
    a = replica("a", cycle=lambda: ticks.release() or CycleReport(), options=fast)
    a.runner.start()
    try:
        assert a.runner.alive()
        jobs = {job.id: job for job in a.runner._scheduler.get_jobs()}
        assert set(jobs) == {"lead", "follow", "cycle", "deliver"}
        assert jobs["follow"].trigger.interval == fast.follow_every
        for job in jobs.values():  # set deliberately: see the runner's docstring
            assert (job.coalesce, job.max_instances) == (True, 1)
        assert jobs["cycle"].misfire_grace_time >= 1
        for _ in range(3):
            assert ticks.acquire(timeout=5), "the scheduler did not run the cycle"
    finally:
        assert a.runner.stop(timedelta(seconds=5)) is True
    assert not a.runner.alive()
    assert a.events == ["start", "stop"]
    assert a.runner.readiness() == (False, "shutting down")


def test_a_follower_reads_the_lease_more_often_than_the_leader_renews_it(
    replica: Callable[..., Replica],
) -> None:
    # A fifteenth of the lease, 1 s at least, the renewal period at most: the takeover
    # bound (docs/architecture.md) is lease + 2 * follow_every plus scheduling delays.
    assert OPTIONS.follow_every == timedelta(seconds=2)
    assert replace(OPTIONS, lease=timedelta(seconds=6)).follow_every == timedelta(seconds=1)
    assert replace(OPTIONS, lease=timedelta(seconds=2)).follow_every == timedelta(seconds=2) / 3
    a, b = replica("a"), replica("b")
    assert a.runner.lead()
    assert not b.runner.lead()
    assert a.runner.follow() is True  # the leader renews on its own period only
    b.advance(29)
    assert b.runner.follow() is False
    b.advance(1)
    assert b.runner.follow() is True
    assert b.events == ["start"]


def test_stop_abandons_a_cycle_that_outlives_the_grace(replica: Callable[..., Replica]) -> None:
    started, release = threading.Event(), threading.Event()

    def slow() -> CycleReport:
        started.set()
        release.wait(10)
        return CycleReport()

    a = replica("a", cycle=slow, options=replace(OPTIONS, interval=timedelta(hours=1)))
    a.runner.start()
    try:
        assert started.wait(5)
        assert a.runner.stop(timedelta(milliseconds=50)) is False
        assert a.events == ["start", "stop"]
    finally:
        release.set()


def test_retention_runs_daily_on_the_leader_under_the_guard(
    replica: Callable[..., Replica], guard_engine: Engine
) -> None:
    runs: list[str] = []
    a = replica("a", retention=lambda: runs.append("a"))
    b = replica("b", retention=lambda: runs.append("b"))
    assert a.runner.tick() == "completed"  # a leads
    assert b.runner.tick() == "follower"
    assert b.runner.retain() == "follower"
    other = CycleGuard(guard_engine)
    assert other.try_acquire("cronjob", timedelta(minutes=1), T0)
    assert a.runner.retain() == "busy"  # tried again at the next check, not a day later
    other.release()
    assert a.runner.retain() == "completed"
    assert a.runner.retain() == "not-due"
    a.advance(timedelta(hours=23).total_seconds())
    assert a.runner.retain() == "not-due"
    a.advance(timedelta(hours=1).total_seconds())
    assert a.runner.retain() == "completed"
    assert runs == ["a", "a"]


def test_failing_retention_is_logged_and_tried_again_at_the_next_check(
    replica: Callable[..., Replica], caplog: pytest.LogCaptureFixture
) -> None:
    attempts: list[int] = []

    def failing() -> None:
        attempts.append(1)
        raise StoreUnavailableError("state store: connection refused")

    a = replica("a", retention=failing)
    assert a.runner.tick() == "completed"
    assert a.runner.retain() == "failed"
    assert "retention failed: state store: connection refused" in caplog.text
    assert a.runner.retain() == "not-due"  # not at every check: an hour later
    a.advance(timedelta(minutes=59).total_seconds())
    assert a.runner.retain() == "not-due"
    a.advance(timedelta(minutes=1).total_seconds())
    assert a.runner.retain() == "failed"
    assert len(attempts) == 2


def test_a_restart_or_a_new_leader_does_not_run_retention_again_before_it_is_due(
    replica: Callable[..., Replica],
) -> None:
    runs: list[str] = []
    store = MemoryStateStore()
    a = replica("a", retention=lambda: runs.append("a"), store=store)
    assert a.runner.tick() == "completed"
    assert a.runner.retain() == "completed"
    b = replica("b", retention=lambda: runs.append("b"), store=store)
    assert b.runner.tick() == "follower"
    b.advance(timedelta(hours=23).total_seconds())  # a is gone, its lease lapsed
    assert b.runner.tick() == "completed"
    assert b.runner.retain() == "not-due"
    b.advance(timedelta(hours=1).total_seconds())
    assert b.runner.retain() == "completed"
    assert runs == ["a", "b"]


def test_a_retention_flag_that_holds_no_time_runs_retention_and_is_overwritten(
    replica: Callable[..., Replica],
) -> None:
    store = MemoryStateStore()
    store.set_flag(RETENTION_FLAG, "not a time", T0)
    runs: list[str] = []
    a = replica("a", retention=lambda: runs.append("a"), store=store)
    assert a.runner.tick() == "completed"
    assert a.runner.retain() == "completed"
    assert store.flag(RETENTION_FLAG) == (T0 + timedelta(days=1)).isoformat()
    assert a.runner.retain() == "not-due"
    assert runs == ["a"]


def test_retention_checks_do_not_fall_in_step_with_delivery_rounds(
    replica: Callable[..., Replica], guard_engine: Engine
) -> None:
    """Delivery holds the guard for each round (``service.delivery``). With both jobs on the
    same period, started together, every retention check would meet a round holding the
    guard and be skipped as busy, for as long as the process runs."""
    guard = CycleGuard(guard_engine)
    retained = threading.Event()

    def deliver() -> None:
        with guard.hold("a", timedelta(minutes=1), lambda: T0) as held:
            if held:
                time.sleep(0.03)

    period = timedelta(milliseconds=100)
    options = replace(
        OPTIONS, interval=timedelta(hours=1), deliver_every=period, retention_check_every=period
    )
    a = replica("a", guard=guard, deliver=deliver, retention=retained.set, options=options)
    a.runner.start()
    try:
        # Generous for a loaded machine; in step, retention would never get the guard.
        assert retained.wait(30), "retention never got the guard between delivery rounds"
    finally:
        assert a.runner.stop(timedelta(seconds=10))


def test_without_retention_there_is_no_retention_job(replica: Callable[..., Replica]) -> None:
    a = replica("a")
    assert a.runner.retain() == "off"
    fast = replace(OPTIONS, retention_check_every=timedelta(hours=1))
    with_job = replica("b", retention=lambda: None, options=fast)
    for runner, expected in ((a.runner, set()), (with_job.runner, {"retention"})):
        runner.start()
        try:
            jobs = {job.id for job in runner._scheduler.get_jobs()}
        finally:
            runner.stop(timedelta(seconds=5))
        assert jobs - {"lead", "follow", "cycle", "deliver"} == expected


def test_a_follower_sees_an_edit_behind_releasebots_back_within_a_full_pass(
    replica: Callable[..., Replica], guard_engine: Engine
) -> None:
    from tests.contract.test_store_contract import driver, flatcar, plan

    store = SqlStateStore(guard_engine)
    store.sync_targets([plan(driver(), flatcar())], T0)
    # Shorter than the lease, so the leader need not renew while the follower's clock runs.
    options = replace(OPTIONS, full_pass=timedelta(seconds=20))
    leader = replica("a", options=options)
    follower = replica("b", options=options, store=store)
    assert leader.runner.tick() == "completed"
    assert follower.runner.tick() == "follower"
    assert follower.metric("releasebot_targets", state="unknown") == 1
    with guard_engine.begin() as conn:  # raw SQL: no counter moves
        conn.execute(text("UPDATE targets SET state = 'failed'"))
    follower.advance(19)
    assert follower.runner.tick() == "follower"
    assert follower.metric("releasebot_targets", state="unknown") == 1  # kept rows
    follower.advance(1)
    assert follower.runner.tick() == "follower"
    assert follower.metric("releasebot_targets", state="failed") == 1
    assert follower.metric("releasebot_targets", state="unknown") == 0
