"""The domain's values: releases as the feeds describe them, feeds' poll state, targets.

All are frozen dataclasses built by the parsers and the store; code inside the domain
trusts them (validation happens at the edges). A target has ONE shape, ``Target``, from
the policy to the Job's build args and the store's rows; ``TargetRecord`` is a target with
the state the store keeps for it.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field, replace
from datetime import date, datetime
from itertools import pairwise

from releasebot.domain.shared.errors import InvalidTagError
from releasebot.domain.shared.versions import (
    Arch,
    DriverVersion,
    FlatcarVersion,
    image_tag,
    is_oci_tag,
    kernel_release,
    sorted_arches,
)


@dataclass(frozen=True)
class FlatcarRelease:
    """One entry of a Flatcar release feed, keyed by its version."""

    version: FlatcarVersion
    channel: str
    """The ``channel`` field of the entry (``lts`` even in ``releases-lts-2024.json``)."""
    arches: frozenset[Arch]
    kernel: str
    """Upstream kernel version from ``major_software.kernel`` (``6.12.102``)."""
    released_at: datetime | None
    content_sha256: str = field(compare=False)
    """Digest of the entry as published; a change means the entry was edited upstream."""

    @property
    def kernel_release(self) -> str:
        """The kernel release as ``uname -r`` reports it on the node (``6.12.102-flatcar``)."""
        return kernel_release(self.kernel)


@dataclass(frozen=True)
class DriverRelease:
    """One NVIDIA datacenter driver release from ``releases.json``."""

    version: DriverVersion
    branch: str
    branch_type: str
    """Lower-cased branch type, e.g. ``lts branch`` or ``production branch``."""
    arches: frozenset[Arch]
    released_on: date | None
    runfile_urls: tuple[tuple[Arch, str], ...]
    content_sha256: str = field(compare=False)


@dataclass(frozen=True)
class Validators:
    """What a feed's last successful answer said about itself, for the next conditional GET."""

    etag: str | None = None
    last_modified: str | None = None
    body_sha256: str | None = None


@dataclass(frozen=True)
class FeedState:
    """The store's record of polling one feed."""

    name: str
    url: str
    validators: Validators
    last_polled_at: datetime | None
    last_success_at: datetime | None
    last_changed_at: datetime | None
    last_error: str | None
    last_error_at: datetime | None
    consecutive_failures: int


class TargetReason(enum.StrEnum):
    """Why a target must exist; a target may have several (``plan`` shows them all)."""

    PENDING_REBOOT = "pending-reboot"
    """A GPU node will reboot into its Flatcar version (FLUO's ``new-version``)."""
    FLEET = "fleet"
    """A GPU node runs its Flatcar version now."""
    CHANNEL = "channel"
    """The channel policy selects it (the newest ``keep`` releases of a channel)."""

    @classmethod
    def parse_all(cls, text: str) -> frozenset[TargetReason]:
        """Reasons as the store keeps them (comma-separated); unknown names are dropped."""
        known = {reason.value: reason for reason in cls}
        return frozenset(known[part] for part in text.split(",") if part in known)


REASON_ORDER = tuple(TargetReason)
"""Strongest first: a target a node is about to reboot into matters most."""


def ordered_reasons(reasons: frozenset[TargetReason]) -> list[str]:
    """The reasons' names strongest first: the one order the store, the CLI, the page and
    its API show them in."""
    return [reason.value for reason in REASON_ORDER if reason in reasons]


def reasons_text(reasons: frozenset[TargetReason]) -> str:
    """``pending-reboot,fleet``: the reasons strongest first, as stored and shown."""
    return ",".join(ordered_reasons(reasons))


class TargetState(enum.StrEnum):
    """Where a target stands. See ``docs/architecture.md`` for the state machine."""

    UNKNOWN = "unknown"
    """Planned, not yet checked against the registry."""
    MISSING = "missing"
    """The registry lacks the tag and no build is running: the next cycle launches one."""
    WAITING = "waiting"
    """Missing, but its inputs (Flatcar artefacts, NVIDIA runfile) are not published yet;
    checked again at ``next_attempt_at``."""
    BUILDING = "building"
    """At least one build Job for the target is in flight."""
    RETRYING = "retrying"
    """A transient failure; the next attempt waits until ``next_attempt_at``."""
    PUBLISHED = "published"
    """The tag exists in the registry (``digest`` when releasebot verified or read it)."""
    STALE = "stale"
    """Published, but for other arches than the plan now wants: built again."""
    FAILED = "failed"
    """A permanent failure or retries exhausted: waits for a human (``build --force``)."""
    INCOMPATIBLE = "incompatible"
    """NVIDIA's driver does not compile for the release's kernel (the recipe says so): never
    retried; list the pair in ``nvidia.incompatible`` or wait for a driver that builds."""
    REFUSED = "refused"
    """Published, but a GPU node that rebooted into it could not prove it (the driver pod
    crash-looped, the validator never turned Ready...): no other node's reboot gate opens
    for it until a person rebuilds it (``/releasebot rebuild TAG``)."""


