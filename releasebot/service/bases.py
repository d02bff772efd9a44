"""Use case: driver bases in a cycle: build each base once, follow it, give its digest out.

A per-release Job is built FROM its arch's driver base, pinned by digest
(``DRIVER_BASE``). This module is the I/O half of ``domain/targets/bases.py``: before the due
targets launch, ``prepare`` launches (or adopts from the registry) every base they need
that is not published; ``ready`` tells whether a target's bases are all published, and
otherwise saves the target as waiting (with the base's tag and state as its reason);
``follow`` moves every base Job one step (created, then its digest verified in the
registry and its labels checked, signed when a key is configured, recorded); ``build_args``
hands a per-release build its ``DRIVER_BASE``, and nothing else does. Every step is a
short transaction and idempotent, as for the targets (``service/attempts.py``): the base
row is committed ``launching`` BEFORE its Job exists; a Job that exists is adopted.

Deliberately not here: which targets launch (``service/reconcile.py``), the rules
(``domain/targets/bases.py``), the Job manifest (the launcher's adapter).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from releasebot.domain.ports import Attestor, JobLauncher, Registry, StateStore
from releasebot.domain.shared.errors import (
    ClusterRejectedError,
    ClusterUnavailableError,
    ReleasebotError,
    TemporaryError,
)
from releasebot.domain.shared.versions import Arch
from releasebot.domain.targets import bases as rules_
from releasebot.domain.targets.attestation import ArchBuild, AttestationRequest, Verification
from releasebot.domain.targets.base_tags import BaseSpec
from releasebot.domain.targets.bases import BaseChange, BaseRecord, BaseRules, BaseState, BaseStep
from releasebot.domain.targets.builds import (
    FailureReason,
    Pushed,
    abandons_job,
    failed_build,
    judge_job,
    verify_digest,
)
from releasebot.domain.targets.decisions import Action
from releasebot.domain.targets.lifecycle import LifecycleRules
from releasebot.domain.targets.models import Target, TargetRecord
from releasebot.service.report import CycleReport, delete_quietly

log = logging.getLogger("releasebot.reconcile")

BaseSigner = Callable[[BaseRecord, str], Verification]
"""Signs a verified base's digest and attaches its SBOM and provenance, then verifies them
(raises ``TemporaryError`` to postpone, any other ``ReleasebotError`` for good)."""


@dataclass(frozen=True)
class BaseGate:
    """What ``ensure`` found for one target."""

    ready: bool
    """Every base of it is published: it may launch."""
    started: int
    """Base Jobs started for it now (they count against ``max_concurrent_builds``)."""
    full: bool
    """A base could not start for want of a build slot: launch order is strict, stop."""


class DriverBases:
    """The driver bases of one store, registry and cluster."""

    def __init__(
        self,
        *,
        store: StateStore,
        registry: Registry,
        launcher: JobLauncher,
        clock: Callable[[], datetime],
        rules: BaseRules,
        lifecycle: LifecycleRules,
        dry_run: bool = False,
        signer: BaseSigner | None = None,
    ) -> None:
        self._store = store
        self._registry = registry
        self._launcher = launcher
        self._clock = clock
        self._rules = rules
        self._lifecycle = lifecycle
        self._dry_run = dry_run
        self._signer = signer
        self._rendered: set[str] = set()
        """The bases a dry run showed as launched: the next targets find them launched."""

    @property
    def rules(self) -> BaseRules:
        return self._rules

    def _stored(self) -> dict[str, BaseRecord]:
        return {record.tag: record for record in self._store.bases()}

    def running(self) -> int:
        """Base Jobs in flight (they count against ``max_concurrent_builds`` too)."""
        return sum(1 for record in self._store.bases() if record.active)

    # -- before the targets launch ---------------------------------------------------------

    def ensure(
        self, record: TargetRecord, tags: set[str], report: CycleReport, *, running: int
    ) -> BaseGate:
        """Before a due target (its inputs published) launches: launch the bases of it that
        are missing or due for a retry, as long as they fit beside ``running`` Jobs (or
        adopt one the registry already holds with the right labels); the target may
        launch when every base of it is published, and waits otherwise (``ready``)."""
        now = self._clock()
        stored = self._stored()
        started = 0
        for arch in record.target.arches:
            spec = rules_.spec_for(record.target, arch, self._rules)
            base = stored.get(spec.tag)
            step = rules_.base_step(base, present=spec.tag in tags, now=now)
            if step is not BaseStep.LAUNCH or spec.tag in self._rendered:
                continue
            if base is None and spec.tag in tags and self._adopt(spec, report):
                continue
            busy = running + started
            if busy and busy + 1 > self._lifecycle.max_concurrent_builds:
                report.decide(Action.DEFERRED, spec.tag, "max_concurrent_builds reached")
                self.ready(record, report)
                return BaseGate(ready=False, started=started, full=True)
            started += self._launch(spec, base, report)
        return BaseGate(ready=self.ready(record, report), started=started, full=False)

    def ready(self, record: TargetRecord, report: CycleReport) -> bool:
        """Whether every arch's base of ``record`` is published; if not, the target is saved
        waiting with the base's tag and state as its reason (shown by ``plan`` and status)."""
        stored = self._stored()
        for arch in record.target.arches:
            spec = rules_.spec_for(record.target, arch, self._rules)
            base = stored.get(spec.tag)
            if rules_.driver_base_arg(self._registry.repository, base) is not None:
                continue
            why = rules_.base_wait_reason(spec, base)
            change = rules_.wait_for_base(record, why, now=self._clock())
            if change is not None and not self._dry_run:
                self._store.save(targets=[change.record])
            if change is not None and change.decision is not None:
                report.add(change.decision)
            return False
        return True

    def by_hand(self, record: TargetRecord, tags: set[str], report: CycleReport) -> bool:
        """A person builds or retries ``record``: a base of it that failed for good starts
        again with a full budget, a missing one is launched; True when every base is ready
        (the target may launch now), else the target waits for them."""
        now = self._clock()
        stored = self._stored()
        for arch in record.target.arches:
            spec = rules_.spec_for(record.target, arch, self._rules)
            base = stored.get(spec.tag)
            step = rules_.base_step(base, present=spec.tag in tags, now=now)
            if step is BaseStep.FAILED or step is BaseStep.LAUNCH:
                self._launch(spec, base, report, by_hand=step is BaseStep.FAILED)
        return self.ready(record, report)

    def build_args(self, target: Target, arch: Arch) -> tuple[tuple[str, str], ...] | None:
        """``(("DRIVER_BASE", "<repository>@<digest>"),)`` for the target's ``arch``;
        ``None`` while its base is not published: then no per-release Job may start."""
        spec = rules_.spec_for(target, arch, self._rules)
        base = self._stored().get(spec.tag)
        arg = rules_.driver_base_arg(self._registry.repository, base)
        return None if arg is None else (arg,)

    def render(self, targets: Sequence[TargetRecord]) -> list[dict[str, Any]]:
        """The base Jobs ``targets`` would start now (for ``--dry-run``)."""
        stored = self._stored()
        manifests = []
        for spec in rules_.needed_bases(targets, self._rules):
            record = stored.get(spec.tag)
            if record is None or record.state is not BaseState.PUBLISHED:
                attempt = (record.attempts if record else 0) + 1
                manifests.append(
                    self._launcher.render(rules_.base_request(spec, attempt, self._rules))
                )
        return manifests

    def _adopt(self, spec: BaseSpec, report: CycleReport) -> bool:
        """Take a base the registry holds (and that says it is that base) as published."""
        try:
            digest = self._registry.digest(spec.tag)
            labels = {} if digest is None else self._registry.labels(digest)
        except ReleasebotError as error:
            report.errors.append(str(error))
            return False
        if digest is None or rules_.wrong_base_labels(spec, labels) is not None:
            return False
        if not self._dry_run:
            self._store.save_bases(bases=[rules_.adopt_base(spec, digest, now=self._clock())])
        report.decide(Action.PUBLISHED, spec.tag, f"driver base found in the registry {digest}")
        return True

    def _launch(
        self,
        spec: BaseSpec,
        record: BaseRecord | None,
        report: CycleReport,
        *,
        by_hand: bool = False,
    ) -> int:
        attempt = (record.attempts if record else 0) + 1
        request = rules_.base_request(spec, attempt, self._rules)
        if self._dry_run:
            self._rendered.add(spec.tag)  # shown once, however many targets need it
            report.manifests.append(self._launcher.render(request))
            report.decide(Action.WOULD_LAUNCH, spec.tag, spec.arch.value, request.job_name)
            return 1
        now = self._clock()
        started = rules_.start_base(spec, record, request, now=now, by_hand=by_hand)
        # Committed BEFORE the Job exists: a crash from here on is repaired by `follow`.
        self._store.save_bases(bases=[started])
        self._create_job(started, report)
        return 1

    def _create_job(self, record: BaseRecord, report: CycleReport) -> None:
        request = rules_.base_request(record.spec, record.attempts, self._rules)
        try:
            created = self._launcher.launch(request)
        except ClusterUnavailableError as error:  # stays `launching`: tried again next cycle
            report.errors.append(str(error))
            report.decide(Action.LAUNCH_POSTPONED, record.tag, str(error), request.job_name)
            return
        except ClusterRejectedError as error:  # said as a target's refusal is (exit 1)
            report.decide(Action.REJECTED, record.tag, str(error), request.job_name)
            self._fail(record, FailureReason.REJECTED, str(error), report)
            return
        self._store.save_bases(bases=[replace(record, state=BaseState.RUNNING)])
        action = Action.LAUNCHED if created else Action.ADOPTED
        report.decide(action, record.tag, record.spec.arch.value, request.job_name)

    # -- following -------------------------------------------------------------------------

    def follow(self, report: CycleReport) -> None:
        """Move every active base one step: create its Job, or judge the Job's end."""
        for record in self._store.bases():
            if record.state is BaseState.LAUNCHING:
                self._create_job(record, report)
            elif record.state is BaseState.RUNNING:
                self._observe(record, report)

    def _observe(self, record: BaseRecord, report: CycleReport) -> None:
        if record.job_name is None:  # cannot happen: a running base has its Job's name
            return
        try:
            status = self._launcher.status(record.job_name)
        except ReleasebotError as error:  # down or forbidden: ask again next cycle
            report.errors.append(str(error))
            return
        now = self._clock()
        build = record.build()
        outcome = judge_job(build, status, now)
        if outcome is None:
            return
        if not isinstance(outcome, Pushed):
            if abandons_job(outcome):
                delete_quietly(self._launcher, record.job_name, report)
            self._apply(rules_.base_failed(record, outcome, now=now, rules=self._lifecycle), report)
            return
        try:
            actual = self._registry.digest(record.tag)
            refuted = verify_digest(build, outcome, actual, now)
            labels = {} if refuted is not None else self._registry.labels(outcome.digest)
        except ReleasebotError as error:  # verify next cycle
            report.errors.append(str(error))
            return
        if refuted is None and (wrong := rules_.wrong_base_labels(record.spec, labels)):
            self._fail(record, FailureReason.WRONG_CONTENT, wrong, report)
            return
        if refuted is not None:
            self._apply(rules_.base_failed(record, refuted, now=now, rules=self._lifecycle), report)
            return
        if self._signer is not None:
            try:
                verification = self._signer(record, outcome.digest)
            except TemporaryError as error:  # the registry is down: sign again next cycle
                report.errors.append(str(error))
                report.decide(Action.SIGNING_POSTPONED, record.tag, str(error))
                return
            except ReleasebotError as error:  # a broken key, a refused push, a failed check
                why = f"signing failed: {error}"
                self._fail(record, FailureReason.EXIT_CODE, why, report)
                return
            log.info("driver base %s %s", record.tag, verification.summary())
        self._apply(rules_.base_published(record, outcome.digest, now=now), report)

    def _fail(
        self, record: BaseRecord, reason: FailureReason, why: str, report: CycleReport
    ) -> None:
        now = self._clock()
        failed = failed_build(record.build(), now, reason=reason, message=why)
        self._apply(rules_.base_failed(record, failed, now=now, rules=self._lifecycle), report)

    def _apply(self, change: BaseChange, report: CycleReport) -> None:
        """A base's transition in one transaction (the record and its one event)."""
        events = [] if change.event is None else [change.event]
        self._store.save_bases(bases=[change.record], events=events)
        report.add(change.decision)


