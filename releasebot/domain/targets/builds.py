"""Builds: what one Kaniko run is asked to do, how it ended, and what that means next.

Pure: names, build arguments, labels and the failure classification are functions of the
target, so a restarted releasebot derives exactly the same Job name and adopts the Job it
launched before instead of launching a twin. How a build ends is judged here too, from
the facts the service fetched (the Job's status, then the registry's digest and labels):
``judge_job``, ``verify_digest``, ``verify_labels``. What an ended attempt means for the
target is ``domain.targets.lifecycle``'s.
"""

from __future__ import annotations

import enum
import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Protocol

from releasebot.domain.shared.errors import InvalidTagError
from releasebot.domain.shared.references import is_sha256_digest
from releasebot.domain.shared.versions import Arch, is_oci_tag
from releasebot.domain.targets.models import Target

LABEL_PREFIX = "releasebot"
DRIVER_LABEL = f"{LABEL_PREFIX}.driver-version"
FLATCAR_LABEL = f"{LABEL_PREFIX}.flatcar-version"
KERNEL_LABEL = f"{LABEL_PREFIX}.kernel-version"
CHANNEL_LABEL = f"{LABEL_PREFIX}.flatcar-channel"
RECIPE_LABEL = f"{LABEL_PREFIX}.recipe-revision"
"""Set by the recipe itself (from its ``RECIPE_REVISION`` build arg)."""

BUILD_ARG_NAMES = (
    "DRIVER_VERSION",
    "DRIVER_BRANCH",
    "FLATCAR_VERSION",
    "FLATCAR_CHANNEL",
    "KERNEL_VERSION",
    "TARGETARCH",
)
"""The build-argument contract every recipe (Dockerfile) must declare."""

_NAME_UNSAFE = re.compile(r"[^a-z0-9-]+")
JOB_NAME_MAX = 63  # a Job's name becomes its Pods' job-name label value: 63 at most


@dataclass(frozen=True)
class BuildRequest:
    """One Kaniko run: one target, one arch, one attempt."""

    target: Target
    arch: Arch
    attempt: int
    job_name: str
    destination_tag: str
    """The tag the run pushes: the target's own tag, or a per-arch tag for multi-arch."""
    build_args: tuple[tuple[str, str], ...]
    labels: tuple[tuple[str, str], ...]
    dockerfile: str | None = None
    """``None``: the recipe's Dockerfile (the per-release image)."""

    @property
    def subject(self) -> str:
        """The tag the Job is labelled with: the target's."""
        return self.target.tag


class JobRequest(Protocol):
    """What a Job launcher renders: a target's build (``BuildRequest``) or a driver base's
    (``bases.BaseRequest``). ``dockerfile`` names a file beside the configured Dockerfile
    (``None``: that one); ``subject`` is the tag the Job is labelled and annotated with."""

    @property
    def subject(self) -> str: ...

    @property
    def arch(self) -> Arch: ...

    @property
    def attempt(self) -> int: ...

    @property
    def job_name(self) -> str: ...

    @property
    def destination_tag(self) -> str: ...

    @property
    def build_args(self) -> tuple[tuple[str, str], ...]: ...

    @property
    def labels(self) -> tuple[tuple[str, str], ...]: ...

    @property
    def dockerfile(self) -> str | None: ...


def arch_tag(tag: str, arch: Arch) -> str:
    """The per-arch tag a multi-arch target's builds push before the index joins them."""
    value = f"{tag}-{arch.value}"
    if not is_oci_tag(value):
        raise InvalidTagError(f"{value!r} is not a valid OCI tag")
    return value


def job_name(tag: str, arch: Arch, attempt: int) -> str:
    """A deterministic, DNS-1123 Job name for (tag, arch, attempt), at most 63 characters.

    Readable where it fits; a digest of the full tag keeps two long tags apart.
    """
    digest = hashlib.sha256(tag.encode()).hexdigest()[:8]
    suffix = f"-{digest}-{arch.value}-{attempt}"
    slug = _NAME_UNSAFE.sub("-", tag.lower()).strip("-")
    room = JOB_NAME_MAX - len("rb-") - len(suffix)
    return f"rb-{slug[:room].rstrip('-')}{suffix}"


