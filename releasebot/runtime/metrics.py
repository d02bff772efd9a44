"""The Prometheus metrics of ``releasebot run``, on a registry of their own.

``ServiceMetrics`` owns a ``CollectorRegistry`` (never the process-global one: tests build
many, and nothing else in the process should leak into ``/metrics``) and is updated once
per cycle from the ``CycleReport`` plus cheap reads of the store (the feeds' states, the
backlog; the targets only when their change counter moved since they were counted, or in
a cycle that read everything again), and by the runner for leadership and skipped
cycles.

The number an operator alerts on is ``releasebot_required_tags_unpublished``: required
targets whose image is not (yet) in the registry. It rises when a release appears and
falls when the build publishes; staying above zero for hours means builds are failing or
paused. Everything else explains why. With the fleet, ``releasebot_fleet_nodes{verdict}``
counts GPU nodes by the coverage verdict of the version they run and
``releasebot_fleet_missing_images{reason}`` the images nodes need that are not verified
(``fleet`` for the running versions, ``pending-reboot`` for the ones they reboot into);
both are exported by the leader only (a follower has not judged the fleet).

Deliberately not here: serving the text format (``web.server``), timing the cycle (the
runner measures and passes the duration), reading the cluster or the registry.
"""

from __future__ import annotations

import logging
from collections import Counter as Tally
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.exposition import generate_latest

from releasebot.domain.fleet.coverage import Coverage
from releasebot.domain.fleet.proof import ProofRecord, count_states
from releasebot.domain.ports import StateStore
from releasebot.domain.shared.errors import ReleasebotError
from releasebot.domain.targets.builds import BuildRecord, BuildState
from releasebot.domain.targets.decisions import Action, Decision
from releasebot.domain.targets.lifecycle import is_outstanding
from releasebot.domain.targets.models import TargetState
from releasebot.service.notifications import DeliveryRound
from releasebot.service.report import CycleReport

log = logging.getLogger("releasebot.metrics")

BUILD_DURATION_BUCKETS = (60, 120, 300, 600, 900, 1200, 1800, 2700, 3600, 5400, 7200)
"""Seconds. A Kaniko driver build takes 5-20 minutes; the Job's deadline is one hour by
default and can be raised to two."""
CYCLE_DURATION_BUCKETS = (0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600)
"""Seconds. An unchanged cycle takes well under a second; a first one over every feed and
a large registry some seconds; above the interval cycles start to be skipped."""


