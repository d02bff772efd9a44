"""Retention's decision (``domain.fleet.retention``): what may be deleted, and why the rest stays.

Every rule is checked on its own against the same baseline (one release long gone from
every feed, nothing using it, which IS deleted), so each test proves that its one fact is
what keeps the tag: a GPU node running the version, FLUO's pending version, a node seen
running it recently, a feed listing it, a feed that dropped it recently, a current target,
a version no feed ever listed. An unsure fleet view (not listed, a GPU node without a
readable version, an unreadable pending version) deletes nothing. Tags of other shapes
and signing's attachment tags are never candidates; digests shared with kept tags stay.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from releasebot.domain.fleet.nodes import FLUO_NEW_VERSION, ParsedNode, parse_node
from releasebot.domain.fleet.records import FleetObservation, FleetRecord
from releasebot.domain.fleet.retention import (
    Listing,
    RetentionInputs,
    RetentionPlan,
    guard_shared_digests,
    parse_own_tag,
    plan_retention,
)
from releasebot.domain.targets.models import TargetRecord
from tests.support.fleetnodes import gpu_node, ubuntu_gpu_node
from tests.support.targets import make_target

NOW = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)
LONG_AGO = NOW - timedelta(days=90)
OLD = "580.105.08-flatcar4230.2.4"
"""The baseline: Flatcar 4230.2.4 left the stable feed 90 days ago; nothing uses it."""
CURRENT = "580.178.04-flatcar4593.2.5"


def listing(version: str, *, present: bool = False, at: datetime = LONG_AGO) -> Listing:
    return Listing("stable", version, present, at)


BASE_LISTINGS = (listing("4230.2.4"), listing("4593.2.5", present=True, at=NOW))


def nodes(*raws: dict[str, Any]) -> tuple[ParsedNode, ...]:
    return tuple(parse_node(raw) for raw in raws)


def target(tag: str) -> TargetRecord:
    driver, flatcar = tag.split("-flatcar")
    return TargetRecord.new(make_target(driver=driver, flatcar=flatcar), now=NOW)


def decide(
    tags: tuple[str, ...] = (OLD, CURRENT),
    *,
    fleet: tuple[ParsedNode, ...] | None = (),
    listings: tuple[Listing, ...] = BASE_LISTINGS,
    targets: tuple[TargetRecord, ...] = (),
    history: tuple[FleetRecord, ...] = (),
    **options: Any,
) -> RetentionPlan:
    inputs = RetentionInputs(
        tags=tags,
        nodes=fleet,
        listings=listings,
        targets=targets,
        history=history,
        fleet_problem="kubernetes: unreachable" if fleet is None else None,
    )
    return plan_retention(inputs, now=NOW, **options)


def alone(digests: dict[str, str | None]) -> dict[str, frozenset[str]]:
    """Each digest reaching only itself: images with nothing attached."""
    return {d: frozenset({d}) for d in digests.values() if d is not None}


def deleted(plan: RetentionPlan) -> list[str]:
    return [deletion.tag for deletion in plan.delete]


def kept(plan: RetentionPlan) -> dict[str, str]:
    return {k.tag: k.reason for k in plan.keep}


def test_the_baseline_deletes_the_release_gone_from_every_feed_and_keeps_the_listed_one() -> None:
    plan = decide()
    assert deleted(plan) == [OLD]
    assert "left every feed on 2026-09-03" in plan.delete[0].reason
    assert kept(plan) == {CURRENT: "the stable feed lists it"}
    assert plan.held is None


def test_never_deletes_the_version_a_gpu_node_runs() -> None:
    plan = decide(fleet=nodes(gpu_node("gpu-0", "4230.2.4")))
    assert deleted(plan) == []
    assert kept(plan)[OLD] == "GPU node gpu-0 runs it"


def test_never_deletes_the_version_a_gpu_node_will_reboot_into() -> None:
    fleet = nodes(gpu_node("gpu-0", "4593.2.5", pending="4230.2.4"))
    plan = decide(fleet=fleet)
    assert deleted(plan) == []
    assert kept(plan)[OLD] == "GPU node gpu-0 will reboot into it"


def test_a_node_without_a_gpu_keeps_nothing() -> None:
    plan = decide(fleet=nodes(gpu_node("cpu-0", "4230.2.4", gpu=False)))
    assert deleted(plan) == [OLD]


def test_a_gpu_node_seen_on_the_version_within_the_period_keeps_it() -> None:
    seen = FleetObservation("gpu-gone", "4230.2.4", None, "amd64", True, None, None)
    recent = FleetRecord(seen, LONG_AGO, NOW - timedelta(days=3))
    assert kept(decide(history=(recent,)))[OLD] == "GPU node gpu-gone ran it on 2026-11-29"
    stale = replace(recent, last_seen_at=NOW - timedelta(days=31))
    assert deleted(decide(history=(stale,))) == [OLD]


def test_never_deletes_a_tag_of_a_tracked_channel() -> None:
    listings = (listing("4230.2.4"), Listing("lts", "4230.2.4", True, NOW))
    plan = decide(listings=(*listings, *BASE_LISTINGS[1:]))
    assert deleted(plan) == []
    assert kept(plan)[OLD] == "the lts feed lists it"


@pytest.mark.parametrize("days", [1, 29, 30])
def test_a_release_that_left_its_feed_recently_is_kept(days: int) -> None:
    left = listing("4230.2.4", at=NOW - timedelta(days=days))
    plan = decide(listings=(left, *BASE_LISTINGS[1:]))
    assert deleted(plan) == []
    assert "30 days not yet passed" in kept(plan)[OLD]


def test_the_period_is_a_setting() -> None:
    left = listing("4230.2.4", at=NOW - timedelta(days=10))
    assert deleted(decide(listings=(left, *BASE_LISTINGS[1:]), after=timedelta(days=7))) == [OLD]


def test_never_deletes_a_current_target() -> None:
    plan = decide(targets=(target(OLD),))
    assert deleted(plan) == []
    assert kept(plan)[OLD] == f"a current target ({OLD})"


def test_a_per_arch_tag_follows_its_target() -> None:
    tags = (OLD, f"{OLD}-amd64", f"{OLD}-arm64", CURRENT, f"{CURRENT}-arm64")
    assert deleted(decide(tags)) == [OLD, f"{OLD}-amd64", f"{OLD}-arm64"]
    plan = decide(tags, targets=(target(OLD),))
    assert deleted(plan) == []
    assert kept(plan)[f"{OLD}-arm64"] == f"a current target ({OLD})"


def test_a_version_no_feed_ever_listed_is_kept() -> None:
    private = "580.105.08-flatcar9999.0.0"
    plan = decide((private,))
    assert deleted(plan) == []
    assert kept(plan)[private] == "no Flatcar feed releasebot reads ever listed 9999.0.0"


def test_tags_of_other_shapes_and_attachments_are_never_considered() -> None:
    others = ("latest", "sha256-" + "a" * 64 + ".sig", "sha256-" + "b" * 64, "580-flatcar1.2")
    plan = decide((OLD, *others))
    assert deleted(plan) == [OLD]
    assert set(kept(plan)) == set()
    assert plan.foreign == len(others)


def test_an_unlisted_fleet_deletes_nothing_and_says_why() -> None:
    plan = decide(fleet=None)
    assert deleted(plan) == []
    assert plan.held is not None
    assert "the fleet could not be listed (kubernetes: unreachable)" in plan.held
    assert set(kept(plan)) == {OLD, CURRENT}


def test_a_gpu_node_with_an_unknown_version_deletes_nothing() -> None:
    raw = gpu_node("gpu-odd", "4593.2.5")
    labels = raw["metadata"]["labels"]
    labels["feature.node.kubernetes.io/system-os_release.VERSION_ID"] = "garbage"
    raw["status"]["nodeInfo"]["osImage"] = "Flatcar Container Linux by Kinvolk (Oklo)"
    plan = decide(fleet=nodes(raw, gpu_node("gpu-0", "4593.2.5")))
    assert deleted(plan) == []
    assert plan.held is not None
    assert "GPU node gpu-odd" in plan.held


def test_a_gpu_node_with_an_unreadable_pending_version_deletes_nothing() -> None:
    raw = gpu_node("gpu-0", "4593.2.5")
    raw["metadata"]["annotations"][FLUO_NEW_VERSION] = "4230.2.x"
    plan = decide(fleet=nodes(raw))
    assert deleted(plan) == []
    assert plan.held is not None
    assert "FLUO new-version" in plan.held


def test_a_gpu_node_on_another_os_is_no_doubt() -> None:
    assert deleted(decide(fleet=nodes(ubuntu_gpu_node("gpu-ubuntu")))) == [OLD]


def test_a_run_deletes_at_most_its_limit() -> None:
    tags = tuple(f"580.105.{n:02d}-flatcar4230.2.4" for n in range(5))
    plan = decide(tags, max_deletions=2)
    assert len(plan.delete) == 2
    assert sum("limit of 2 deletions" in reason for reason in kept(plan).values()) == 3


def test_a_digest_shared_with_a_kept_tag_is_kept() -> None:
    plan = decide((OLD, "580.105.08-flatcar4230.2.3", CURRENT, "latest"))
    digests = {
        OLD: "sha256:" + "1" * 64,
        CURRENT: "sha256:" + "2" * 64,
        "latest": "sha256:" + "1" * 64,
    }
    digests["580.105.08-flatcar4230.2.3"] = None  # listed, then deleted by somebody else
    guarded = guard_shared_digests(plan, digests, alone(digests))
    assert deleted(guarded) == []
    assert kept(guarded)[OLD] == "shares its digest with kept tag latest"
    assert (
        kept(guarded)["580.105.08-flatcar4230.2.3"]
        == "no Flatcar feed releasebot reads ever listed 4230.2.3"
    )
    del digests["latest"]
    assert [
        (d.tag, d.digest) for d in guard_shared_digests(plan, digests, alone(digests)).delete
    ] == [(OLD, "sha256:" + "1" * 64)]


def digest_of(name: str) -> str:
    return "sha256:" + name.encode().hex().ljust(64, "0")[:64]


OLD_D, CURRENT_D = digest_of("old"), digest_of("current")


@pytest.mark.parametrize("what", ["index image", "signature", "attestation", "referrer", "deep"])
def test_everything_a_kept_tag_reaches_is_protected_before_anything_is_deleted(
    what: str,
) -> None:
    """A kept tag's images, signatures, attestations and referrers (and what THEY reach)
    are protected, so no attachment delete of a deleted tag may touch them."""
    plan = decide()
    reached = digest_of(what)
    digests: dict[str, str | None] = {OLD: OLD_D, CURRENT: CURRENT_D}
    middle = digest_of("middle")
    reaches = {OLD_D: frozenset({OLD_D}), CURRENT_D: frozenset({CURRENT_D, middle, reached})}
    guarded = guard_shared_digests(plan, digests, reaches)
    assert deleted(guarded) == [OLD]
    assert {CURRENT_D, middle, reached} <= guarded.protected
    assert OLD_D not in guarded.protected


def test_a_candidate_a_kept_tag_reaches_is_kept() -> None:
    """A deleted tag whose manifest is an image of a kept index (or a kept tag's
    attachment) would break the kept tag: it stays."""
    digests: dict[str, str | None] = {OLD: OLD_D, CURRENT: CURRENT_D}
    reaches = {OLD_D: frozenset({OLD_D}), CURRENT_D: frozenset({CURRENT_D, OLD_D})}
    guarded = guard_shared_digests(decide(), digests, reaches)
    assert deleted(guarded) == []
    assert kept(guarded)[OLD].startswith(f"kept tag {CURRENT} reaches its manifest")
    assert OLD_D in guarded.protected


def test_a_candidate_kept_protects_what_it_reaches_in_turn() -> None:
    """Kept for sharing a digest, a candidate's own signatures become protected, and a
    third candidate they are the manifest of is kept too (until nothing changes)."""
    first, second = "580.105.08-flatcar4230.2.4", "580.105.08-flatcar4230.2.3"
    plan = decide(
        (first, second, CURRENT, "latest"), listings=(*BASE_LISTINGS, listing("4230.2.3"))
    )
    assert sorted(deleted(plan)) == [second, first]
    shared, sig = digest_of("shared"), digest_of("sig")
    digests: dict[str, str | None] = {
        first: shared,
        "latest": shared,
        second: sig,
        CURRENT: CURRENT_D,
    }
    reaches = {
        shared: frozenset({shared, sig}),
        sig: frozenset({sig}),
        CURRENT_D: frozenset({CURRENT_D}),
    }
    guarded = guard_shared_digests(plan, digests, reaches)
    assert deleted(guarded) == []
    assert kept(guarded)[first] == "shares its digest with kept tag latest"
    assert kept(guarded)[second].startswith("kept tag ")
    assert {shared, sig, CURRENT_D} <= guarded.protected


def test_a_digest_whose_reach_is_not_known_deletes_nothing() -> None:
    digests: dict[str, str | None] = {OLD: OLD_D, CURRENT: CURRENT_D}
    guarded = guard_shared_digests(decide(), digests, {OLD_D: frozenset({OLD_D})})
    assert deleted(guarded) == []
    assert guarded.held is not None
    assert CURRENT in guarded.held
    assert "deleting nothing" in kept(guarded)[OLD]


def test_a_tag_gone_before_the_delete_is_not_deleted() -> None:
    digests: dict[str, str | None] = {OLD: None, CURRENT: "sha256:" + "2" * 64}
    guarded = guard_shared_digests(decide(), digests, alone(digests))
    assert deleted(guarded) == []
    assert kept(guarded)[OLD] == "the registry no longer has the tag"


@pytest.mark.parametrize(
    ("tag", "own"),
    [
        ("580.105.08-flatcar4230.2.4", True),
        ("580.105.08-flatcar4230.2.4-arm64", True),
        ("580.105.08-flatcar4230.2.4-s390x", False),
        ("580.105.08-flatcar4230.2", False),
        ("v580.105.08-flatcar4230.2.4", False),
        ("580.105.08-flatcar4230.2.4.1", False),
    ],
)
def test_own_tag_shape(tag: str, own: bool) -> None:
    assert (parse_own_tag(tag) is not None) is own


def test_a_refusal_after_a_deletion_shows_the_deletion_as_deleted() -> None:
    from io import StringIO

    from releasebot.cli.retention import print_report
    from releasebot.domain.fleet.retention import Deletion, DeletionRecord, RetentionPlan
    from releasebot.domain.shared.versions import FlatcarVersion
    from releasebot.service.retention import RetentionReport

    first, second = "580.105.08-flatcar4230.2.4", "580.105.08-flatcar4230.2.3"
    digest = "sha256:" + "1" * 64
    plan = RetentionPlan(
        delete=tuple(
            Deletion(tag, FlatcarVersion.parse(tag.rsplit("flatcar", 1)[1]), "left", digest)
            for tag in (first, second)
        ),
        keep=(),
    )
    done = DeletionRecord(first, digest, "4230.2.4", "left", NOW, 0)
    report = RetentionReport(plan, applied=True, deleted=[done], refused="refuses deletes")
    out = StringIO()
    print_report(report, out)
    lines = out.getvalue().splitlines()
    assert lines[0].split()[:2] == ["deleted", first]
    assert lines[2].split()[:3] == ["not", "deleted", second]
    assert lines[-1] == "1 tag(s) deleted, 1 not deleted (the registry refuses deletes), 0 kept"
    assert "would delete" not in out.getvalue()