def build_request(
    target: Target,
    arch: Arch,
    attempt: int,
    extra_args: tuple[tuple[str, str], ...] = (),
) -> BuildRequest:
    """The request for one run. ``extra_args`` are what the recipe needs beyond the
    contract (compiler major, mirrors, key fingerprint, recipe revision)."""
    destination = arch_tag(target.tag, arch) if target.multi_arch else target.tag
    args = (
        ("DRIVER_VERSION", target.driver_version.text),
        ("DRIVER_BRANCH", target.driver_branch),
        ("FLATCAR_VERSION", target.flatcar_version.text),
        ("FLATCAR_CHANNEL", target.flatcar_channel),
        ("KERNEL_VERSION", target.kernel_release),
        ("TARGETARCH", arch.value),
        *((name, value) for name, value in extra_args if name not in BUILD_ARG_NAMES),
    )
    labels = (
        (DRIVER_LABEL, target.driver_version.text),
        (FLATCAR_LABEL, target.flatcar_version.text),
        (KERNEL_LABEL, target.kernel_release),
        (CHANNEL_LABEL, target.flatcar_channel),
        ("org.opencontainers.image.version", target.tag),
        ("org.opencontainers.image.title", "NVIDIA driver for Flatcar Container Linux"),
    )
    return BuildRequest(
        target=target,
        arch=arch,
        attempt=attempt,
        job_name=job_name(target.tag, arch, attempt),
        destination_tag=destination,
        build_args=args,
        labels=labels,
    )


def parse_digest(message: str | None) -> str | None:
    """The image digest Kaniko wrote to the termination message, or ``None`` if garbage."""
    if message is None:
        return None
    text = message.strip()
    return text if is_sha256_digest(text) else None


class FailureReason(enum.StrEnum):
    """Why a build did not publish. ``transient`` says whether another attempt may help."""

    OOM_KILLED = "OOMKilled"
    EVICTED = "Evicted"
    DEADLINE_EXCEEDED = "DeadlineExceeded"
    JOB_DELETED = "JobDeleted"
    PUSH_UNVERIFIED = "PushUnverified"
    """Kaniko said it pushed, but the registry does not hold that digest under the tag."""
    BAD_TERMINATION_MESSAGE = "BadTerminationMessage"
    IMAGE_PULL = "ImagePull"
    """The executor image cannot be pulled: a configuration problem."""
    REJECTED = "Rejected"
    """The API server refused the Job (invalid spec, quota, permissions)."""
    EXIT_CODE = "NonZeroExit"
    """The build itself failed: the recipe or its inputs need a human."""
    PUSH_FAILED = "PushFailed"
    """Kaniko built the image but could not push it (its log says so): often a blip."""
    WRONG_CONTENT = "WrongContent"
    """The pushed image's labels name another driver, release or kernel than its tag."""
    INPUTS_UNAVAILABLE = "InputsUnavailable"
    """The recipe could not download its inputs (not published yet, or a server down)."""
    INCOMPATIBLE = "Incompatible"
    """NVIDIA's make failed for this (driver, kernel) pair: neither a blip nor a mistake,
    so never retried (the recipe's ``incompatible:`` line says it)."""

    @property
    def transient(self) -> bool:
        return self in _TRANSIENT


_TRANSIENT = frozenset(
    {
        FailureReason.OOM_KILLED,
        FailureReason.EVICTED,
        FailureReason.DEADLINE_EXCEEDED,
        FailureReason.JOB_DELETED,
        FailureReason.PUSH_UNVERIFIED,
        FailureReason.PUSH_FAILED,
        FailureReason.INPUTS_UNAVAILABLE,
        FailureReason.BAD_TERMINATION_MESSAGE,
        # A pull error may be a registry blip; a wrong image fails every attempt and ends
        # as "retries exhausted" with this reason, which names the fix.
        FailureReason.IMAGE_PULL,
    }
)


class JobPhase(enum.StrEnum):
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    MISSING = "missing"


@dataclass(frozen=True)
class JobStatus:
    """What the cluster says about one build Job."""

    name: str
    phase: JobPhase
    termination_message: str | None = None
    reason: FailureReason | None = None
    message: str | None = None
    log_tail: str | None = None


class BuildState(enum.StrEnum):
    LAUNCHING = "launching"
    """Recorded before the Job is created; a restart finds it and creates or adopts."""
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"

    @property
    def active(self) -> bool:
        return self in (BuildState.LAUNCHING, BuildState.RUNNING)


@dataclass(frozen=True)
class BuildRecord:
    """One Kaniko run as the store keeps it."""

    tag: str
    arch: Arch
    attempt: int
    job_name: str
    destination_tag: str
    state: BuildState
    created_at: datetime
    digest: str | None = None
    reason: FailureReason | None = None
    message: str | None = None
    log_tail: str | None = None
    finished_at: datetime | None = None

    @property
    def order(self) -> tuple[datetime, str, str, int]:
        """How every store lists builds: oldest first, then by tag, arch and attempt."""
        return (self.created_at, self.tag, self.arch.value, self.attempt)


def retry_delay(attempt: int, *, base: timedelta, cap: timedelta) -> timedelta:
    """Capped exponential backoff before attempt ``attempt + 1`` (attempt counts from 1)."""
    factor: int = 2 ** max(0, attempt - 1)
    return min(cap, base * factor)


