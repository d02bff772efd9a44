"""The domain's values: releases as the feeds describe them, feeds' poll state, targets.

All are frozen dataclasses built by the parsers and the store; code inside the domain
trusts them (validation happens at the edges).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field, replace
from datetime import date, datetime

from releasebot.domain.versions import Arch, DriverVersion, FlatcarVersion, sorted_arches


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
        return f"{self.kernel}-flatcar"


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


@dataclass(frozen=True)
class PlannedTarget:
    """One image the policy says must exist: a driver built for one Flatcar release."""

    tag: str
    driver: DriverRelease
    flatcar: FlatcarRelease
    arches: frozenset[Arch]
    feeds: tuple[str, ...]
    """The configured Flatcar channels whose policy selected this release."""


@dataclass(frozen=True)
class TargetRecord:
    """A target as the store keeps it, with its state."""

    tag: str
    driver_version: str
    driver_branch: str
    flatcar_version: str
    flatcar_channel: str
    kernel: str
    arches: tuple[Arch, ...]
    state: TargetState
    required: bool
    first_planned_at: datetime
    updated_at: datetime
    digest: str | None = None
    attempts: int = 0
    """Build attempts made so far (one attempt builds every arch of the target)."""
    next_attempt_at: datetime | None = None
    last_error: str | None = None
    published_at: datetime | None = None

    @property
    def kernel_release(self) -> str:
        """The kernel release as ``uname -r`` reports it on the node (``6.12.102-flatcar``)."""
        return f"{self.kernel}-flatcar"

    @classmethod
    def from_planned(cls, target: PlannedTarget, *, now: datetime) -> TargetRecord:
        return cls(
            tag=target.tag,
            driver_version=target.driver.version.text,
            driver_branch=target.driver.branch,
            flatcar_version=target.flatcar.version.text,
            flatcar_channel=target.flatcar.channel,
            kernel=target.flatcar.kernel,
            arches=sorted_arches(target.arches),
            state=TargetState.UNKNOWN,
            required=True,
            first_planned_at=now,
            updated_at=now,
        )

    def replanned(self, planned: TargetRecord, now: datetime) -> TargetRecord:
        """This record with the plan fields of ``planned``; state and history are kept."""
        if self.same_plan(planned):
            return self
        state = self.state
        if state is TargetState.PUBLISHED and planned.arches != self.arches:
            state = TargetState.STALE  # the tag holds the old arches: build it again
        return replace(
            self,
            state=state,
            driver_version=planned.driver_version,
            driver_branch=planned.driver_branch,
            flatcar_version=planned.flatcar_version,
            flatcar_channel=planned.flatcar_channel,
            kernel=planned.kernel,
            arches=planned.arches,
            required=planned.required,
            updated_at=now,
        )

    def same_plan(self, other: TargetRecord) -> bool:
        """True when ``other`` describes the same build (ignores state and timestamps)."""
        return (
            self.driver_version,
            self.driver_branch,
            self.flatcar_version,
            self.flatcar_channel,
            self.kernel,
            self.arches,
            self.required,
        ) == (
            other.driver_version,
            other.driver_branch,
            other.flatcar_version,
            other.flatcar_channel,
            other.kernel,
            other.arches,
            other.required,
        )
