"""Use case: one reconcile cycle, and launching one target by hand.

The cycle: poll feeds -> plan -> follow running builds (verify and record what finished)
-> check the registry -> launch what is missing, at most ``max_concurrent_builds`` Jobs at
a time. Every step is idempotent, so a cycle killed anywhere and run again converges:

- a build row is committed (``launching``) BEFORE its Job is created; the next cycle
  creates the Job again, and an existing Job is adopted, never duplicated (the Job name is
  derived from target, arch and attempt);
- a Job that finished is only called published after its digest is confirmed by the
  registry; until then the build stays ``running`` and is checked again.

Retries across cycles live here, driven by the failure's class: transient failures back
off exponentially (capped) up to ``max_attempts``; permanent ones wait for a human.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any

from releasebot.domain.builds import (
    DRIVER_LABEL,
    FLATCAR_LABEL,
    KERNEL_LABEL,
    BuildRecord,
    BuildRequest,
    BuildState,
    FailureReason,
    JobPhase,
    arch_tag,
    build_request,
    classify_exit,
    parse_digest,
    retry_delay,
)
from releasebot.domain.errors import (
    ClusterRejectedError,
    ClusterUnavailableError,
    ReleasebotError,
    TargetBusyError,
    TemporaryError,
)
from releasebot.domain.events import Event, EventKind, build_key
from releasebot.domain.models import Target, TargetRecord, TargetState
from releasebot.domain.ports import ArtifactSource, JobLauncher, Registry, StateStore
from releasebot.domain.versions import Arch
from releasebot.service.plan import PlanResult, PlanService

log = logging.getLogger("releasebot.reconcile")

PAUSED_FLAG = "paused"


@dataclass(frozen=True)
class ReconcileOptions:
    max_concurrent_builds: int = 2
    """Build Jobs running at once, across all targets (one Job per arch)."""
    max_attempts: int = 3
    """Attempts per target before a transient failure becomes permanent."""
    retry_base: timedelta = timedelta(minutes=5)
    retry_cap: timedelta = timedelta(hours=6)
    waiting_recheck: timedelta = timedelta(minutes=30)
    """How soon a target waiting for its inputs is checked again."""
    runfile_grace: timedelta = timedelta(days=3)
    """A runfile still missing this long after the target was planned is gone for good."""
    recipe_args: tuple[tuple[str, str], ...] = ()
    """Build args every build gets (mirrors, key fingerprint, recipe revision)."""


@dataclass(frozen=True)
class Decision:
    """One thing the cycle decided, for the log and the report."""

    action: str
    tag: str
    detail: str = ""
    job: str = ""


@dataclass
class CycleReport:
    plan: PlanResult | None = None
    decisions: list[Decision] = field(default_factory=list)
    manifests: list[dict[str, Any]] = field(default_factory=list)
    """Job manifests created (or, in a dry run, that would be created)."""
    errors: list[str] = field(default_factory=list)
    targets: list[TargetRecord] = field(default_factory=list)
    """The required targets after the registry check (empty if it failed)."""

    def launched(self) -> list[Decision]:
        return [d for d in self.decisions if d.action in ("launched", "adopted")]


class ReconcileService:
    """Drives targets from planned to published. Owns cross-cycle retries."""

    def __init__(
        self,
        *,
        planner: PlanService,
        store: StateStore,
        registry: Registry,
        launcher: JobLauncher,
        clock: Callable[[], datetime],
        options: ReconcileOptions = ReconcileOptions(),
        dry_run: bool = False,
        artifacts: ArtifactSource | None = None,
    ) -> None:
        self._planner = planner
        self._store = store
        self._registry = registry
        self._launcher = launcher
        self._clock = clock
        self._options = options
        self._dry_run = dry_run
        self._artifacts = artifacts
        self._tags: set[str] = set()
        self._ready_args: dict[tuple[str, Arch], tuple[tuple[str, str], ...]] = {}

    # -- the cycle -----------------------------------------------------------------------

    def cycle(self) -> CycleReport:
        """Poll, plan, follow running builds, check the registry, launch what is missing."""
        report = CycleReport()
        plan = report.plan = self._planner.plan()
        if not self._dry_run:
            self.follow(report)
        checked = self._check(plan.targets, report, read_digests=False)
        if checked is not None and self.paused:
            self._decide(report, "paused", "-", "launching is paused (/releasebot resume)")
        elif checked is not None:
            self._launch_missing(checked, report)
        return report

    @property
    def store(self) -> StateStore:
        return self._store

    @property
    def paused(self) -> bool:
        """Whether a person paused launching (``/releasebot pause``); builds still finish."""
        return self._store.flag(PAUSED_FLAG) is not None

    def plan(self, *, digest_reads: int = 50) -> CycleReport:
        """Poll, plan and check the registry; launch nothing (``releasebot plan``).

        Reads the digest of up to ``digest_reads`` published tags whose digest is not yet
        known (one request each); the cycle itself never does, to stay O(pages).
        """
        report = CycleReport()
        plan = report.plan = self._planner.plan()
        self._check(plan.targets, report, read_digests=True, digest_reads=digest_reads)
        return report

    def _check(
        self,
        planned: Sequence[TargetRecord],
        report: CycleReport,
        *,
        read_digests: bool,
        digest_reads: int = 0,
    ) -> list[TargetRecord] | None:
        """The planned targets as the registry has them, saved; ``None`` if it can't say."""
        try:
            self._tags = self._registry.tags()
            current = self._current(planned)
            checked = self._check_registry(current, self._tags, report)
            if read_digests:
                checked = self._read_digests(checked, digest_reads)
        except ReleasebotError as error:
            # Without the registry nothing can be called missing: launch nothing this time.
            report.errors.append(str(error))
            log.warning("registry check failed: %s", error)
            return None
        self._store.save(targets=[t for t, c in zip(checked, current, strict=True) if t != c])
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

    def _current(self, planned: Sequence[TargetRecord]) -> list[TargetRecord]:
        """The planned targets with the status ``follow`` may just have changed."""
        stored = {record.tag: record for record in self._store.targets()}
        return [stored.get(record.tag, record) for record in planned]

    def _check_registry(
        self, targets: Sequence[TargetRecord], tags: set[str], report: CycleReport
    ) -> list[TargetRecord]:
        """``targets`` with the state the registry's tag list gives them (O(pages) requests).

        A tag that exists is published, whoever pushed it, unless one of our builds for it
        failed verification; one that vanished is missing again. Digests are not read here
        (that would cost a request per target): they are known for what releasebot built
        and verified itself.
        """
        now = self._clock()
        checked = []
        for record in targets:
            present = record.tag in tags
            # Only a target no build of ours has judged is published by presence: after a
            # failed verification (wrong digest, wrong labels) the tag holds the wrong image.
            unjudged = (TargetState.UNKNOWN, TargetState.MISSING, TargetState.WAITING)
            if present and record.state in unjudged:
                record = _published(record, record.digest, now)
                self._decide(report, "published", record.tag, "found in the registry")
            elif not present and record.state in (
                TargetState.UNKNOWN,
                TargetState.PUBLISHED,
                TargetState.STALE,
            ):
                if record.state is TargetState.PUBLISHED:
                    self._decide(report, "missing", record.tag, "tag vanished from the registry")
                record = replace(record, state=TargetState.MISSING, updated_at=now)
            checked.append(record)
        return checked

    def _launch_missing(self, targets: Sequence[TargetRecord], report: CycleReport) -> None:
        now = self._clock()
        running = len(self._store.builds(active_only=True))
        for record in targets:
            due = record.state in (TargetState.MISSING, TargetState.STALE) or (
                record.state in (TargetState.RETRYING, TargetState.WAITING)
                and (record.next_attempt_at is None or record.next_attempt_at <= now)
            )
            if not due or not self._inputs_ready(record, report):
                continue
            needed = len(record.target.arches)
            # A target needing more Jobs than the limit still starts when nothing runs.
            if running and running + needed > self._options.max_concurrent_builds:
                # Strict plan order: later (smaller) targets must not starve this one.
                self._decide(report, "deferred", record.tag, "max_concurrent_builds reached")
                break
            running += self.launch(record, self._tags, report)

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
        active = self._store.builds(tag=record.tag, active_only=True)
        if active:
            jobs = ", ".join(build.job_name for build in active)
            raise TargetBusyError(f"{record.tag} is already building ({jobs})")
        tags = self._registry.tags()
        if record.tag in tags and not force:
            raise TargetBusyError(
                f"{record.tag} is already published; add --force to build and push it again"
            )
        if force:
            tags = tags - {arch_tag(record.tag, arch) for arch in record.target.arches}
        if self._dry_run:
            for request in self._requests(record):
                report.manifests.append(self._launcher.render(request))
            return report
        self.launch(record, tags, report)
        return report

    def _requests(self, record: TargetRecord) -> list[BuildRequest]:
        return [self._request(record, arch, record.attempts + 1) for arch in record.target.arches]

    def _request(self, record: TargetRecord, arch: Arch, attempt: int) -> BuildRequest:
        extra = self._options.recipe_args + self._ready_args.get((record.tag, arch), ())
        return build_request(record.target, arch, attempt, extra)

    def _args_known(self, record: TargetRecord, arch: Arch, report: CycleReport) -> bool:
        """Re-learn the input-derived build args of a build whose Job may not exist yet."""
        if self._artifacts is None or (record.tag, arch) in self._ready_args:
            return True
        try:
            answer = self._artifacts.readiness(record.target, arch)
        except ReleasebotError as error:
            report.errors.append(str(error))
            return False
        self._ready_args[(record.tag, arch)] = answer.build_args
        return answer.ready

    def _inputs_ready(self, record: TargetRecord, report: CycleReport) -> bool:
        """Whether every arch's inputs are published; else the target waits (or fails).

        Records ``waiting`` with the next check time; a runfile missing for longer than
        ``runfile_grace`` since the target was planned is a permanent failure.
        """
        if self._artifacts is None:
            return True
        now = self._clock()
        missing: list[str] = []
        runfile_gone = False
        try:
            for arch in record.target.arches:
                answer = self._artifacts.readiness(record.target, arch)
                missing.extend(answer.missing)
                runfile_gone = runfile_gone or answer.runfile_missing
                self._ready_args[(record.tag, arch)] = answer.build_args
        except ReleasebotError as error:
            report.errors.append(str(error))
            return False
        if not missing:
            return True
        if runfile_gone and now - record.first_planned_at >= self._options.runfile_grace:
            why = f"NVIDIA runfile still missing after {self._options.runfile_grace}: {missing[-1]}"
            updated = replace(record, state=TargetState.FAILED, last_error=why, updated_at=now)
            event = self._event(EventKind.BUILD_FAILED, updated, now, [], error=why)
            self._store.save(targets=[updated], events=[event])
            self._decide(report, "failed", record.tag, why)
            return False
        detail = f"waiting for {len(missing)} input(s), first: {missing[0]}"
        updated = replace(
            record,
            state=TargetState.WAITING,
            next_attempt_at=now + self._options.waiting_recheck,
            last_error=detail,
            updated_at=now,
        )
        self._store.save(targets=[updated])
        if record.state is not TargetState.WAITING:
            self._decide(report, "waiting", record.tag, detail)
        return False

    # -- launching ---------------------------------------------------------------------

    def launch(self, record: TargetRecord, tags: set[str], report: CycleReport) -> int:
        """Start the next attempt of ``record``: one Job per arch; returns Jobs started.

        A multi-arch target whose per-arch tag already exists (a crash after its push, or
        the surviving arch of a failed attempt) reuses it instead of building it again.
        """
        now = self._clock()
        attempt = record.attempts + 1
        target = record.target
        requests = self._requests(record)
        if self._dry_run:
            for request in requests:
                report.manifests.append(self._launcher.render(request))
                self._decide(
                    report, "would launch", record.tag, request.arch.value, request.job_name
                )
            return len(requests)
        builds = []
        for request in requests:
            reused = self._reusable_digest(target, request.arch, tags)
            builds.append(
                BuildRecord(
                    tag=record.tag,
                    arch=request.arch,
                    attempt=attempt,
                    job_name=request.job_name,
                    destination_tag=request.destination_tag,
                    state=BuildState.SUCCEEDED if reused else BuildState.LAUNCHING,
                    created_at=now,
                    digest=reused,
                    finished_at=now if reused else None,
                )
            )
        building = replace(
            record,
            state=TargetState.BUILDING,
            attempts=attempt,
            next_attempt_at=None,
            updated_at=now,
        )
        # Committed BEFORE any Job exists: a crash from here on is repaired by `follow`.
        announce = self._event(EventKind.BUILD_STARTED, building, now, builds)
        self._store.save(targets=[building], builds=builds, events=[announce])
        started = 0
        for build, request in zip(builds, requests, strict=True):
            if build.state is BuildState.LAUNCHING:
                self._create_job(build, request, report)
                started += 1
            else:
                self._decide(report, "reused", record.tag, f"{build.arch.value} {build.digest}")
        if not started:  # every arch was already pushed: only the index is left
            self._settle(building, report)
        return started

    def _reusable_digest(self, target: Target, arch: Arch, tags: set[str]) -> str | None:
        if not target.multi_arch or arch_tag(target.tag, arch) not in tags:
            return None
        try:
            return self._registry.digest(arch_tag(target.tag, arch))
        except ReleasebotError as error:  # cannot tell: build it again rather than guess
            log.warning("cannot reuse %s: %s", arch_tag(target.tag, arch), error)
            return None

    def _create_job(self, build: BuildRecord, request: BuildRequest, report: CycleReport) -> None:
        try:
            created = self._launcher.launch(request)
        except ClusterUnavailableError as error:
            # The row stays `launching`: the next cycle tries again (and adopts if it exists).
            report.errors.append(str(error))
            self._decide(report, "launch postponed", build.tag, str(error), build.job_name)
            return
        except ClusterRejectedError as error:
            failed = _finished(
                build, self._clock(), reason=FailureReason.REJECTED, message=str(error)
            )
            self._store.save(builds=[failed])
            self._decide(report, "rejected", build.tag, str(error), build.job_name)
            return
        self._store.save(builds=[replace(build, state=BuildState.RUNNING)])
        report.manifests.append(self._launcher.render(request))
        self._decide(
            report,
            "launched" if created else "adopted",
            build.tag,
            build.arch.value,
            build.job_name,
        )

    # -- following -----------------------------------------------------------------------

    def follow(self, report: CycleReport) -> None:
        """Move every active build one step, then settle targets whose attempt is over."""
        for build in self._store.builds(active_only=True):
            record = self._store.target(build.tag)
            if record is None:  # cannot happen with the foreign key; be safe
                continue
            if build.state is BuildState.LAUNCHING:
                if not self._args_known(record, build.arch, report):
                    continue  # the row stays `launching`: tried again next cycle
                request = self._request(record, build.arch, build.attempt)
                self._create_job(build, request, report)
            else:
                self._observe(build, report)
        for record in self._store.targets(required_only=False):
            if record.state is TargetState.BUILDING:
                self._settle(record, report)

    def _observe(self, build: BuildRecord, report: CycleReport) -> None:
        try:
            status = self._launcher.status(build.job_name)
        except ReleasebotError as error:  # down or forbidden: ask again next cycle
            report.errors.append(str(error))
            return
        now = self._clock()
        if status.phase is JobPhase.RUNNING:
            return
        if status.phase is JobPhase.MISSING:
            done = _finished(
                build,
                now,
                reason=FailureReason.JOB_DELETED,
                message="the Job was deleted before it finished",
            )
        elif status.phase is JobPhase.FAILED:
            reason = status.reason or FailureReason.EXIT_CODE
            if reason is FailureReason.EXIT_CODE:
                reason = classify_exit(status.log_tail)
            if reason is FailureReason.IMAGE_PULL:  # the Pod would wait forever
                self._delete_quietly(build.job_name, report)
            done = _finished(
                build, now, reason=reason, message=status.message, log_tail=status.log_tail
            )
        else:
            verified = self._verify(build, status.termination_message, report)
            if verified is None:
                return
            done = verified
        self._store.save(builds=[done])
        self._decide(
            report, f"build {done.state.value}", build.tag, _describe(done), build.job_name
        )

    def _verify(
        self, build: BuildRecord, message: str | None, report: CycleReport
    ) -> BuildRecord | None:
        """The build as succeeded once the registry confirms the digest; ``None`` = ask later."""
        now = self._clock()
        digest = parse_digest(message)
        if digest is None:
            shown = (message or "")[:80]
            return _finished(
                build,
                now,
                reason=FailureReason.BAD_TERMINATION_MESSAGE,
                message=f"termination message is not a digest: {shown!r}",
            )
        try:
            actual = self._registry.digest(build.destination_tag)
        except ReleasebotError as error:  # down or refusing us: verify next cycle
            report.errors.append(str(error))
            return None
        if actual != digest:
            return _finished(
                build,
                now,
                reason=FailureReason.PUSH_UNVERIFIED,
                message=f"Kaniko reported {digest}, the registry has {actual or 'no such tag'}",
            )
        try:
            wrong = self._wrong_labels(build, digest)
        except ReleasebotError as error:
            report.errors.append(str(error))
            return None
        if wrong:
            return _finished(build, now, reason=FailureReason.WRONG_CONTENT, message=wrong)
        return replace(build, state=BuildState.SUCCEEDED, digest=digest, finished_at=now)

    def _wrong_labels(self, build: BuildRecord, digest: str) -> str | None:
        """Whether the pushed image says it holds another driver, release or kernel than
        its tag promises (a recipe that ignored its build args); ``None`` when it matches."""
        record = self._store.target(build.tag)
        if record is None:
            return None
        labels = self._registry.labels(digest)
        expected = {
            DRIVER_LABEL: record.target.driver_version.text,
            FLATCAR_LABEL: record.target.flatcar_version.text,
            KERNEL_LABEL: record.target.kernel_release,
        }
        for key, value in expected.items():
            if labels.get(key) != value:
                return f"image label {key} is {labels.get(key)!r}, the tag promises {value!r}"
        return None

    def _settle(self, record: TargetRecord, report: CycleReport) -> None:
        builds = [b for b in self._store.builds(tag=record.tag) if b.attempt == record.attempts]
        if not builds or any(b.state.active for b in builds):
            return
        now = self._clock()
        failed = [b for b in builds if b.state is BuildState.FAILED]
        if failed:
            summary = "; ".join(f"{b.arch.value}: {_describe(b)}" for b in failed)
            transient = all(b.reason is not None and b.reason.transient for b in failed)
            if transient and self._failed_streak(record) < self._options.max_attempts:
                delay = retry_delay(
                    record.attempts, base=self._options.retry_base, cap=self._options.retry_cap
                )
                updated = replace(
                    record,
                    state=TargetState.RETRYING,
                    next_attempt_at=now + delay,
                    last_error=summary,
                    updated_at=now,
                )
                self._decide(report, "retrying", record.tag, f"in {delay}: {summary}")
                kind = EventKind.BUILD_RETRYING
            else:
                why = "retries exhausted: " if transient else ""
                updated = replace(
                    record,
                    state=TargetState.FAILED,
                    next_attempt_at=None,
                    last_error=why + summary,
                    updated_at=now,
                )
                self._decide(report, "failed", record.tag, why + summary)
                kind = EventKind.RETRIES_EXHAUSTED if transient else EventKind.BUILD_FAILED
            event = self._event(kind, updated, now, builds, error=summary)
            self._store.save(targets=[updated], events=[event])
            return
        digests = [(b.arch, b.digest) for b in builds if b.digest is not None]
        try:
            if len(builds) > 1:
                digest = self._registry.push_index(record.tag, digests)
            else:
                digest = digests[0][1]
        except TemporaryError as error:
            report.errors.append(str(error))
            self._decide(report, "index postponed", record.tag, str(error))
            return
        except ReleasebotError as error:  # e.g. a per-arch manifest gone: needs a human
            why = f"cannot publish the index: {error}"
            failed_record = replace(
                record, state=TargetState.FAILED, last_error=why, updated_at=now
            )
            event = self._event(EventKind.BUILD_FAILED, failed_record, now, builds, error=why)
            self._store.save(targets=[failed_record], events=[event])
            self._decide(report, "failed", record.tag, why)
            return
        published = _published(record, digest, now)
        event = self._event(EventKind.TAG_PUBLISHED, published, now, builds)
        self._store.save(targets=[published], events=[event])
        self._decide(report, "published", record.tag, digest)

    def _event(
        self,
        kind: EventKind,
        record: TargetRecord,
        now: datetime,
        builds: Sequence[BuildRecord],
        *,
        error: str | None = None,
    ) -> Event:
        """An event about ``record``'s current attempt, with what a message needs to show."""
        failed = [b for b in builds if b.state is BuildState.FAILED]
        payload: dict[str, str | int | list[str] | None] = {
            "tag": record.tag,
            "attempt": record.attempts,
            "max_attempts": self._options.max_attempts,
            "driver_version": record.target.driver_version.text,
            "flatcar_version": record.target.flatcar_version.text,
            "flatcar_channel": record.target.flatcar_channel,
            "kernel_release": record.target.kernel_release,
            "arches": [arch.value for arch in record.target.arches],
            "jobs": [b.job_name for b in builds],
            "digest": record.digest,
            "arch_digests": [
                f"{b.arch.value} {b.digest}" for b in builds if b.digest and len(builds) > 1
            ],
            "error": error,
            "reasons": sorted({b.reason.value for b in failed if b.reason is not None}),
            "log_tail": next((b.log_tail for b in failed if b.log_tail), None),
            "next_attempt_at": None
            if record.next_attempt_at is None
            else record.next_attempt_at.isoformat(),
        }
        return Event(kind, build_key(record.tag, record.attempts), record.tag, now, payload)

    def _failed_streak(self, record: TargetRecord) -> int:
        """Attempts since the last one that published: the retry budget counts these, so a
        forced rebuild or a vanished tag starts with a full budget."""
        by_attempt: dict[int, list[BuildRecord]] = {}
        for build in self._store.builds(tag=record.tag):
            by_attempt.setdefault(build.attempt, []).append(build)
        succeeded = [
            attempt
            for attempt, builds in by_attempt.items()
            if builds and all(b.state is BuildState.SUCCEEDED for b in builds)
        ]
        return record.attempts - max(succeeded, default=0)

    def _delete_quietly(self, job: str, report: CycleReport) -> None:
        try:
            self._launcher.delete(job)
        except ReleasebotError as error:
            report.errors.append(str(error))

    def _decide(
        self, report: CycleReport, action: str, tag: str, detail: str = "", job: str = ""
    ) -> None:
        decision = Decision(action, tag, detail, job)
        report.decisions.append(decision)
        log.info(
            "%s %s%s%s",
            action,
            tag,
            f" [{job}]" if job else "",
            f": {detail}" if detail else "",
            extra={"action": action, "tag": tag, "job": job},
        )


def _published(record: TargetRecord, digest: str | None, now: datetime) -> TargetRecord:
    return replace(
        record,
        state=TargetState.PUBLISHED,
        digest=digest,
        published_at=now,
        next_attempt_at=None,
        last_error=None,
        updated_at=now,
    )


def _finished(
    build: BuildRecord,
    now: datetime,
    *,
    reason: FailureReason,
    message: str | None = None,
    log_tail: str | None = None,
) -> BuildRecord:
    return replace(
        build,
        state=BuildState.FAILED,
        reason=reason,
        message=message,
        log_tail=log_tail,
        finished_at=now,
    )


def _describe(build: BuildRecord) -> str:
    if build.state is BuildState.SUCCEEDED:
        return build.digest or "succeeded"
    text = build.reason.value if build.reason else build.state.value
    return f"{text}: {build.message}" if build.message else text