_PUSH_ERROR_MARKERS = ("error pushing image", "failed to push", "push retry")
# The recipe's fetch-verified script says why it stopped in one line starting with these:
# inputs not published yet or a server down are worth another attempt; a tampered file,
# a foreign signature or a runfile that is gone are not.
_INPUT_MARKERS = ("waiting: ", "unavailable: ")
INCOMPATIBLE_MARKER = "incompatible: "
"""The line start build-modules writes when NVIDIA's make fails for the (driver, kernel)."""


def classify_exit(log_tail: str | None) -> FailureReason:
    """A non-zero Kaniko exit: a failed push or inputs not there yet (transient), a driver
    that does not compile for the kernel (incompatible), or a failed build (needs a human:
    the log tail says why)."""
    text = (log_tail or "").lower()
    if any(marker in text for marker in _PUSH_ERROR_MARKERS):
        return FailureReason.PUSH_FAILED
    if any(f"\n{marker}" in f"\n{text}" for marker in _INPUT_MARKERS):
        return FailureReason.INPUTS_UNAVAILABLE
    if f"\n{INCOMPATIBLE_MARKER}" in f"\n{text}":
        return FailureReason.INCOMPATIBLE
    return FailureReason.EXIT_CODE


# -- how a build ends ----------------------------------------------------------------------


@dataclass(frozen=True)
class Pushed:
    """A Job that says it pushed ``digest``: the registry has to confirm it first."""

    digest: str


def judge_job(build: BuildRecord, status: JobStatus, now: datetime) -> BuildRecord | Pushed | None:
    """What a running build's Job status means: ``None`` while it runs; the build as it
    failed; or ``Pushed`` when it succeeded and its digest is to be verified."""
    if status.phase is JobPhase.RUNNING:
        return None
    if status.phase is JobPhase.MISSING:
        return failed_build(
            build,
            now,
            reason=FailureReason.JOB_DELETED,
            message="the Job was deleted before it finished",
        )
    if status.phase is JobPhase.FAILED:
        reason = status.reason or FailureReason.EXIT_CODE
        if reason is FailureReason.EXIT_CODE:
            reason = classify_exit(status.log_tail)
        return failed_build(
            build, now, reason=reason, message=status.message, log_tail=status.log_tail
        )
    digest = parse_digest(status.termination_message)
    if digest is None:
        shown = (status.termination_message or "")[:80]
        return failed_build(
            build,
            now,
            reason=FailureReason.BAD_TERMINATION_MESSAGE,
            message=f"termination message is not a digest: {shown!r}",
        )
    return Pushed(digest)


def abandons_job(build: BuildRecord) -> bool:
    """Whether the failed build's Job must be deleted: its Pod would wait for ever."""
    return build.reason is FailureReason.IMAGE_PULL


def verify_digest(
    build: BuildRecord, pushed: Pushed, actual: str | None, now: datetime
) -> BuildRecord | None:
    """The build as failed when the registry does not hold the reported digest under its
    destination tag (``actual``); ``None`` when it does (the labels come next)."""
    if actual == pushed.digest:
        return None
    return failed_build(
        build,
        now,
        reason=FailureReason.PUSH_UNVERIFIED,
        message=f"Kaniko reported {pushed.digest}, the registry has {actual or 'no such tag'}",
    )


def verify_labels(
    build: BuildRecord, target: Target, pushed: Pushed, labels: Mapping[str, str], now: datetime
) -> BuildRecord:
    """The build as succeeded when the pushed image's labels say what its tag promises,
    else as failed (a recipe that ignored its build args: a human must look)."""
    wrong = wrong_labels(target, labels)
    if wrong is not None:
        return failed_build(build, now, reason=FailureReason.WRONG_CONTENT, message=wrong)
    return replace(build, state=BuildState.SUCCEEDED, digest=pushed.digest, finished_at=now)


def wrong_labels(target: Target, labels: Mapping[str, str]) -> str | None:
    """Which label names another driver, release or kernel than ``target``; ``None``: none."""
    expected = {
        DRIVER_LABEL: target.driver_version.text,
        FLATCAR_LABEL: target.flatcar_version.text,
        KERNEL_LABEL: target.kernel_release,
    }
    for key, value in expected.items():
        if labels.get(key) != value:
            return f"image label {key} is {labels.get(key)!r}, the tag promises {value!r}"
    return None


def running_build(build: BuildRecord) -> BuildRecord:
    """The build once its Job exists (created, or adopted after a crash)."""
    return replace(build, state=BuildState.RUNNING)


def failed_build(
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


def describe_build(build: BuildRecord) -> str:
    """How a build ended, in one line: its digest, or its reason and message."""
    if build.state is BuildState.SUCCEEDED:
        return build.digest or "succeeded"
    text = build.reason.value if build.reason else build.state.value
    return f"{text}: {build.message}" if build.message else text
