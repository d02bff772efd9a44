"""Driver bases: the part of a driver image that does not depend on the kernel. Pure.

A per-release image (``<driver>-flatcar<version>``) is built FROM its driver's base, pinned
by digest, plus one kernel layer; so every image of one driver and arch shares the base's
layer blobs, and a node that updates Flatcar pulls only the kernel layer. A base is one
image per (driver version, arch, recipe revision, base OS images): built once, reused for
every Flatcar release, built again when the recipe or the base OS images change (they are
part of its tag, so a change is simply another base).

Everything here is a function of facts the service fetched (the stored base, the
registry's tag list, the Job's end, the time): which bases the due targets need, whether
a base is ready, to be launched, followed, retried or failed, what its Job is told, and
that a target waits, with a reason a person can read, while its base is not published. No
per-release Job starts without its base's digest: ``driver_base_arg`` is the only way the
per-release build learns it, and it needs a published base. What a base's failure means
for the people on call is ONE event (``BASE_FAILED``), told when it fails for good.

Deliberately not here: the I/O (``service/bases.py``), the Job manifest
(``builders/kaniko.py``), the table (``store/bases.py``).
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from datetime import datetime

from releasebot.domain.shared.versions import Arch
from releasebot.domain.targets.base_tags import (
    BASE_ARG_NAMES,
    BASE_DOCKERFILE,
    BASE_LABEL,
    DRIVER_BASE_ARG,
    BaseSpec,
)
from releasebot.domain.targets.builds import (
    RECIPE_LABEL,
    BuildRecord,
    BuildState,
    FailureReason,
    job_name,
    retry_delay,
)
from releasebot.domain.targets.decisions import Action, Decision
from releasebot.domain.targets.events import BaseFailed, Event
from releasebot.domain.targets.lifecycle import Change, LifecycleRules
from releasebot.domain.targets.models import Target, TargetRecord, TargetState


@dataclass(frozen=True)
class BaseRules:
    """What makes a base, beside its driver and arch (the ``[recipe]`` settings)."""

    revision: str
    """The recipe's revision: the shipped recipe's digest, or a git context's commit."""
    os_images: tuple[tuple[str, str], ...] = ()
    """``(RUNTIME_IMAGE, …)``, ``(BUILDER_IMAGE, …)`` as configured; empty: the recipe's."""
    build_args: tuple[tuple[str, str], ...] = ()
    """Every build's extra args; the base Job gets those ``Dockerfile.base`` declares."""


def spec_for(target: Target, arch: Arch, rules: BaseRules) -> BaseSpec:
    """The base the target's ``arch`` image is built on."""
    return BaseSpec(
        target.driver_version, target.driver_branch, arch, rules.revision, rules.os_images
    )


def needed_bases(records: Iterable[TargetRecord], rules: BaseRules) -> list[BaseSpec]:
    """The bases the given targets are built on, one per (driver, arch), in their order."""
    seen: dict[str, BaseSpec] = {}
    for record in records:
        for arch in record.target.arches:
            spec = spec_for(record.target, arch, rules)
            seen.setdefault(spec.tag, spec)
    return list(seen.values())


class BaseState(enum.StrEnum):
    LAUNCHING = "launching"
    """Recorded before the Job is created; a restart creates or adopts it."""
    RUNNING = "running"
    PUBLISHED = "published"
    """Verified in the registry: its digest is what per-release Jobs are built FROM."""
    RETRYING = "retrying"
    FAILED = "failed"
    """Failed for good (told once): its targets wait until a person retries one of them."""


@dataclass(frozen=True)
class BaseRecord:
    """A base as the store keeps it: what it is, and its current (or last) attempt."""

    spec: BaseSpec
    state: BaseState
    created_at: datetime
    updated_at: datetime
    attempts: int = 0
    budget_start: int = 0
    """Attempts before the current retry budget (a person's retry starts a new one)."""
    failures: int = 0
    """Failed attempts since the budget began."""
    job_name: str | None = None
    started_at: datetime | None = None
    digest: str | None = None
    reason: FailureReason | None = None
    last_error: str | None = None
    log_tail: str | None = None
    next_attempt_at: datetime | None = None
    published_at: datetime | None = None

    @property
    def tag(self) -> str:
        return self.spec.tag

    @property
    def active(self) -> bool:
        return self.state in (BaseState.LAUNCHING, BaseState.RUNNING)

    def build(self) -> BuildRecord:
        """The attempt as a build row, for the judgements builds share (``judge_job``)."""
        return BuildRecord(
            tag=self.tag,
            arch=self.spec.arch,
            attempt=self.attempts,
            job_name=self.job_name or "",
            destination_tag=self.tag,
            state=BuildState.RUNNING,
            created_at=self.started_at or self.created_at,
        )


