"""Delivery rounds that find the cycle guard taken, and a backlog that stops shrinking.

``Runner.deliver`` runs a round that found the guard taken (``DeliveryRound.busy``) as soon
as this process's cycle or retention gives the guard back, also when the guard is given
back while the busy round is still returning; ``BacklogWatch`` warns once per episode when
the backlog has not shrunk for its threshold; the runner exports the backlog, the oldest
event's age, the stuck flag and the rounds by outcome. The guard is the real SQLite
``CycleGuard``; threads meet on events, never on sleeps, and the clocks are injected.
The same under the real scheduler, with intervals that divide, equal or are coprime to the
delivery period: ``tests/integration/test_delivery_intervals.py``.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import Engine

from releasebot.runtime.leader.memory import AlwaysLeader
from releasebot.runtime.lock import CycleGuard
from releasebot.runtime.metrics import ServiceMetrics
from releasebot.runtime.runner import Runner, RunnerOptions
from releasebot.service.notifications import BacklogWatch, DeliveryRound, OutboxState
from releasebot.service.reconcile import CycleReport
from releasebot.store import migrate
from releasebot.store.engine import make_engine
from releasebot.store.memory import MemoryStateStore

T0 = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)
OPTIONS = RunnerOptions(
    interval=timedelta(seconds=10), jitter=timedelta(0), lease=timedelta(seconds=30)
)


@pytest.fixture
def guard(tmp_path: Path) -> Iterator[CycleGuard]:
    engine: Engine = make_engine(f"sqlite:///{tmp_path / 'state.db'}")
    migrate.upgrade(engine)
    yield CycleGuard(engine)
    engine.dispose()


class Rounds:
    """A delivery hook holding the guard as ``service.delivery.deliver_guarded`` does."""

    def __init__(self, guard: CycleGuard, backlog: int = 3) -> None:
        self.guard = guard
        self.outcomes: list[str] = []
        self.backlog = backlog
        self.during: Callable[[], None] = lambda: None

    def __call__(self) -> DeliveryRound:
        with self.guard.hold("delivery", timedelta(minutes=1), lambda: T0) as held:
            self.outcomes.append("ran" if held else "busy")
            if held:
                self.backlog = 0
        self.during()
        oldest = T0 if self.backlog else None
        return DeliveryRound(busy=not held, outbox=OutboxState(self.backlog, oldest))


def make_runner(
    guard: CycleGuard,
    rounds: Callable[[], DeliveryRound],
    cycle: Callable[[], CycleReport],
    now: list[datetime],
    monotonic: Callable[[], float] = lambda: 0.0,
) -> tuple[Runner, ServiceMetrics]:
    metrics = ServiceMetrics()
    runner = Runner(
        cycle=cycle,
        elector=AlwaysLeader("a"),
        guard=guard,
        holder="a",
        store=MemoryStateStore(),
        metrics=metrics,
        deliver=rounds,
        options=OPTIONS,
        clock=lambda: now[0],
        monotonic=monotonic,
    )
    runner.lead()
    return runner, metrics


class BlockedCycle:
    """A cycle that holds the guard until the test lets it end."""

    def __init__(self) -> None:
        self.inside = threading.Event()
        self.end = threading.Event()

    def __call__(self) -> CycleReport:
        self.inside.set()
        assert self.end.wait(30), "the test never ended the cycle"
        return CycleReport()


def metric(metrics: ServiceMetrics, name: str, **labels: str) -> float:
    for family in text_string_to_metric_families(metrics.render().decode()):
        for sample in family.samples:
            if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                return sample.value
    raise AssertionError(f"no sample {name} {labels}")


def test_a_round_that_met_the_cycle_runs_as_soon_as_the_cycle_ends(guard: CycleGuard) -> None:
    rounds, cycle = Rounds(guard), BlockedCycle()
    runner, metrics = make_runner(guard, rounds, cycle, [T0])
    ticking = threading.Thread(target=runner.tick)
    ticking.start()
    try:
        assert cycle.inside.wait(10)
        assert runner.deliver() == "busy"  # the round met the cycle on the same tick
        assert rounds.outcomes == ["busy"]
    finally:
        cycle.end.set()
        ticking.join(timeout=30)
    # No second scheduled round was needed: the cycle's end ran the owed one.
    assert rounds.outcomes == ["busy", "ran"]
    assert metric(metrics, "releasebot_delivery_rounds_total", outcome="busy") == 1
    assert metric(metrics, "releasebot_delivery_rounds_total", outcome="ran") == 1
    assert metric(metrics, "releasebot_notification_backlog") == 0


def test_a_guard_given_back_while_the_busy_round_returns_is_not_missed(
    guard: CycleGuard,
) -> None:
    """The cycle ends between the round's failed try and its report: the round is run
    again at once rather than a period later."""
    rounds, cycle = Rounds(guard), BlockedCycle()
    runner, _ = make_runner(guard, rounds, cycle, [T0])
    ticking = threading.Thread(target=runner.tick)
    ticking.start()
    assert cycle.inside.wait(10)

    def cycle_ends_now() -> None:
        rounds.during = lambda: None
        cycle.end.set()
        ticking.join(timeout=30)  # the cycle gave the guard back; nothing was owed yet

    rounds.during = cycle_ends_now
    try:
        assert runner.deliver() == "busy"
    finally:
        cycle.end.set()
        ticking.join(timeout=30)
    assert rounds.outcomes == ["busy", "ran"]


def test_a_round_busy_for_another_process_waits_for_this_one_to_give_the_guard_back(
    guard: CycleGuard,
) -> None:
    other = CycleGuard(guard._engine)  # another process: its own instance, its own row
    assert other.try_acquire("cronjob", timedelta(minutes=1), T0)
    rounds = Rounds(guard)
    runner, _ = make_runner(guard, rounds, CycleReport, [T0])
    try:
        assert runner.deliver() == "busy"
        assert rounds.outcomes == ["busy"]  # owed, not retried in a loop
    finally:
        other.release()
    assert runner.tick() == "completed"
    assert rounds.outcomes == ["busy", "ran"]
    assert runner.tick() == "completed"
    assert rounds.outcomes == ["busy", "ran"]  # paid once: nothing owed any more


def test_a_cycle_waits_for_the_round_in_progress_instead_of_being_skipped(
    guard: CycleGuard,
) -> None:
    """Round and cycle on the same tick, the round first: the cycle waits the round's
    few moments for the guard rather than being skipped as busy for a whole interval."""
    holding, done = threading.Event(), threading.Event()

    def slow_round() -> DeliveryRound:
        with guard.hold("delivery", timedelta(minutes=1), lambda: T0) as held:
            holding.set()
            assert done.wait(30)
        return DeliveryRound(busy=not held, outbox=OutboxState(0))

    ticking = threading.Event()

    def monotonic() -> float:
        ticking.set()  # the tick is past the leadership, about to take the guard
        return 0.0

    runner, _ = make_runner(guard, slow_round, CycleReport, [T0], monotonic)
    delivering = threading.Thread(target=runner.deliver)
    delivering.start()
    assert holding.wait(10)
    outcome: list[str] = []
    cycling = threading.Thread(target=lambda: outcome.append(runner.tick()))
    cycling.start()
    try:
        assert ticking.wait(10)
    finally:
        done.set()
        cycling.join(timeout=30)
        delivering.join(timeout=30)
    assert outcome == ["completed"]


def test_a_round_that_ran_owes_nothing(guard: CycleGuard) -> None:
    rounds = Rounds(guard)
    runner, _ = make_runner(guard, rounds, CycleReport, [T0])
    assert runner.deliver() == "ran"
    assert runner.tick() == "completed"
    assert rounds.outcomes == ["ran"]


def test_a_backlog_that_does_not_shrink_is_told_once_per_episode(
    caplog: pytest.LogCaptureFixture,
) -> None:
    watch = BacklogWatch(timedelta(minutes=1), logging.getLogger("test.backlog"))
    caplog.set_level(logging.INFO, logger="test.backlog")

    def observe(seconds: int, backlog: int) -> bool:
        return watch.observe(OutboxState(backlog, T0), T0 + timedelta(seconds=seconds))

    assert observe(0, 5) is False
    assert observe(50, 4) is False  # it shrank: counted from here
    assert observe(100, 6) is False  # grew: not shrinking since 50
    assert caplog.records == []
    assert observe(110, 6) is True
    assert observe(120, 9) is True
    [warning] = caplog.records
    assert warning.levelno == logging.WARNING
    assert warning.getMessage().startswith("notifications are not going out: 6 waiting")
    assert "the oldest from 2026-12-02T12:00:00+00:00" in warning.getMessage()
    assert observe(130, 8) is False  # moving again
    assert observe(200, 0) is False
    assert caplog.records[-1].getMessage() == (
        "notifications: the backlog is delivered, nothing waits"
    )
    assert observe(300, 1) is False  # a new episode: told again after a minute
    assert observe(360, 1) is True
    assert [r.levelno for r in caplog.records].count(logging.WARNING) == 2


def test_the_runner_exports_the_backlog_its_age_and_whether_it_is_stuck(
    guard: CycleGuard,
) -> None:
    now = [T0 + timedelta(minutes=5)]
    other = CycleGuard(guard._engine)
    assert other.try_acquire("cronjob", timedelta(hours=1), T0)
    rounds = Rounds(guard, backlog=4)
    runner, metrics = make_runner(guard, rounds, CycleReport, now)
    try:
        runner.deliver()
        assert metric(metrics, "releasebot_notification_backlog") == 4
        assert metric(metrics, "releasebot_notification_oldest_age_seconds") == 300
        assert metric(metrics, "releasebot_notification_stuck") == 0
        now[0] += OPTIONS.backlog_stuck_after
        runner.deliver()
        assert metric(metrics, "releasebot_notification_stuck") == 1
        assert metric(metrics, "releasebot_delivery_rounds_total", outcome="busy") == 2
    finally:
        other.release()
    runner.deliver()
    assert metric(metrics, "releasebot_notification_stuck") == 0
    assert metric(metrics, "releasebot_notification_oldest_age_seconds") == 0
