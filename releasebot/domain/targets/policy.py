"""The selection policy: which (driver, Flatcar release, arches) images must exist.

Pure functions over what the feeds have ever shown (the store keeps vanished entries, so a
release that disappears from its feed stays selectable). The policy never looks at the
registry or at time: the same inputs always give the same plan.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from fnmatch import fnmatchcase

from releasebot.domain.shared.versions import Arch
from releasebot.domain.targets.models import DriverRelease, FlatcarRelease, Target, TargetReason

FLATCAR_CHANNELS = ("stable", "beta", "alpha", "lts")
_CHANNEL = frozenset({TargetReason.CHANNEL})
_LTS_STREAM_RE = re.compile(r"lts-(20[0-9]{2})")


def is_flatcar_channel(name: str) -> bool:
    """A channel feed releasebot knows: stable, beta, alpha, lts, or one LTS stream lts-YYYY."""
    return name in FLATCAR_CHANNELS or _LTS_STREAM_RE.fullmatch(name) is not None


@dataclass(frozen=True)
class FlatcarPolicy:
    channels: tuple[str, ...]
    arches: frozenset[Arch]
    keep: int


@dataclass(frozen=True)
class DriverPolicy:
    branches: frozenset[str]
    branch_types: frozenset[str]
    """Lower-cased NVIDIA branch types (``lts branch``); matched case-insensitively."""
    keep: int


_PAIR_PATTERN = re.compile(r"[0-9A-Za-z.*?_+-]{1,64}")


@dataclass(frozen=True)
class IncompatiblePair:
    """A (driver, kernel) pair the operator knows does not build (``nvidia.incompatible``):
    shell-style patterns matched against the driver version and the Flatcar release's
    kernel (``6.12.97`` or ``6.12.97-flatcar``), e.g. ``550.*`` and ``6.12.97*``."""

    driver: str
    kernel: str

    @classmethod
    def parse(cls, text: str) -> IncompatiblePair:
        """``DRIVER:KERNEL``; ``ValueError`` naming what is wrong."""
        driver, colon, kernel = text.strip().partition(":")
        for part in (driver, kernel):
            if not colon or _PAIR_PATTERN.fullmatch(part) is None:
                raise ValueError(
                    f"{text!r} is not DRIVER:KERNEL (shell patterns of letters, digits and"
                    " . * ? _ + -, e.g. '550.*:6.12.97*')"
                )
        return cls(driver, kernel)

    def matches(self, target: Target) -> bool:
        kernels = (target.kernel, target.kernel_release)
        return fnmatchcase(target.driver_version.text, self.driver) and any(
            fnmatchcase(kernel, self.kernel) for kernel in kernels
        )

    def __str__(self) -> str:
        return f"{self.driver}:{self.kernel}"


@dataclass(frozen=True)
class Policy:
    flatcar: FlatcarPolicy
    drivers: DriverPolicy
    incompatible: tuple[IncompatiblePair, ...] = ()
    """Pairs never planned, whatever asks for them (the channel policy or the fleet)."""


def select_flatcar_releases(
    releases: Iterable[FlatcarRelease], policy: FlatcarPolicy
) -> list[FlatcarRelease]:
    """The newest ``keep`` releases of one channel that offer at least one wanted arch."""
    usable = [release for release in releases if release.arches & policy.arches]
    usable.sort(key=lambda release: release.version, reverse=True)
    return usable[: policy.keep]


def select_drivers(
    drivers: Iterable[DriverRelease], policy: DriverPolicy, arches: frozenset[Arch]
) -> list[DriverRelease]:
    """The newest ``keep`` versions of each selected branch that offer a wanted arch.

    As for Flatcar releases, a driver without any wanted arch does not use up ``keep``.
    """
    by_branch: dict[str, list[DriverRelease]] = {}
    for driver in drivers:
        if not driver.arches & arches:
            continue
        if driver.branch in policy.branches or driver.branch_type in policy.branch_types:
            by_branch.setdefault(driver.branch, []).append(driver)
    selected: list[DriverRelease] = []
    for branch_drivers in by_branch.values():
        branch_drivers.sort(key=lambda driver: driver.version, reverse=True)
        selected.extend(branch_drivers[: policy.keep])
    selected.sort(key=lambda driver: driver.version, reverse=True)
    return selected


def plan_targets(
    policy: Policy,
    flatcar_by_channel: Mapping[str, Iterable[FlatcarRelease]],
    drivers: Iterable[DriverRelease],
) -> list[Target]:
    """Every image that must exist, ordered newest Flatcar first, then newest driver.

    A release listed by two configured feeds (``lts`` and ``lts-2024``) is one target.
    Arches are what the release lists, the driver lists and the configuration wants, all
    three; a pair with no arch in common is no target.
    """
    chosen: dict[str, FlatcarRelease] = {}
    for channel in policy.flatcar.channels:
        for release in select_flatcar_releases(flatcar_by_channel.get(channel, ()), policy.flatcar):
            chosen.setdefault(release.version.text, release)
    selected_drivers = select_drivers(drivers, policy.drivers, policy.flatcar.arches)
    targets: list[Target] = []
    for release in sorted(chosen.values(), key=lambda release: release.version, reverse=True):
        for driver in selected_drivers:
            arches = release.arches & driver.arches & policy.flatcar.arches
            if arches:
                targets.append(Target.of(driver, release, arches, _CHANNEL))
    return targets


def skip_incompatible(
    targets: Iterable[Target], pairs: Sequence[IncompatiblePair]
) -> tuple[list[Target], list[str]]:
    """``targets`` without the known-incompatible pairs, and one line per target skipped
    saying why (``plan`` shows them as warnings)."""
    kept: list[Target] = []
    skipped: list[str] = []
    for target in targets:
        pair = next((pair for pair in pairs if pair.matches(target)), None)
        if pair is None:
            kept.append(target)
            continue
        skipped.append(
            f"{target.tag} skipped: NVIDIA {target.driver_version.text} does not build for"
            f" kernel {target.kernel} (nvidia.incompatible lists {str(pair)!r})"
        )
    return kept, skipped
