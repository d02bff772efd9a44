"""Use case: one reconcile cycle, the plan without launching, and launching by hand.

The cycle: list the fleet, poll feeds -> plan -> follow running builds (verify and record
what finished) -> check the registry -> launch what is due, at most
``max_concurrent_builds`` Jobs at a time, unless paused -> judge the fleet's coverage and
answer the reboot gate (``service.fleet``). Each step is a short transaction, so a cycle
killed anywhere resumes (``service.attempts`` says how for the builds).

A steady cycle costs what changed, not what exists: the store's change counters, the
registry's tag list and the plan's own list are compared with what the last cycle kept
(``_KeptCheck``, ``PlanService``'s kept plan, the store's kept rows), and when none moved
the registry check is the last one's, with nothing to save, and only the targets that may
come due are handed to the launch order. Every ``full_pass_every`` (and in a new process,
and when ``full_pass`` asks, as a new leader does) the cycle drops everything kept and
reads everything again, so an edit behind releasebot's back is seen within one pass.

This module keeps the order and the I/O; every rule is ``domain.targets.lifecycle``'s: which
targets the registry's tag list publishes or makes missing, which are due, in which order
and how many fit (the same functions answer ``/releasebot plan``), and when a person may
start one. Retries across cycles live there too, driven by the failure's class.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta

from releasebot.domain.fleet.coverage import Coverage, fleet_coverage
from releasebot.domain.fleet.told import Flag
from releasebot.domain.ports import ArtifactSource, Attestor, JobLauncher, Registry, StateStore
from releasebot.domain.shared.errors import ReleasebotError, TargetBusyError
from releasebot.domain.shared.versions import Arch
from releasebot.domain.targets import lifecycle
from releasebot.domain.targets.bases import BaseRules
from releasebot.domain.targets.builds import arch_tag
from releasebot.domain.targets.decisions import Action
from releasebot.domain.targets.lifecycle import LifecycleRules
from releasebot.domain.targets.models import TargetRecord, TargetState
from releasebot.service.attempts import Attempts, ReconcileOptions
from releasebot.service.bases import driver_bases
from releasebot.service.plan import PlanService
from releasebot.service.report import CycleReport

__all__ = ["PAUSED_FLAG", "CycleReport", "ReconcileOptions", "ReconcileService"]

log = logging.getLogger("releasebot.reconcile")

PAUSED_FLAG = Flag.PAUSED
_DEFAULT_OPTIONS = ReconcileOptions()
FULL_PASS_EVERY = timedelta(hours=1)
"""How often a cycle reads everything again (``run.full_pass_seconds``' default)."""


@dataclass(frozen=True)
class _KeptCheck:
    """What the last registry check saw and concluded, when it changed nothing."""

    planned: Sequence[TargetRecord]
    """The plan's list it checked (the very object: the planner hands the same one back
    while nothing it read moved)."""
    counter: int
    """The ``targets`` change counter before the check read the targets."""
    tags: set[str]
    """The registry's tags it saw (never changed in place: read, then replaced)."""
    checked: list[TargetRecord]
    may_come_due: list[TargetRecord]


class ReconcileService:
    """Drives targets from planned to published."""

    def __init__(
        self,
        *,
        planner: PlanService,
        store: StateStore,
        registry: Registry,
        launcher: JobLauncher,
        clock: Callable[[], datetime],
        options: ReconcileOptions = _DEFAULT_OPTIONS,
        dry_run: bool = False,
        artifacts: ArtifactSource | None = None,
        attestor: Attestor | None = None,
        full_pass_every: timedelta = FULL_PASS_EVERY,
        base_rules: BaseRules | None = None,
    ) -> None:
        self._planner = planner
        self._store = store
        self._registry = registry
        self._clock = clock
        self._options = options
        self._dry_run = dry_run
        self._bases = driver_bases(
            base_rules, store, registry, launcher, clock, options, dry_run, attestor
        )
        self._attempts = Attempts(
            store=store,
            registry=registry,
            launcher=launcher,
            clock=clock,
            options=options,
            dry_run=dry_run,
            artifacts=artifacts,
            attestor=attestor,
            bases=self._bases,
        )
        self._tags: set[str] = set()
        self._full_pass_every = full_pass_every
        self._full_pass_at: datetime | None = None
        """When the last full pass started; ``None``: the next cycle is one."""
        self._kept: _KeptCheck | None = None

    @property
    def store(self) -> StateStore:
        return self._store

    @property
    def rules(self) -> LifecycleRules:
        return self._options

    @property
    def paused(self) -> bool:
        """Whether a person paused launching (``/releasebot pause``); builds still finish."""
        return self._store.flag(PAUSED_FLAG) is not None

    # -- the cycle -----------------------------------------------------------------------

    def full_pass(self) -> None:
        """Make the next cycle read everything again (a new leader calls it: another
        process led meanwhile). Safe from any thread: the cycle acts on it at its start."""
        self._full_pass_at = None

    def _start_full_pass_if_due(self, report: CycleReport) -> None:
        now = self._clock()
        last = self._full_pass_at
        if last is not None and timedelta(0) <= now - last < self._full_pass_every:
            return
        self._full_pass_at = now
        self._kept = None
        self._planner.forget()
        self._store.forget()
        report.full_pass = True

    def cycle(self) -> CycleReport:
        """Poll, plan, follow running builds, check the registry, launch what is due."""
        report = CycleReport()
        self._start_full_pass_if_due(report)
        plan = report.plan = self._planner.plan()
        if not self._dry_run:
            self._attempts.follow(report)
            if self._bases is not None:
                self._bases.follow(report)
        checked = self._check(plan.targets, report, read_digests=False)
        urgent = frozenset() if plan.fleet is None else plan.fleet.urgent_tags()
        if checked is not None and self.paused:
            report.decide(Action.PAUSED, "-", "launching is paused (/releasebot resume)")
        elif checked is not None:
            kept = self._kept
            due = kept.may_come_due if kept is not None and kept.checked is checked else checked
            self._launch_due(due, report, urgent)
        fleet = self._planner.fleet
        if checked is not None and fleet is not None and plan.fleet is not None:
            assert plan.snapshot is not None  # a fleet plan is made from a snapshot
            records = {record.tag: record for record in self._store.targets()}
            report.fleet = fleet.settle(plan.fleet, plan.snapshot, records)
        return report

    def plan(self, *, digest_reads: int = 50) -> CycleReport:
        """Poll, plan and check the registry; launch nothing (``releasebot plan``).

        Reads the digest of up to ``digest_reads`` published tags whose digest is not yet
        known (one request each); the cycle itself never does, to stay O(pages).
        """
        report = CycleReport()
        plan = report.plan = self._planner.plan()
        self._check(plan.targets, report, read_digests=True, digest_reads=digest_reads)
        return report

    @staticmethod
    def coverage(report: CycleReport) -> Coverage | None:
        """The fleet's coverage by the targets of ``report`` (a ``plan()``'s or a cycle's);
        ``None`` without a fleet. The query ``releasebot fleet`` and the demo answer from."""
        if report.plan is None or report.plan.fleet is None:
            return None
        records = report.targets or report.plan.targets
        return fleet_coverage(report.plan.fleet, {record.tag: record for record in records})

    def launch_plan(
        self, targets: Sequence[TargetRecord], urgent: Collection[str] = ()
    ) -> lifecycle.LaunchPlan:
        """What the next cycle launches from ``targets`` (``plan()``'s), as it would decide
        it now: the same rules, the builds running now (inputs taken as published), the
        ``urgent`` tags first (``FleetPlan.urgent_tags``)."""
        running = len(self._store.builds(active_only=True))
        return lifecycle.launch_plan(
            targets, running=running, now=self._clock(), rules=self._options, urgent=urgent
        )

    def _check(
        self,
        planned: Sequence[TargetRecord],
        report: CycleReport,
        *,
        read_digests: bool,
        digest_reads: int = 0,
    ) -> list[TargetRecord] | None:
        """The planned targets as the registry has them, saved; ``None`` if it can't say.

        One tag listing (O(pages) requests); digests are not read here (that would cost a
        request per target): they are known for what releasebot built and verified itself.
        """
        try:
            tags = self._registry.tags()
            counter = self._store.revisions().get("targets", 0)
            kept = self._kept
            if (
                not read_digests
                and kept is not None
                and kept.planned is planned
                and kept.counter == counter
                and kept.tags == tags
            ):
                # Same plan, no target written since, same tags: the same check again
                # would change nothing (``check_registry`` reads only state and presence).
                self._tags = kept.tags
                report.targets = kept.checked
                return kept.checked
            self._kept = None
            self._tags = tags
            stored = {record.tag: record for record in self._store.targets()}
            current = [stored.get(record.tag, record) for record in planned]  # after `follow`
            now = self._clock()
            checked = []
            for record in current:
                change = lifecycle.check_registry(record, present=record.tag in self._tags, now=now)
                if change is not None:
                    report.add(change.decision)
                    record = change.record
                checked.append(record)
            if read_digests:
                checked = self._read_digests(checked, digest_reads)
        except ReleasebotError as error:
            # Without the registry nothing can be called missing: launch nothing this time.
            # Said once, by whoever shows the report (the CLI's line, `run`'s "cycle problem").
            report.errors.append(str(error))
            return None
        changed = [t for t, c in zip(checked, current, strict=True) if t != c]
        self._store.save(targets=changed)
        if not changed and not read_digests:
            due = [record for record in checked if lifecycle.may_come_due(record)]
            self._kept = _KeptCheck(planned, counter, tags, checked, due)
        report.targets = checked
        return checked

    def _read_digests(self, targets: list[TargetRecord], budget: int) -> list[TargetRecord]:
        result = []
        for record in targets:
            if record.state is TargetState.PUBLISHED and record.digest is None and budget > 0:
                budget -= 1
                record = replace(record, digest=self._registry.digest(record.tag))
            result.append(record)
        return result

    def _launch_due(
        self, targets: Sequence[TargetRecord], report: CycleReport, urgent: frozenset[str]
    ) -> None:
        """Launch the due targets in ``lifecycle.launch_order``, as long as they fit."""
        running = len(self._store.builds(active_only=True))
        running += 0 if self._bases is None else self._bases.running()
        for record in lifecycle.launch_order(targets, self._clock(), urgent=urgent):
            if not self._attempts.inputs_ready(record, report):
                continue
            if self._bases is not None:  # its driver bases first; it waits for them
                gate = self._bases.ensure(record, self._tags, report, running=running)
                running += gate.started
                if gate.full:
                    break  # strict order, as for the targets below
                if not gate.ready:
                    continue
            if not lifecycle.has_room(record, running, self._options):
                # Strict order: later (smaller) targets must not starve this one.
                report.decide(Action.DEFERRED, record.tag, "max_concurrent_builds reached")
                break
            running += self._attempts.launch(record, self._tags, report)

    # -- by hand -------------------------------------------------------------------------

    def build_by_hand(
        self, driver: str, flatcar: str, *, arches: frozenset[Arch] | None, force: bool
    ) -> CycleReport:
        """Launch one target now, whatever the policy says (``releasebot build``).

        Refuses a target that is building, or published unless ``force``. A failed
        target starts its next attempt: a human asking is the retry.
        """
        report = CycleReport()
        report.plan = self._planner.plan()
        planned = self._planner.find_target(driver, flatcar, arches)
        record = self._store.ensure_target(planned, self._clock())
        if arches is not None and record.target.arches != planned.arches:
            known = ", ".join(record.target.arches)
            raise TargetBusyError(
                f"{record.tag} is built for {known}: one tag holds one set of arches, so "
                "--arch cannot change it (leave --arch out)"
            )
        self._launch_by_hand(record, force, report)
        return report

    def retry(self, record: TargetRecord) -> CycleReport:
        """Start the next attempt of a stored target now (``/releasebot retry``): the target
        as it is stored, no feed polled. Refused as ``build_by_hand`` refuses (no force)."""
        report = CycleReport()
        self._launch_by_hand(record, False, report)
        return report

    def _launch_by_hand(self, record: TargetRecord, force: bool, report: CycleReport) -> None:
        active = self._store.builds(tag=record.tag, active_only=True)
        tags = set() if active else self._registry.tags()  # busy is said without asking
        refusal = lifecycle.hand_refusal(
            record, active=active, published=record.tag in tags, force=force
        )
        if refusal is not None:
            raise TargetBusyError(refusal)
        if force:
            tags = tags - {arch_tag(record.tag, arch) for arch in record.target.arches}
        if self._dry_run:
            bases = [] if self._bases is None else self._bases.render([record])
            report.manifests += bases  # a base to build first: its Job, and not the image's
            if not bases:
                report.manifests += self._attempts.render(self._attempts.requests(record))
            return
        if self._bases is not None and not self._bases.by_hand(record, tags, report):
            return  # its base is (re)built first; the target waits for it
        self._attempts.launch(record, tags, report, by_hand=True)