class ServiceMetrics:
    """Every metric of the service; ``render()`` gives the Prometheus text format."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.targets = Gauge(
            "releasebot_targets", "Required targets by state.", ["state"], registry=r
        )
        self.unpublished = Gauge(
            "releasebot_required_tags_unpublished",
            "Required image tags not in the registry yet: the number to alert on.",
            registry=r,
        )
        self.builds_started = Counter(
            "releasebot_builds_started", "Build Jobs created.", registry=r
        )
        self.builds_finished = Counter(
            "releasebot_builds_finished",
            "Builds that ended, by result (succeeded, failed) and failure reason.",
            ["result", "reason"],
            registry=r,
        )
        self.build_duration = Histogram(
            "releasebot_build_duration_seconds",
            "From a build's launch to the cycle that saw it end.",
            buckets=BUILD_DURATION_BUCKETS,
            registry=r,
        )
        self.feed_polls = Counter(
            "releasebot_feed_polls",
            "Feed polls by feed and result (changed, unchanged, failed).",
            ["feed", "result"],
            registry=r,
        )
        self.feed_last_success = Gauge(
            "releasebot_feed_last_success_timestamp_seconds",
            "When each feed last answered (Unix time).",
            ["feed"],
            registry=r,
        )
        self.backlog = Gauge(
            "releasebot_notification_backlog",
            "Notifications waiting in the outbox for delivery.",
            registry=r,
        )
        self.backlog_oldest = Gauge(
            "releasebot_notification_oldest_age_seconds",
            "Age of the oldest notification not delivered yet; 0 when none waits.",
            registry=r,
        )
        self.backlog_stuck = Gauge(
            "releasebot_notification_stuck",
            "1 while the notification backlog has not shrunk for a minute (nothing goes "
            "out: Slack refuses, or rounds cannot run), else 0.",
            registry=r,
        )
        self.delivery_rounds = Counter(
            "releasebot_delivery_rounds",
            "Delivery rounds by outcome: ran, busy (the cycle guard was taken; run again "
            "when the cycle ends).",
            ["outcome"],
            registry=r,
        )
        self.cycles = Counter(
            "releasebot_cycles",
            "Cycles by outcome: completed, failed, busy (another process held the guard).",
            ["outcome"],
            registry=r,
        )
        self.cycle_duration = Histogram(
            "releasebot_cycle_duration_seconds",
            "Wall time of one reconcile cycle.",
            buckets=CYCLE_DURATION_BUCKETS,
            registry=r,
        )
        self.last_cycle = Gauge(
            "releasebot_last_cycle_timestamp_seconds",
            "When the last cycle completed (Unix time); 0 before the first.",
            registry=r,
        )
        self.is_leader = Gauge(
            "releasebot_is_leader", "1 while this process leads, else 0.", registry=r
        )
        self.fleet_nodes = Gauge(
            "releasebot_fleet_nodes",
            "Flatcar GPU nodes by the coverage verdict of the version they run.",
            ["verdict"],
            registry=r,
        )
        self.fleet_missing = Gauge(
            "releasebot_fleet_missing_images",
            "Driver images GPU nodes need and the registry lacks (or releasebot cannot "
            "build), for the versions they run (fleet) or will reboot into (pending-reboot).",
            ["reason"],
            registry=r,
        )
        self.proof_nodes = Gauge(
            "releasebot_proof_nodes",
            "Nodes by the state of their after-reboot proof (armed: FLUO waits to reboot "
            "them; proving: back from the reboot; refused: the rollout halts there).",
            ["state"],
            registry=r,
        )
        self.images_proven = Gauge(
            "releasebot_images_proven",
            "Required published images a GPU node proved after rebooting into them.",
            registry=r,
        )
        for state in TargetState:
            self.targets.labels(state.value)
        for outcome in ("completed", "failed", "busy"):
            self.cycles.labels(outcome)
        for outcome in ("ran", "busy"):
            self.delivery_rounds.labels(outcome)
        self._targets_counted_at: int | None = None
        """The ``targets`` change counter the target gauges were counted at."""

    def render(self) -> bytes:
        return generate_latest(self.registry)

    def set_leader(self, leader: bool) -> None:
        self.is_leader.set(1 if leader else 0)

    def observe_delivery(self, round_: DeliveryRound, now: datetime, *, stuck: bool) -> None:
        """One delivery round: ran or busy, and the outbox it left when known."""
        self.delivery_rounds.labels("busy" if round_.busy else "ran").inc()
        if round_.outbox is None:
            return
        self.backlog.set(round_.outbox.backlog)
        oldest = round_.outbox.oldest_at
        self.backlog_oldest.set(0 if oldest is None else max(0.0, (now - oldest).total_seconds()))
        self.backlog_stuck.set(1 if stuck else 0)

    def cycle_skipped(self, outcome: str) -> None:
        self.cycles.labels(outcome).inc()

    def observe_cycle(
        self,
        report: CycleReport,
        store: StateStore,
        *,
        duration: timedelta,
        finished_at: datetime,
    ) -> None:
        """Record one completed cycle: its decisions and polls, the store's view, then its
        duration (``observe_report`` and ``observe_cycle_time``, for a caller that times
        the first too)."""
        self.observe_report(report, store)
        self.observe_cycle_time(duration=duration, finished_at=finished_at)

    def observe_cycle_time(self, *, duration: timedelta, finished_at: datetime) -> None:
        """A completed cycle: how long it took and when it ended."""
        self.cycles.labels("completed").inc()
        self.cycle_duration.observe(duration.total_seconds())
        self.last_cycle.set(finished_at.timestamp())

    def observe_report(self, report: CycleReport, store: StateStore) -> None:
        """A completed cycle's decisions and polls, then the store's view."""
        self.builds_started.inc(sum(1 for d in report.decisions if d.action is Action.LAUNCHED))
        for outcome in report.plan.outcomes if report.plan is not None else ():
            self.feed_polls.labels(outcome.feed, outcome.status.value).inc()
        if report.fleet is not None:
            self.observe_coverage(report.fleet.coverage)
            if report.fleet.proof is not None:
                self.observe_proofs(report.fleet.proof.records)
        try:
            self._observe_builds(report.decisions, store.builds)
            self.observe_store(store, full=report.full_pass)
        except ReleasebotError as error:  # the cycle is done; the gauges wait for the next
            log.warning("could not read the store for metrics: %s", error)

    def observe_coverage(self, coverage: Coverage) -> None:
        for verdict, count in coverage.counts().items():
            self.fleet_nodes.labels(verdict.value).set(count)
        self.fleet_missing.labels("fleet").set(coverage.missing_images(pending=False))
        self.fleet_missing.labels("pending-reboot").set(coverage.missing_images(pending=True))

    def observe_proofs(self, records: Sequence[ProofRecord]) -> None:
        for state, count in count_states(records).items():
            self.proof_nodes.labels(state.value).set(count)

    def forget_fleet(self) -> None:
        """Drop the fleet's gauges: a process that stopped leading no longer judges it."""
        self.fleet_nodes.clear()
        self.fleet_missing.clear()
        self.proof_nodes.clear()

    def observe_store(self, store: StateStore, *, full: bool = False) -> None:
        """Targets by state, the unpublished count, feeds' last success, the backlog.

        The targets are counted again only when their change counter moved (read first:
        the rows read after it are at least as new) or when ``full`` (a full pass, which
        also sees edits made behind releasebot's back)."""
        counter = store.revisions().get("targets")
        if full or counter is None or counter != self._targets_counted_at:
            self._observe_targets(store)
            self._targets_counted_at = counter
        for feed in store.feed_states():
            if feed.last_success_at is not None:
                self.feed_last_success.labels(feed.name).set(feed.last_success_at.timestamp())
        backlog: Callable[[], int] | None = getattr(store, "outbox_backlog", None)
        if backlog is not None:
            self.backlog.set(backlog())

    def _observe_targets(self, store: StateStore) -> None:
        targets = store.targets()
        states = Tally(record.state for record in targets)
        for state in TargetState:
            self.targets.labels(state.value).set(states.get(state, 0))
        self.unpublished.set(sum(1 for record in targets if is_outstanding(record)))
        self.images_proven.set(
            sum(
                1
                for record in targets
                if record.state is TargetState.PUBLISHED and record.proven_at is not None
            )
        )

    def _observe_builds(
        self, decisions: Sequence[Decision], builds: Callable[..., list[BuildRecord]]
    ) -> None:
        """Builds that ended this cycle: one store read per target that had one end."""
        ended = {(d.tag, d.job) for d in decisions if d.action.ends_build and d.job}
        for tag in sorted({tag for tag, _ in ended}):
            for build in builds(tag=tag):
                if (tag, build.job_name) not in ended or build.state.active:
                    continue
                succeeded = build.state is BuildState.SUCCEEDED
                reason = "" if succeeded or build.reason is None else build.reason.value
                result = "succeeded" if succeeded else "failed"
                self.builds_finished.labels(result, reason).inc()
                if build.finished_at is not None:
                    seconds = (build.finished_at - build.created_at).total_seconds()
                    self.build_duration.observe(max(0.0, seconds))