@dataclass(frozen=True)
class BaseRequest:
    """One base Job: what the Job launcher renders (``JobRequest``)."""

    spec: BaseSpec
    attempt: int
    job_name: str
    build_args: tuple[tuple[str, str], ...]
    labels: tuple[tuple[str, str], ...]
    dockerfile: str | None = BASE_DOCKERFILE

    @property
    def subject(self) -> str:
        return self.spec.tag

    @property
    def arch(self) -> Arch:
        return self.spec.arch

    @property
    def destination_tag(self) -> str:
        return self.spec.tag


def base_request(spec: BaseSpec, attempt: int, rules: BaseRules) -> BaseRequest:
    """The base's Job for ``attempt``: ``Dockerfile.base``, its build args, its tag."""
    extra = dict(rules.build_args)
    extra.update(rules.os_images)
    args = (
        ("DRIVER_VERSION", spec.driver_version.text),
        ("DRIVER_BRANCH", spec.driver_branch),
        ("TARGETARCH", spec.arch.value),
        *((name, extra[name]) for name in sorted(extra) if name in BASE_ARG_NAMES),
    )
    labels = (
        (BASE_LABEL, spec.label),
        (RECIPE_LABEL, spec.revision),
        ("org.opencontainers.image.version", spec.tag),
        ("org.opencontainers.image.title", "NVIDIA driver base for Flatcar Container Linux"),
    )
    return BaseRequest(spec, attempt, job_name(spec.tag, spec.arch, attempt), args, labels)


# -- what a base needs next ------------------------------------------------------------------


class BaseStep(enum.StrEnum):
    READY = "ready"
    """Published: its targets may launch."""
    LAUNCH = "launch"
    """Missing (never built, vanished from the registry) or due for a retry."""
    BUILDING = "building"
    WAIT = "wait"
    """Retrying later."""
    FAILED = "failed"


def base_step(record: BaseRecord | None, *, present: bool, now: datetime) -> BaseStep:
    """What the base needs now, from its record and whether its tag is in the registry."""
    if record is None:
        return BaseStep.LAUNCH
    if record.active:
        return BaseStep.BUILDING
    if record.state is BaseState.PUBLISHED:
        return BaseStep.READY if present else BaseStep.LAUNCH
    if record.state is BaseState.RETRYING:
        due = record.next_attempt_at is None or record.next_attempt_at <= now
        return BaseStep.LAUNCH if due else BaseStep.WAIT
    return BaseStep.FAILED


def start_base(
    spec: BaseSpec,
    record: BaseRecord | None,
    request: BaseRequest,
    *,
    now: datetime,
    by_hand: bool = False,
) -> BaseRecord:
    """The base's next attempt, recorded ``launching`` before its Job exists. ``by_hand``: a
    person retried a target that waits for it, which starts a full retry budget."""
    if record is None:
        record = BaseRecord(spec, BaseState.LAUNCHING, created_at=now, updated_at=now)
    budget_start = record.attempts if by_hand else record.budget_start
    return replace(
        record,
        state=BaseState.LAUNCHING,
        attempts=request.attempt,
        budget_start=budget_start,
        failures=0 if by_hand else record.failures,
        job_name=request.job_name,
        started_at=now,
        reason=None,
        next_attempt_at=None,
        updated_at=now,
    )


def adopt_base(spec: BaseSpec, digest: str, *, now: datetime) -> BaseRecord:
    """A base found in the registry with the right labels (e.g. a store restored from an
    old backup): taken as published, not built again."""
    return BaseRecord(
        spec,
        BaseState.PUBLISHED,
        created_at=now,
        updated_at=now,
        digest=digest,
        published_at=now,
    )