# Slots: one of each is kept per target, for the life of the process (the store's decoded
# rows, the plan); at 10,000 targets an instance dict each costs about a megabyte.
@dataclass(frozen=True, slots=True)
class Target:
    """One image that must exist: a driver built for one Flatcar release, for some arches.

    ``tag`` is its identity, the tag the GPU Operator pulls (``image_tag``); the rest is what
    the build needs. Versions stay typed all the way to the Job's build args (``.text`` is
    upstream's exact spelling). Construction checks the tag and keeps the arches sorted and
    unique, so two equal targets are equal field by field.
    """

    tag: str
    driver_version: DriverVersion
    driver_branch: str
    flatcar_version: FlatcarVersion
    flatcar_channel: str
    """The release's own ``channel`` (``lts`` for every LTS stream)."""
    kernel: str
    """Upstream kernel version (``6.12.102``)."""
    arches: tuple[Arch, ...]
    reasons: frozenset[TargetReason] = frozenset()
    """Why it must exist; none for a target only a person asked for (``releasebot build``)."""

    def __post_init__(self) -> None:
        if not is_oci_tag(self.tag):
            raise InvalidTagError(f"{self.tag!r} is not a valid OCI tag")
        arches = self.arches
        # The store hands them over sorted already: check that cheaply, sort otherwise.
        if type(arches) is not tuple or any(a >= b for a, b in pairwise(arches)):
            arches = sorted_arches(frozenset(arches))
            object.__setattr__(self, "arches", arches)
        if not arches:
            raise ValueError(f"target {self.tag} has no arch")

    @classmethod
    def of(
        cls,
        driver: DriverRelease,
        flatcar: FlatcarRelease,
        arches: frozenset[Arch],
        reasons: frozenset[TargetReason] = frozenset(),
    ) -> Target:
        """The target of ``driver`` on ``flatcar`` for ``arches``, for ``reasons``."""
        return cls(
            tag=image_tag(driver.version, flatcar.version),
            driver_version=driver.version,
            driver_branch=driver.branch,
            flatcar_version=flatcar.version,
            flatcar_channel=flatcar.channel,
            kernel=flatcar.kernel,
            arches=sorted_arches(arches),
            reasons=reasons,
        )

    @property
    def kernel_release(self) -> str:
        """The kernel release as ``uname -r`` reports it on the node (``6.12.102-flatcar``)."""
        return kernel_release(self.kernel)

    @property
    def multi_arch(self) -> bool:
        """Built as one image per arch joined by an OCI index."""
        return len(self.arches) > 1

    @property
    def reason_text(self) -> str:
        return reasons_text(self.reasons)


@dataclass(frozen=True, slots=True)
class TargetRecord:
    """A target as the store keeps it: the target itself, and where it stands."""

    target: Target
    state: TargetState
    required: bool
    """Whether the policy wants it now (targets that drop out of the plan are kept)."""
    first_planned_at: datetime
    updated_at: datetime
    digest: str | None = None
    attempts: int = 0
    """Build attempts made so far (one attempt builds every arch of the target)."""
    next_attempt_at: datetime | None = None
    last_error: str | None = None
    published_at: datetime | None = None
    budget_start: int = 0
    """Attempts made before the current retry budget began: a person's build or retry
    starts a full budget (``lifecycle.failed_streak`` counts from here or the last publish)."""
    proven_at: datetime | None = None
    """When a GPU node first proved this image after rebooting into it (the after-reboot
    proof); cleared when the tag is published again (a rebuild must be proven again)."""
    proven_node: str | None = None
    proven_arches: frozenset[Arch] = frozenset()
    """The arches a GPU node proved the image on: the gate's canary rule is per arch."""

    @property
    def tag(self) -> str:
        return self.target.tag

    @classmethod
    def new(cls, target: Target, *, now: datetime, required: bool = True) -> TargetRecord:
        """A target never stored before: not yet checked against the registry."""
        return cls(
            target=target,
            state=TargetState.UNKNOWN,
            required=required,
            first_planned_at=now,
            updated_at=now,
        )

    def replanned(self, planned: TargetRecord, now: datetime) -> TargetRecord:
        """This record with the target and ``required`` of ``planned``; state and history
        are kept, except that a published tag whose arches changed becomes stale."""
        if self.same_plan(planned):
            return self
        state = self.state
        if state is TargetState.PUBLISHED and planned.target.arches != self.target.arches:
            state = TargetState.STALE  # the tag holds the old arches: build it again
        return replace(
            self, state=state, target=planned.target, required=planned.required, updated_at=now
        )

    def same_plan(self, other: TargetRecord) -> bool:
        """True when ``other`` describes the same build (ignores state and timestamps)."""
        return (self.target, self.required) == (other.target, other.required)
