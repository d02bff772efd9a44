"""The selection policy: newest N per channel x newest N per branch, arches intersected."""

from __future__ import annotations

from datetime import UTC, datetime

from releasebot.domain.shared.versions import Arch, DriverVersion, FlatcarVersion
from releasebot.domain.targets.models import DriverRelease, FlatcarRelease
from releasebot.domain.targets.policy import (
    DriverPolicy,
    FlatcarPolicy,
    IncompatiblePair,
    Policy,
    is_flatcar_channel,
    plan_targets,
    select_drivers,
    skip_incompatible,
)
from tests.support.targets import make_target

BOTH = frozenset({Arch.AMD64, Arch.ARM64})
AMD64 = frozenset({Arch.AMD64})


def flatcar(
    version: str, arches: frozenset[Arch] = BOTH, channel: str = "stable"
) -> FlatcarRelease:
    return FlatcarRelease(
        version=FlatcarVersion.parse(version),
        channel=channel,
        arches=arches,
        kernel="6.12.102",
        released_at=datetime(2026, 8, 13, tzinfo=UTC),
        content_sha256=version,
    )


def driver(
    version: str, branch_type: str = "lts branch", arches: frozenset[Arch] = BOTH
) -> DriverRelease:
    parsed = DriverVersion.parse(version)
    return DriverRelease(
        version=parsed,
        branch=parsed.branch,
        branch_type=branch_type,
        arches=arches,
        released_on=None,
        runfile_urls=(),
        content_sha256=version,
    )


def policy(
    channels: tuple[str, ...] = ("stable",),
    arches: frozenset[Arch] = AMD64,
    keep: int = 2,
    branches: frozenset[str] = frozenset({"580"}),
    branch_types: frozenset[str] = frozenset(),
    driver_keep: int = 1,
) -> Policy:
    return Policy(
        FlatcarPolicy(channels, arches, keep), DriverPolicy(branches, branch_types, driver_keep)
    )


def test_newest_keep_per_channel_times_newest_driver() -> None:
    stable = [flatcar("4593.2.4"), flatcar("4593.2.10"), flatcar("4593.2.5")]
    drivers = [driver("580.65.06"), driver("580.178.04"), driver("595.91.07", "production branch")]
    targets = plan_targets(policy(), {"stable": stable}, drivers)
    assert [t.tag for t in targets] == [
        "580.178.04-flatcar4593.2.10",
        "580.178.04-flatcar4593.2.5",
    ]
    assert all(frozenset(t.arches) == AMD64 for t in targets)


def test_arches_are_the_intersection_of_release_driver_and_config() -> None:
    stable = [flatcar("4593.2.5", BOTH), flatcar("4593.2.4", AMD64)]
    drivers = [driver("580.178.04", arches=BOTH)]
    targets = plan_targets(policy(arches=BOTH), {"stable": stable}, drivers)
    assert {t.tag: frozenset(t.arches) for t in targets} == {
        "580.178.04-flatcar4593.2.5": BOTH,
        "580.178.04-flatcar4593.2.4": AMD64,
    }


def test_releases_without_a_wanted_arch_do_not_use_up_keep() -> None:
    stable = [flatcar("4593.2.5", AMD64), flatcar("4593.2.4", BOTH), flatcar("4593.2.3", BOTH)]
    targets = plan_targets(
        policy(arches=frozenset({Arch.ARM64})), {"stable": stable}, [driver("580.178.04")]
    )
    assert [t.flatcar_version.text for t in targets] == ["4593.2.4", "4593.2.3"]


def test_driver_without_the_arch_gives_no_target() -> None:
    targets = plan_targets(
        policy(arches=frozenset({Arch.ARM64})),
        {"stable": [flatcar("4593.2.5")]},
        [driver("580.178.04", arches=AMD64)],
    )
    assert targets == []


def test_a_release_in_two_feeds_is_one_target() -> None:
    lts = [flatcar("4081.3.10", channel="lts"), flatcar("3510.3.8", channel="lts")]
    lts_2024 = [flatcar("4081.3.10", channel="lts"), flatcar("4081.3.9", channel="lts")]
    targets = plan_targets(
        policy(channels=("lts", "lts-2024")),
        {"lts": lts, "lts-2024": lts_2024},
        [driver("580.178.04")],
    )
    assert [(t.flatcar_version.text, t.flatcar_channel) for t in targets] == [
        ("4081.3.10", "lts"),
        ("4081.3.9", "lts"),
        ("3510.3.8", "lts"),
    ]


def test_branch_types_match_case_insensitively_lowered_at_the_edge() -> None:
    drivers = [
        driver("615.71.09", "new feature branch"),
        driver("595.91.07", "production branch"),
        driver("595.71.05", "production branch"),
        driver("460.106.00", "production branch"),
        driver("580.178.04", "lts branch"),
    ]
    chosen = select_drivers(
        drivers, DriverPolicy(frozenset(), frozenset({"production branch"}), keep=1), BOTH
    )
    assert [d.version.text for d in chosen] == ["595.91.07", "460.106.00"]
    chosen = select_drivers(
        drivers, DriverPolicy(frozenset({"580"}), frozenset({"production branch"}), keep=2), BOTH
    )
    assert [d.version.text for d in chosen] == [
        "595.91.07",
        "595.71.05",
        "580.178.04",
        "460.106.00",
    ]


def test_drivers_without_a_wanted_arch_do_not_use_up_keep() -> None:
    drivers = [driver("580.178.04", arches=AMD64), driver("580.173.02", arches=BOTH)]
    chosen = select_drivers(
        drivers, DriverPolicy(frozenset({"580"}), frozenset(), keep=1), frozenset({Arch.ARM64})
    )
    assert [d.version.text for d in chosen] == ["580.173.02"]


def test_missing_channel_data_plans_nothing_for_it() -> None:
    assert plan_targets(policy(channels=("beta",)), {}, [driver("580.178.04")]) == []


def test_channel_names() -> None:
    for name in ("stable", "beta", "alpha", "lts", "lts-2024", "lts-2021"):
        assert is_flatcar_channel(name)
    for name in ("edge", "LTS", "lts-24", "lts-2024x", "", "stable "):
        assert not is_flatcar_channel(name)


def test_known_incompatible_pairs_are_skipped_with_the_reason() -> None:
    old_kernel = make_target(driver="550.163.01", flatcar="4593.2.4", kernel="6.12.95")
    broken = make_target(driver="550.163.01", kernel="6.12.97")
    other_driver = make_target(driver="580.178.04", kernel="6.12.97")
    pairs = (IncompatiblePair.parse("550.*:6.12.97-flatcar"), IncompatiblePair.parse("535.*:*"))
    kept, skipped = skip_incompatible([old_kernel, broken, other_driver], pairs)
    assert kept == [old_kernel, other_driver]
    assert skipped == [
        f"{broken.tag} skipped: NVIDIA 550.163.01 does not build for kernel 6.12.97"
        " (nvidia.incompatible lists '550.*:6.12.97-flatcar')"
    ]
    # The kernel pattern matches the feed's kernel or uname -r; the driver its version.
    assert IncompatiblePair.parse(" 550.163.01:6.12.97 ").matches(broken)
    assert not IncompatiblePair.parse("550.16:6.12.97").matches(broken)
    assert skip_incompatible([broken], ()) == ([broken], [])