def wrong_base_labels(spec: BaseSpec, labels: Mapping[str, str]) -> str | None:
    """Which label says the image is another base than ``spec``; ``None``: none."""
    expected = {BASE_LABEL: spec.label, RECIPE_LABEL: spec.revision}
    for key, value in expected.items():
        if labels.get(key) != value:
            return f"image label {key} is {labels.get(key)!r}, the base tag promises {value!r}"
    return None


@dataclass(frozen=True)
class BaseChange:
    """A base's transition: the record as it becomes, what to log, what to tell."""

    record: BaseRecord
    decision: Decision
    event: Event | None = None


def base_published(record: BaseRecord, digest: str, *, now: datetime) -> BaseChange:
    published = replace(
        record,
        state=BaseState.PUBLISHED,
        digest=digest,
        reason=None,
        last_error=None,
        log_tail=None,
        published_at=now,
        updated_at=now,
    )
    return BaseChange(published, Decision(Action.PUBLISHED, record.tag, f"driver base {digest}"))


def base_failed(
    record: BaseRecord, failed: BuildRecord, *, now: datetime, rules: LifecycleRules
) -> BaseChange:
    """A failed attempt: retried with the targets' backoff while transient and within
    ``max_attempts``; else failed for good, which is the one ``BASE_FAILED`` event."""
    reason = failed.reason or FailureReason.EXIT_CODE
    why = reason.value if not failed.message else f"{reason.value}: {failed.message}"
    failures = record.failures + 1
    base = replace(
        record,
        reason=reason,
        last_error=why,
        log_tail=failed.log_tail,
        failures=failures,
        updated_at=now,
    )
    if reason.transient and failures < rules.max_attempts:
        delay = retry_delay(failures, base=rules.retry_base, cap=rules.retry_cap)
        retrying = replace(base, state=BaseState.RETRYING, next_attempt_at=now + delay)
        return BaseChange(retrying, Decision(Action.RETRYING, record.tag, why))
    failed_base = replace(base, state=BaseState.FAILED, next_attempt_at=None)
    return BaseChange(
        failed_base, Decision(Action.FAILED, record.tag, why), base_failed_event(failed_base, now)
    )


def base_failed_event(record: BaseRecord, now: datetime) -> BaseFailed:
    """The one alert of a base that failed for good (not one per waiting target)."""
    spec = record.spec
    return BaseFailed(
        message_key=f"base:{spec.tag}#{record.attempts}",
        subject=spec.tag,
        created_at=now,
        driver_version=spec.driver_version.text,
        arch=spec.arch.value,
        recipe_revision=spec.revision,
        attempt=record.attempts,
        error=record.last_error,
        reason=None if record.reason is None else record.reason.value,
        log_tail=record.log_tail,
        jobs=(record.job_name,) if record.job_name else (),
    )


# -- the targets that wait for it ------------------------------------------------------------


def base_wait_reason(spec: BaseSpec, record: BaseRecord | None) -> str:
    """What a target waiting for ``spec`` shows (``plan``, status, the page)."""
    text = f"waiting for driver base {spec.tag}"
    if record is None:
        return text
    if record.state is BaseState.FAILED:
        return f"{text} (failed: {record.last_error or 'no reason recorded'}; retry the target)"
    if record.state is BaseState.RETRYING:
        return f"{text} (retrying: {record.last_error or 'no reason recorded'})"
    if record.active:
        return f"{text} (building, Job {record.job_name})"
    return text


def wait_for_base(record: TargetRecord, why: str, *, now: datetime) -> Change | None:
    """A due target whose base is not published waits, due again as soon as it is; the
    decision is said when the reason changes. ``None``: nothing changes."""
    if record.state is TargetState.WAITING and record.last_error == why:
        return None
    waiting = replace(
        record, state=TargetState.WAITING, next_attempt_at=None, last_error=why, updated_at=now
    )
    return Change(waiting, Decision(Action.WAITING, record.tag, why))


def driver_base_arg(repository: str, record: BaseRecord | None) -> tuple[str, str] | None:
    """``("DRIVER_BASE", "<repository>@<digest>")`` for a published base; ``None`` otherwise
    (and then no per-release Job may start)."""
    if record is None or record.state is not BaseState.PUBLISHED or record.digest is None:
        return None
    return (DRIVER_BASE_ARG, f"{repository}@{record.digest}")
