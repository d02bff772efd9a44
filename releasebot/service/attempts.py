"""Use case, the I/O half of ``building``: start a target's attempt and follow its builds.

An attempt is one Job per arch. Every step is idempotent, so a process killed anywhere and
run again converges:

- the build rows are committed (``launching``) with the ``build_started`` event BEFORE any
  Job is created; the next cycle creates the Job again, and an existing Job is adopted,
  never duplicated (its name derives from target, arch and attempt);
- a Job that finished is only called succeeded once the registry holds its digest under
  its destination tag and the image's labels say what the tag promises; until then the
  build stays ``running`` and is checked again.

What a fact means is decided in the domain (``domain.targets.builds`` judges one Job's end,
``domain.targets.lifecycle`` what an attempt's end means for the target); this module fetches the
facts (the Job's status, the registry's digest and labels, the inputs' servers), saves
each decision in one transaction and reports it. When images are signed, publishing makes
one more call: the ``Attestor`` signs the digest, attaches the SBOM and provenance and
verifies them read back; ``lifecycle.published`` and ``lifecycle.unsigned`` say what the
answer means. Deliberately not here: which targets to launch and when
(``service.reconcile``), and how signatures are made (the ``Attestor``'s adapter).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from releasebot.domain.ports import ArtifactSource, Attestor, JobLauncher, Registry, StateStore
from releasebot.domain.shared.errors import (
    ClusterRejectedError,
    ClusterUnavailableError,
    ReleasebotError,
    TemporaryError,
)
from releasebot.domain.shared.versions import Arch
from releasebot.domain.targets import lifecycle
from releasebot.domain.targets.attestation import Verification, attestation_request
from releasebot.domain.targets.builds import (
    BuildRecord,
    BuildRequest,
    BuildState,
    FailureReason,
    Pushed,
    abandons_job,
    arch_tag,
    build_request,
    describe_build,
    failed_build,
    judge_job,
    running_build,
    verify_digest,
    verify_labels,
)
from releasebot.domain.targets.decisions import Action
from releasebot.domain.targets.lifecycle import Change, LifecycleRules, Publish
from releasebot.domain.targets.models import Target, TargetRecord, TargetState
from releasebot.domain.targets.readiness import Readiness
from releasebot.service.bases import DriverBases
from releasebot.service.report import CycleReport, delete_quietly

log = logging.getLogger("releasebot.reconcile")

BuildArgs = tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class ReconcileOptions(LifecycleRules):
    """The lifecycle's rules, and what every build is told beyond its target."""

    recipe_args: BuildArgs = ()
    """Build args every build gets (mirrors, key fingerprint, recipe revision)."""


