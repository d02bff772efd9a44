"""``Runner``: the scheduler loop of ``releasebot run``, one leader at a time.

APScheduler 3.11's ``BackgroundScheduler`` runs its interval jobs on a pool of three
threads, so a long cycle never delays a lease renewal:

- ``lead`` every third of the lease: acquire or renew the leadership; on a change call
  ``on_lead_start``/``on_lead_stop`` (Socket Mode connects only on the leader);
- ``follow`` every ``follow_every`` (a fifteenth of the lease, 1 s at least), on a
  follower only: read the Lease, so a lapsed one is noticed soon after it lapsed (the
  takeover bound in ``docs/architecture.md`` rests on this period, not on the renewal's);
- ``cycle`` every ``interval`` plus up to ``jitter``: ``tick()``;
- ``deliver`` every ``deliver_every``: the notification delivery callable, leader only.
  A round holds the cycle guard, so one that finds it taken (``DeliveryRound.busy``) is
  owed: it runs as soon as this process's cycle (or retention) gives the guard back, not
  a period later, and, should that chance be lost to the next cycle, before that cycle
  takes the guard; a cycle also waits for a round in progress instead of being skipped.
  Rounds and cycles start on the same ticks whenever the interval divides the period
  (5 s, 10 s): without that, every round met a cycle holding the guard and no
  notification ever went out. The backlog each round leaves is watched
  (``BacklogWatch``): not shrinking for ``backlog_stuck_after`` is one warning and a gauge;
- ``retention`` (only when given) every ``retention_check_every``: ``retain()``, which
  runs the retention callable on the leader, under the cycle guard, once per
  ``retention_every`` (a run skipped because a cycle held the guard is tried again at the
  next check, not a day later; a failed run ``retention_retry_after`` later). When it is
  due next is kept in the store's flag ``retention_next_at``, so neither a restart nor a
  new leader runs it again before then. The checks are jittered by up to one delivery period:
  delivery holds the guard for each round, and checks in step with the rounds (both
  periods round, both started together) would find it busy every time.

Every job has ``coalesce=True`` (runs missed while the process was busy or suspended
become ONE run) and ``max_instances=1`` (a cycle never overlaps itself; a run due while
the previous one still runs is skipped). ``misfire_grace_time`` is each job's own period:
APScheduler's default of 1 s silently drops a run that starts a second late (a slow
thread pool, a GC pause, a suspended node), while a run later than a whole period is
superseded by the next one, which is at most one period away anyway.

``tick()``: renew the leadership; a follower only refreshes the store's gauges. The
leader takes the database ``CycleGuard`` (skipping the cycle if another process holds it:
a former leader still finishing, a CronJob run), runs the cycle, releases the guard, and
updates the metrics.

Shutdown (``stop``): no new runs; the running cycle gets ``shutdown_grace`` to finish.
The wiring sets the process's ``edge.stop.Halt`` first, which ends the cycle's waits on
upstreams (retry pauses, a feed request in flight) with ``Stopped``: the cycle unwinds
and gives the guard back within moments (``"stopped"``), rather than after its timeouts.
Abandoning it after that is safe: a cycle is a sequence of small transactions, each
step idempotent and repeated by the next cycle (``service.reconcile``), so a process
ending between or even inside steps never leaves half-written state. The guard is then
not released (the cycle may still write until the process ends; the advisory lock dies
with the process, the SQLite row lapses), the lease is.

Deliberately not here: signals and the HTTP server (``wiring``), what a cycle does
(``service.reconcile``), how leadership is decided (``releasebot.runtime.leader``).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, Protocol

from releasebot.domain.fleet.told import Flag, retention_due, retention_ran
from releasebot.domain.ports import LeaderElector, StateStore
from releasebot.domain.shared.errors import ReleasebotError
from releasebot.edge.stop import Stopped
from releasebot.service.notifications import BacklogWatch, DeliveryRound

if TYPE_CHECKING:  # prometheus_client only for the process that runs the scheduler
    from releasebot.runtime.metrics import ServiceMetrics
    from releasebot.service.report import CycleReport

log = logging.getLogger("releasebot.runner")


class Guard(Protocol):
    """What the runner needs of ``runtime.lock.CycleGuard``."""

    def hold(
        self, holder: str, ttl: timedelta, clock: Callable[[], datetime]
    ) -> AbstractContextManager[bool]: ...

    def stop_renewing(self) -> None: ...


def _nothing() -> None:
    return None


def _utc_now() -> datetime:
    return datetime.now(UTC)


@dataclass(frozen=True, kw_only=True)
class RunnerOptions:
    """The scheduler's timing; ``interval``, ``jitter`` and ``lease`` are the ``[run]``
    settings (their defaults are the settings')."""

    interval: timedelta
    jitter: timedelta
    lease: timedelta
    """The Lease's duration; the leadership is renewed every third of it."""
    deliver_every: timedelta = timedelta(seconds=10)
    """Notification latency; Slack allows about one message per second per channel."""
    backlog_stuck_after: timedelta = timedelta(minutes=1)
    """A notification backlog that has not shrunk for this long (six delivery rounds) is a
    warning line and ``releasebot_notification_stuck``: long enough for a busy round or a
    Slack blip to pass, short enough to be told before anyone asks where the messages are."""
    guard_ttl: timedelta = timedelta(seconds=60)
    """How long a SQLite guard row outlives a dead holder (renewed every third of it)."""
    shutdown_grace: timedelta = timedelta(seconds=20)
    """Below Kubernetes' default terminationGracePeriodSeconds (30) minus probe slack."""
    stuck_after: timedelta = timedelta(hours=1)
    """A cycle running longer than this makes /healthz fail: restart a hung process."""
    retention_every: timedelta = timedelta(days=1)
    """How often retention runs (when it is given)."""
    retention_retry_after: timedelta = timedelta(hours=1)
    """How long after a failed retention run the next is tried (not at the next check:
    a registry or store that is down would otherwise be hit 144 times a day)."""
    full_pass: timedelta = timedelta(hours=1)
    """``run.full_pass_seconds``: a follower counts the targets for its gauges from a fresh
    read this often (the leader's cycle does its own full pass), so an edit behind
    releasebot's back shows on every replica within it."""
    retention_check_every: timedelta = timedelta(minutes=10)
    """How often the leader checks whether retention is due; the first check comes this
    long after the start, once the first cycle has read the feeds and the fleet; the
    later ones up to ``deliver_every`` later (jitter), out of step with delivery."""

    @property
    def follow_every(self) -> timedelta:
        """How often a follower reads the Lease: a fifteenth of it (2 s for the default 30 s,
        client-go's retry period for its 15 s), at least 1 s (one GET a second at most), at
        most the renewal period. A follower sees a renewal at most this late and notices a
        lapsed lease at most this late, so it takes over within ``lease + 2 * follow_every``
        of the last renewal, plus scheduling delays (``docs/architecture.md``)."""
        return min(self.lease / 3, max(timedelta(seconds=1), self.lease / 15))

    @property
    def stale_after(self) -> timedelta:
        """A leader whose last cycle is older than this is not ready: two missed cycles."""
        return self.interval * 2 + self.jitter + timedelta(seconds=60)


RETENTION_FLAG = Flag.RETENTION_NEXT_AT
"""The store flag holding when retention is due next (ISO 8601, UTC): ``domain.fleet.told``."""


class Runner:
    """Schedules the cycle on the leader; ``start``, then ``stop`` once."""

    def __init__(
        self,
        *,
        cycle: Callable[[], CycleReport],
        elector: LeaderElector,
        guard: Guard,
        holder: str,
        store: StateStore,
        metrics: ServiceMetrics,
        ping: Callable[[], None] = _nothing,
        deliver: Callable[[], object] = _nothing,
        on_lead_start: Callable[[], None] = _nothing,
        on_lead_stop: Callable[[], None] = _nothing,
        socket_connected: Callable[[], bool | None] = _nothing,
        retention: Callable[[], object] | None = None,
        options: RunnerOptions,
        clock: Callable[[], datetime] = _utc_now,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._cycle = cycle
        self._elector = elector
        self._guard = guard
        self._holder = holder
        self._store = store
        self._metrics = metrics
        self._ping = ping
        self._deliver = deliver
        self._on_lead_start = on_lead_start
        self._on_lead_stop = on_lead_stop
        self._socket_connected = socket_connected
        self._retention = retention
        self._retention_next_at: datetime | None = None
        self.options = options
        self._clock = clock
        self._monotonic = monotonic
        self._lead_lock = threading.Lock()
        self._leading = False
        self._lead_since: datetime | None = None
        self.last_cycle_at: datetime | None = None
        self._cycle_started: float | None = None
        self._idle = threading.Event()
        self._idle.set()
        self._stopping = threading.Event()
        self._scheduler: Any = None
        self._backlog = BacklogWatch(options.backlog_stuck_after)
        self._delivering = threading.Lock()  # one round at a time, scheduled or owed
        self._owed_lock = threading.Lock()
        self._owed = False  # a round found the guard taken: run one when it is given back
        self._given_back = 0  # how often this process's cycle or retention gave it back
        self._follower_read_at: float | None = None  # a follower's last full read (gauges)

    # -- lifecycle -----------------------------------------------------------------------

    def start(self) -> None:
        """Take the leadership if free, then start the scheduler (first cycle at once)."""
        from apscheduler.executors.pool import ThreadPoolExecutor
        from apscheduler.schedulers.background import BackgroundScheduler
        from apscheduler.triggers.interval import IntervalTrigger

        self.lead()
        options = self.options
        scheduler = BackgroundScheduler(
            executors={"default": ThreadPoolExecutor(3)},
            job_defaults={"coalesce": True, "max_instances": 1},
            timezone=UTC,
        )
        renew = options.lease / 3
        jobs: list[tuple[str, Callable[[], object], timedelta, timedelta]] = [
            ("lead", self.lead, renew, timedelta()),
            ("follow", self.follow, options.follow_every, timedelta()),
            ("cycle", self.tick, options.interval, options.jitter),
            ("deliver", self.deliver, options.deliver_every, timedelta()),
        ]
        if self._retention is not None:
            # Jittered by up to one delivery period: started together on round periods
            # (10 min, 10 s), every check would meet a delivery round holding the guard.
            check = options.retention_check_every
            spread = min(options.deliver_every, check)
            jobs.append(("retention", self.retain, check, spread))
        now = datetime.now(UTC)  # APScheduler runs on the real clock, whatever ours says
        for name, function, every, jitter in jobs:
            scheduler.add_job(
                function,
                IntervalTrigger(
                    seconds=every.total_seconds(), jitter=jitter.total_seconds() or None
                ),
                id=name,
                name=name,
                misfire_grace_time=max(1, int(every.total_seconds())),
                next_run_time=now if name == "cycle" else now + every,
            )
        scheduler.start()
        self._scheduler = scheduler
        log.info(
            "scheduler started",
            extra={"interval": options.interval.total_seconds(), "holder": self._holder},
        )

    def stop(self, grace: timedelta | None = None) -> bool:
        """Stop scheduling, let a running cycle finish (up to ``grace``), give up the lease.

        True when no cycle was left running; False when one was abandoned (the caller
        should end the process: the cycle's thread cannot be interrupted).
        """
        self._stopping.set()
        if self._scheduler is not None and self._scheduler.running:
            self._scheduler.shutdown(wait=False)
        wait = grace if grace is not None else self.options.shutdown_grace
        finished = self._idle.wait(wait.total_seconds())
        if not finished:
            log.warning(
                "abandoning the running cycle after %s; it stops between two transactions",
                wait,
            )
            self._guard.stop_renewing()
        with self._lead_lock:
            self._set_leading(False)
            self._elector.release()
        return finished

    # -- the jobs ------------------------------------------------------------------------

    def lead(self) -> bool:
        """Acquire or renew the leadership; run the hooks when it changes."""
        with self._lead_lock:
            if self._stopping.is_set():
                return False
            try:
                self._elector.ensure()
            except ReleasebotError as error:
                log.warning("leader election failed: %s", error)
            self._set_leading(self._elector.is_leader)
            return self._leading

    def follow(self) -> bool:
        """On a follower, one more look at the Lease (``lead``); the leader renews on its
        own period and is left alone."""
        if self._elector.is_leader:
            return True
        return self.lead()

    def tick(self) -> str:
        """One scheduled cycle; returns what happened (for tests and the log):
        ``follower``, ``busy``, ``completed``, ``failed``, ``stopping`` or ``stopped`` (the
        shutdown ended it mid-way)."""
        if self._stopping.is_set():
            return "stopping"
        if not self.lead():
            # Followers export the store's gauges too, so no replica reports a stale 0; the
            # fleet's they drop, as only the leader judges it.
            self._metrics.forget_fleet()
            now = self._monotonic()
            last = self._follower_read_at
            full = last is None or now - last >= self.options.full_pass.total_seconds()
            try:
                if full:
                    self._store.forget()  # the kept rows may hide an edit behind our back
                self._metrics.observe_store(self._store, full=full)
                if full:
                    self._follower_read_at = now
            except ReleasebotError as error:
                log.warning("could not read the store for metrics: %s", error)
            return "follower"
        self._idle.clear()
        self._cycle_started = self._monotonic()
        try:
            self._before_cycle()
            return self._guarded_cycle()
        finally:
            self._cycle_started = None
            self._idle.set()
            self._gave_back()

    def deliver(self, *, wait: bool = False) -> str:
        """Deliver pending notifications, on the leader only; what happened: ``stopping``,
        ``follower``, ``running`` (a round runs right now; with ``wait``, it is waited
        for), ``ran``, ``failed`` or ``busy`` (the guard was taken: the round is owed, see
        the module's docstring)."""
        if self._stopping.is_set():
            return "stopping"
        if not self._elector.is_leader:
            return "follower"
        if not self._delivering.acquire(blocking=wait):
            return "running"
        try:
            given_back = self._given_back
            try:
                result = self._deliver()
            except Exception:  # a delivery bug must not stop the loop; logged with traceback
                log.exception("notification delivery failed")
                return "failed"
        finally:
            self._delivering.release()
        round_ = result if isinstance(result, DeliveryRound) else DeliveryRound()
        now = self._clock()
        stuck = False if round_.outbox is None else self._backlog.observe(round_.outbox, now)
        self._metrics.observe_delivery(round_, now, stuck=stuck)
        if not round_.busy:
            with self._owed_lock:
                self._owed = False  # this round did what was owed
            return "ran"
        with self._owed_lock:
            # Given back while this round ran: run again now, else when it is given back.
            again = self._given_back != given_back
            self._owed = not again
        if again:
            self._soon()
        return "busy"

    def _before_cycle(self) -> None:
        """Delivery first: a round running now ends before the cycle asks for the guard it
        holds (else the cycle would be skipped as busy), and a round still owed (its
        second chance, right after the last cycle, lost the guard to this one) runs now,
        so a busy machine delays a notification by one cycle, never for good."""
        with self._owed_lock:
            owed = self._owed
        if owed:
            self.deliver(wait=True)
            return
        with self._delivering:
            pass

    def _gave_back(self) -> None:
        """This process's cycle or retention released the guard: run an owed round."""
        with self._owed_lock:
            self._given_back += 1
            owed, self._owed = self._owed, False
        if owed:
            self._soon()

    def _soon(self) -> None:
        """A delivery round now, on the scheduler's pool (inline without a scheduler)."""
        if self._stopping.is_set():
            return
        scheduler = self._scheduler
        if scheduler is None:
            self.deliver()
        elif scheduler.running:  # a stopped scheduler would only queue it, never run it
            scheduler.add_job(
                self.deliver,
                id="deliver-owed",
                name="deliver-owed",
                replace_existing=True,
                misfire_grace_time=None,
            )

    def retain(self) -> str:
        """Run retention if due, on the leader, holding the cycle guard; what happened:
        ``off``, ``stopping``, ``follower``, ``not-due``, ``busy``, ``completed`` or
        ``failed``."""
        if self._retention is None:
            return "off"
        if self._stopping.is_set():
            return "stopping"
        if not self.lead():
            return "follower"
        due = self._retention_due()
        if due is not None and self._clock() < due:
            return "not-due"
        outcome, wait = "completed", self.options.retention_every
        try:
            with self._guard.hold(self._holder, self.options.guard_ttl, self._clock) as held:
                if not held:
                    log.info("retention: a cycle holds the guard; trying again later")
                    return "busy"
                self._retention()
        except Stopped:
            log.info("retention stopped: releasebot is shutting down")
            return "stopped"
        except ReleasebotError as error:
            log.warning("retention failed: %s", error)
            outcome, wait = "failed", self.options.retention_retry_after
        except Exception:  # a bug must not end the loop: logged with its traceback
            log.exception("retention failed unexpectedly")
            outcome, wait = "failed", self.options.retention_retry_after
        finally:
            self._gave_back()
        now = self._clock()
        self._retention_next_at = now + wait
        change = retention_ran(now, wait)
        try:  # kept in the store, so a restart or a new leader does not run it again soon
            self._store.set_flag(change.name, change.value, now)
        except ReleasebotError as error:
            log.warning("retention: cannot keep when it runs next: %s", error)
        if outcome == "failed":
            log.info("retention: trying again at %s", (now + wait).isoformat())
        return outcome

    def _retention_due(self) -> datetime | None:
        """When retention is due next: the store's word (shared by every replica, kept
        over restarts), else this process's own; ``None``: now (never ran)."""
        try:
            stored = self._store.flag(RETENTION_FLAG)
        except ReleasebotError as error:
            log.warning("retention: cannot read when it runs next: %s", error)
            return self._retention_next_at
        due = retention_due(stored, self._retention_next_at)
        if due.unreadable:  # not one of ours: run, then overwrite it
            log.warning("retention: flag %s holds no time; running now", RETENTION_FLAG)
        return due.at

    # -- probes --------------------------------------------------------------------------

    def alive(self) -> bool:
        """The loop runs and no cycle has hung: /healthz."""
        scheduler = self._scheduler
        if scheduler is None or not scheduler.running or self._stopping.is_set():
            return False
        started = self._cycle_started
        limit = self.options.stuck_after.total_seconds()
        return started is None or self._monotonic() - started < limit

    def readiness(self) -> tuple[bool, str]:
        """/readyz: the store answers; a leader cycled recently and its Socket Mode is up."""
        if self._stopping.is_set():
            return False, "shutting down"
        try:
            self._ping()
        except ReleasebotError as error:
            return False, f"store unreachable: {error}"
        if not self._elector.is_leader:
            return True, "ready (follower)"
        since = self.last_cycle_at or self._lead_since
        if since is not None and self._clock() - since > self.options.stale_after:
            return False, f"no cycle completed since {since.isoformat()}"
        if self._socket_connected() is False:
            return False, "Socket Mode is not connected"
        return True, "ready (leader)"

    # -- inside ----------------------------------------------------------------------------

    def _guarded_cycle(self) -> str:
        ttl = self.options.guard_ttl
        started = self._monotonic()
        try:
            with self._guard.hold(self._holder, ttl, self._clock) as held:
                if not held:
                    log.info("another process is running a cycle: skipping this one")
                    self._metrics.cycle_skipped("busy")
                    return "busy"
                report = self._cycle()
        except Stopped:  # the shutdown ended a wait: the guard is given back, nothing lost
            log.info("cycle stopped: releasebot is shutting down")
            return "stopped"
        except ReleasebotError as error:
            log.error("cycle failed: %s", error, extra={"error": type(error).__name__})
            self._metrics.cycle_skipped("failed")
            return "failed"
        except Exception:  # a bug must not end the loop: log it, try again next interval
            log.exception("cycle failed unexpectedly")
            self._metrics.cycle_skipped("failed")
            return "failed"
        self._metrics.observe_report(report, self._store)
        # Timed after the metrics: the logged duration is everything the cycle costs.
        duration = timedelta(seconds=self._monotonic() - started)
        self.last_cycle_at = finished = self._clock()
        self._metrics.observe_cycle_time(duration=duration, finished_at=finished)
        log.info(
            "cycle completed",
            extra={
                "duration": round(duration.total_seconds(), 3),
                "decisions": len(report.decisions),
                "errors": len(report.errors),
            },
        )
        for problem in report.errors:
            log.warning("cycle problem: %s", problem)
        return "completed"

    def _set_leading(self, leader: bool) -> None:
        """Record the leadership (call with ``_lead_lock``); hooks run on a change."""
        self._metrics.set_leader(leader)
        if leader == self._leading:
            return
        self._leading = leader
        self._lead_since = self._clock() if leader else None
        hook, name = (self._on_lead_start, "start") if leader else (self._on_lead_stop, "stop")
        try:
            hook()
        except Exception:  # the hooks are other features' (Socket Mode): never fatal here
            log.exception("the on_lead_%s hook failed", name)