def driver_bases(
    rules: BaseRules | None,
    store: StateStore,
    registry: Registry,
    launcher: JobLauncher,
    clock: Callable[[], datetime],
    lifecycle: LifecycleRules,
    dry_run: bool,
    attestor: Attestor | None = None,
) -> DriverBases | None:
    """The bases of a reconcile service; ``None`` when bases are off (a single-image recipe).
    With an ``attestor``, a base is signed and given an SBOM and provenance like any image
    before it is called published (and before any per-release Job is built FROM it)."""
    if rules is None:
        return None
    signer = None if attestor is None else _signer(attestor, registry.repository, rules, clock)
    return DriverBases(
        store=store,
        registry=registry,
        launcher=launcher,
        clock=clock,
        rules=rules,
        lifecycle=lifecycle,
        dry_run=dry_run,
        signer=signer,
    )


def _signer(
    attestor: Attestor, repository: str, rules: BaseRules, clock: Callable[[], datetime]
) -> BaseSigner:
    def sign(record: BaseRecord, digest: str) -> Verification:
        """Both calls are idempotent: signing again after a postponement adds nothing."""
        request = rules_.base_request(record.spec, record.attempts, rules)
        build = ArchBuild(
            arch=record.spec.arch,
            digest=digest,
            job_name=request.job_name,
            build_args=request.build_args,
            started_at=record.started_at or record.created_at,
            finished_at=clock(),
        )
        attestor.attest(AttestationRequest(repository, record.spec, digest, (build,)))
        return attestor.verify(digest)

    return sign
