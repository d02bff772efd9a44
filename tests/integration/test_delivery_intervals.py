"""Notifications go out whatever the cycle interval, on a busy machine.

``releasebot run``'s pieces as it wires them: the real APScheduler loop of ``Runner``, one
SQLite engine holding the outbox and the cycle guard (``SharedGuard``), the delivery round
of ``service.delivery.deliver_guarded`` with slack-sdk's real client against the fake Slack Web
API over HTTP. The cycle holds the guard for most of its interval and queues one
notification per cycle. Periods are scaled down fifty times (delivery every 200 ms for
10 s), with intervals that divide the delivery period (5 s), equal it (10 s) and are
coprime to it (7 s). With 5 and 10 s, every round used to start on a cycle's tick, find
the guard taken and be skipped: nothing was ever posted. A CPU burner process per core
runs during each test, so scheduling is as uneven as on a shared node.
"""

from __future__ import annotations

import subprocess
import sys
import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy import Engine

from releasebot.domain.targets.events import EventKind, read_event
from releasebot.notify.slack import SlackNotifier, make_web_client
from releasebot.runtime.leader.memory import AlwaysLeader
from releasebot.runtime.lock import CycleGuard
from releasebot.runtime.metrics import ServiceMetrics
from releasebot.runtime.runner import Runner, RunnerOptions
from releasebot.service.delivery import deliver_guarded
from releasebot.service.notifications import DeliveryOutage, NotificationService
from releasebot.service.reconcile import CycleReport
from releasebot.store import migrate
from releasebot.store.engine import make_engine
from releasebot.store.sql import SqlStateStore
from releasebot.wiring import utc_now
from releasebot.wiring.guard import SharedGuard
from tests.support.runprocess import wait_for
from tests.support.slackapi import BOT_TOKEN, CHANNEL, SlackApi

SCALE = 50
DELIVER_EVERY = timedelta(seconds=10) / SCALE
CYCLES_WITH_NEWS = 6
CYCLES_TO_DELIVER = 12
"""Cycles after the last news by which everything must be in the channel. Counted in
cycles, not seconds, so a loaded machine slows both sides alike: a round meets at most
two cycles per period here and runs when the first of them ends; twelve leave room for a
few rounds that lose the race for the guard again. Without the owed round, the channel
stayed empty for a hundred cycles and more."""


@pytest.fixture
def burner() -> Iterator[None]:
    """One busy process per core (two here), ended by their own ids afterwards."""
    burners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(2)]
    try:
        yield
    finally:
        for process in burners:
            process.kill()
            process.wait(timeout=10)


@pytest.fixture
def engine(tmp_path: Path) -> Iterator[Engine]:
    engine = make_engine(f"sqlite:///{tmp_path / 'state.db'}")
    migrate.upgrade(engine)
    yield engine
    engine.dispose()


@pytest.mark.timeout(120)
@pytest.mark.parametrize(
    "interval_seconds",
    [5, 10, 7],
    ids=["interval-divides-the-period", "interval-equals-it", "interval-coprime-to-it"],
)
def test_every_notification_goes_out_whatever_the_interval(
    interval_seconds: int, engine: Engine, burner: None
) -> None:
    interval = timedelta(seconds=interval_seconds) / SCALE
    store = SqlStateStore(engine)
    guard = SharedGuard(CycleGuard(engine), "replica-a@test:1")
    queued: list[str] = []
    cycles: list[int] = []
    holding = threading.Event()  # never set: how long the cycle holds the guard

    def cycle() -> CycleReport:
        """Queues one notification (while there is news) and holds the guard for most
        of the interval, as a cycle over a slow registry does."""
        if len(queued) < CYCLES_WITH_NEWS:
            now = datetime.now(UTC)
            key = f"feed:flatcar/stable@{len(queued)}"
            payload: dict[str, str | int | list[str] | None] = {
                "feed": "flatcar/stable",
                "error": "HTTP 503 from the feed",
                "failing_since": now.isoformat(),
                "consecutive_failures": 3,
            }
            event = read_event(EventKind.FEED_FAILING, key, "flatcar/stable", now, payload)
            store.save(events=[event])
            queued.append(key)
        holding.wait((interval * 0.85).total_seconds())
        cycles.append(len(queued))
        return CycleReport()

    with SlackApi() as slack:
        client = make_web_client(
            BOT_TOKEN, base_url=slack.base_url, timeout=timedelta(seconds=5), sleep=lambda _s: None
        )
        notifier = SlackNotifier(client, channel=CHANNEL, repository="registry.test/driver")
        service = NotificationService(store=store, notifier=notifier)
        outage = DeliveryOutage()
        metrics = ServiceMetrics()
        runner = Runner(
            cycle=cycle,
            elector=AlwaysLeader("replica-a"),
            guard=guard.guard,
            holder=guard.holder,
            store=store,
            metrics=metrics,
            deliver=lambda: deliver_guarded(guard.hold, service, outage, utc_now),
            options=RunnerOptions(
                interval=interval,
                jitter=timedelta(0),
                lease=timedelta(seconds=30),
                deliver_every=DELIVER_EVERY,
            ),
        )
        runner.start()
        try:
            wait_for(
                lambda: len(queued) == CYCLES_WITH_NEWS or None,
                timeout=60,
                what="the cycles to queue their notifications",
            )
            # The cycles go on holding the guard for most of each interval.
            wait_for(
                lambda: (
                    len(_top_level(slack)) == CYCLES_WITH_NEWS
                    or cycles.count(CYCLES_WITH_NEWS) > CYCLES_TO_DELIVER
                ),
                timeout=60,
                what=f"{CYCLES_WITH_NEWS} messages, or {CYCLES_TO_DELIVER} cycles",
            )
            posted = len(_top_level(slack))
            after = cycles.count(CYCLES_WITH_NEWS)
        finally:
            assert runner.stop(timedelta(seconds=10))
        assert posted == CYCLES_WITH_NEWS, f"{posted} posted after {after} cycles"
        # A round may still be marking its last event (stop does not wait for rounds).
        wait_for(lambda: store.outbox_backlog() == 0, timeout=30, what="an empty outbox")
        assert len(_top_level(slack)) == CYCLES_WITH_NEWS  # each once, none twice


def _top_level(slack: SlackApi) -> list[str]:
    return [message.text for message in slack.messages() if message.thread_ts is None]