class Attempts:
    """Starts attempts and follows their builds for one store, registry and cluster."""

    def __init__(
        self,
        *,
        store: StateStore,
        registry: Registry,
        launcher: JobLauncher,
        clock: Callable[[], datetime],
        options: ReconcileOptions,
        dry_run: bool,
        artifacts: ArtifactSource | None,
        attestor: Attestor | None = None,
        bases: DriverBases | None = None,
    ) -> None:
        self._store = store
        self._registry = registry
        self._launcher = launcher
        self._clock = clock
        self._options = options
        self._dry_run = dry_run
        self._artifacts = artifacts
        self._attestor = attestor
        """Signs what is published; ``None``: images are published unsigned."""
        self._ready_args: dict[tuple[str, Arch], BuildArgs] = {}
        """What the inputs told each (tag, arch) (e.g. ``GCC_MAJOR``), for its build args."""
        self._bases = bases
        """Driver bases (``service/bases.py``): a build's ``DRIVER_BASE``; ``None``: off."""

    # -- before an attempt: the inputs ---------------------------------------------------

    def inputs_ready(self, record: TargetRecord, report: CycleReport) -> bool:
        """Whether every arch's inputs are published; if not, the target waits (or fails),
        as ``lifecycle.check_inputs`` decides. Not ready either when a server cannot say."""
        if self._artifacts is None:
            return True
        answers: list[Readiness] = []
        try:
            for arch in record.target.arches:
                answer = self._artifacts.readiness(record.target, arch)
                self._ready_args[(record.tag, arch)] = answer.build_args
                answers.append(answer)
        except ReleasebotError as error:
            report.errors.append(str(error))
            return False
        change = lifecycle.check_inputs(record, answers, now=self._clock(), rules=self._options)
        if change is None:
            return True
        self._save(change, report)
        return False

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

    # -- starting an attempt -------------------------------------------------------------

    def requests(self, record: TargetRecord) -> list[BuildRequest]:
        """The next attempt's builds, one per arch."""
        return [
            self._request(record.target, arch, record.attempts + 1) for arch in record.target.arches
        ]

    def _request(self, target: Target, arch: Arch, attempt: int) -> BuildRequest:
        extra = self._options.recipe_args + self._ready_args.get((target.tag, arch), ())
        if self._bases is not None:  # DRIVER_BASE: only ever from a published base
            extra += self._bases.build_args(target, arch) or ()
        return build_request(target, arch, attempt, extra)

    def _base_missing(self, target: Target, arches: Iterable[Arch]) -> bool:
        """Whether a base of ``target`` is not published: then no per-release Job starts."""
        bases = self._bases
        return bases is not None and any(bases.build_args(target, a) is None for a in arches)

    def render(self, requests: list[BuildRequest]) -> list[dict[str, Any]]:
        return [self._launcher.render(request) for request in requests]

    def launch(
        self, record: TargetRecord, tags: set[str], report: CycleReport, *, by_hand: bool = False
    ) -> int:
        """Start the next attempt of ``record``: one Job per arch; returns Jobs started.

        A multi-arch target whose per-arch tag already exists (a crash after its push, or
        the surviving arch of a failed attempt) reuses it instead of building it again.
        """
        requests = self.requests(record)
        if not self._dry_run and self._base_missing(record.target, record.target.arches):
            return 0  # the cycle asked `DriverBases.ready` first; a person's build too
        if self._dry_run:
            report.manifests += self.render(requests)
            for request in requests:
                report.decide(Action.WOULD_LAUNCH, record.tag, request.arch.value, request.job_name)
            return len(requests)
        reused = {
            arch: digest
            for arch in record.target.arches
            if (digest := self._reusable_digest(record.target, arch, tags)) is not None
        }
        attempt = lifecycle.start_attempt(
            record, requests, reused=reused, now=self._clock(), rules=self._options, by_hand=by_hand
        )
        # Committed BEFORE any Job exists: a crash from here on is repaired by `follow`.
        self._store.save(targets=[attempt.record], builds=attempt.builds, events=[attempt.event])
        started = 0
        for build, request in zip(attempt.builds, requests, strict=True):
            if build.state is BuildState.LAUNCHING:
                self._create_job(build, request, report)
                started += 1
            else:
                report.decide(Action.REUSED, record.tag, f"{build.arch.value} {build.digest}")
        if not started:  # every arch was already pushed: only the index is left
            self.settle(attempt.record, report)
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
            report.decide(Action.LAUNCH_POSTPONED, build.tag, str(error), build.job_name)
            return
        except ClusterRejectedError as error:
            failed = failed_build(
                build, self._clock(), reason=FailureReason.REJECTED, message=str(error)
            )
            self._store.save(builds=[failed])
            report.decide(Action.REJECTED, build.tag, str(error), build.job_name)
            return
        self._store.save(builds=[running_build(build)])
        action = Action.LAUNCHED if created else Action.ADOPTED
        report.decide(action, build.tag, build.arch.value, build.job_name)

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
                if self._base_missing(record.target, (build.arch,)):
                    continue  # its base vanished since: the Job waits for it, never without
                request = self._request(record.target, build.arch, build.attempt)
                self._create_job(build, request, report)
            else:
                self._observe(record.target, build, report)
        for record in self._store.targets(required_only=False, state=TargetState.BUILDING):
            self.settle(record, report)

    def _observe(self, target: Target, build: BuildRecord, report: CycleReport) -> None:
        try:
            status = self._launcher.status(build.job_name)
        except ReleasebotError as error:  # down or forbidden: ask again next cycle
            report.errors.append(str(error))
            return
        outcome = judge_job(build, status, self._clock())
        if outcome is None:
            return
        if isinstance(outcome, Pushed):
            done = self._verify(target, build, outcome, report)
            if done is None:
                return
        else:
            done = outcome
            if abandons_job(done):  # the Pod would wait for ever
                delete_quietly(self._launcher, build.job_name, report)
        self._store.save(builds=[done])
        action = (
            Action.BUILD_SUCCEEDED if done.state is BuildState.SUCCEEDED else Action.BUILD_FAILED
        )
        report.decide(action, build.tag, describe_build(done), build.job_name)

    def _verify(
        self, target: Target, build: BuildRecord, pushed: Pushed, report: CycleReport
    ) -> BuildRecord | None:
        """The build as the registry confirms it (or refutes it); ``None`` = ask again later."""
        now = self._clock()
        try:
            actual = self._registry.digest(build.destination_tag)
            refuted = verify_digest(build, pushed, actual, now)
            if refuted is not None:
                return refuted
            labels = self._registry.labels(pushed.digest)
        except ReleasebotError as error:  # down or refusing us: verify next cycle
            report.errors.append(str(error))
            return None
        return verify_labels(build, target, pushed, labels, now)

    def settle(self, record: TargetRecord, report: CycleReport) -> None:
        """End the target's attempt once every build of it is over (``lifecycle.settle``)."""
        builds = self._store.builds(tag=record.tag)
        now = self._clock()
        others = _StoredTargets(self._store)  # read only when an attempt ends incompatible
        outcome = lifecycle.settle(record, builds, now=now, rules=self._options, others=others)
        if isinstance(outcome, Publish):
            outcome = self._publish(outcome, now, report)
        if outcome is not None:
            self._save(outcome, report)

    def _publish(self, publish: Publish, now: datetime, report: CycleReport) -> Change | None:
        try:
            if publish.needs_index:
                digest = self._registry.push_index(publish.record.tag, publish.digests)
            else:
                digest = publish.digests[0][1]
        except TemporaryError as error:
            report.errors.append(str(error))
            report.decide(Action.INDEX_POSTPONED, publish.record.tag, str(error))
            return None
        except ReleasebotError as error:  # e.g. a per-arch manifest gone: needs a human
            return lifecycle.index_refused(publish, str(error), now=now, rules=self._options)
        if self._attestor is None:
            return lifecycle.published(publish, digest, now=now, rules=self._options)
        try:
            signature = self._sign(publish, digest, self._attestor)
        except TemporaryError as error:  # the registry is down: sign again next cycle
            report.errors.append(str(error))
            report.decide(Action.SIGNING_POSTPONED, publish.record.tag, str(error))
            return None
        except ReleasebotError as error:  # a broken key, a refused push, a failed check
            return lifecycle.unsigned(publish, str(error), now=now, rules=self._options)
        return lifecycle.published(
            publish, digest, now=now, rules=self._options, signature=signature
        )

    def _sign(self, publish: Publish, digest: str, attestor: Attestor) -> Verification:
        """Sign ``digest`` (and, for an index, each arch), attach the SBOM and provenance,
        then read it all back and verify it against the public key. Both calls are
        idempotent, so signing again after a crash or a postponement adds nothing."""
        target = publish.record.target
        builds = [(b, self._request(target, b.arch, b.attempt)) for b in publish.builds]
        attestor.attest(attestation_request(self._registry.repository, target, digest, builds))
        return attestor.verify(digest)

    # -- saving and cleaning up ----------------------------------------------------------

    def _save(self, change: Change, report: CycleReport) -> None:
        """A transition in one transaction (the record and its event), then reported."""
        events = [] if change.event is None else [change.event]
        self._store.save(targets=[change.record], events=events)
        report.add(change.decision)


class _StoredTargets:
    """The store's targets, read from it only if iterated."""

    def __init__(self, store: StateStore) -> None:
        self._store = store

    def __iter__(self) -> Iterator[TargetRecord]:
        return iter(self._store.targets())
