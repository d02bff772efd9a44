"""``diff_targets``: what syncing a plan inserts, updates and returns, without any store.

Both stores apply this one function, so the cases live here once: new, unchanged and
changed targets, targets that drop out of the plan or come back, hand-asked (not required)
targets, and a plan that names a tag twice. ``requested_target`` is the hand-asked record.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, date, datetime, timedelta

import pytest

from releasebot.domain.shared.versions import Arch, DriverVersion, FlatcarVersion
from releasebot.domain.targets.diff import diff_targets, requested_target
from releasebot.domain.targets.models import (
    DriverRelease,
    FlatcarRelease,
    Target,
    TargetReason,
    TargetRecord,
    TargetState,
)

T0 = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
LATER = T0 + timedelta(hours=1)
ARCHES = frozenset({Arch.AMD64, Arch.ARM64})


def planned(flatcar: str = "4593.2.5", *, kernel: str = "6.12.102") -> Target:
    driver = DriverRelease(
        version=DriverVersion.parse("580.105.08"),
        branch="580",
        branch_type="production branch",
        arches=ARCHES,
        released_on=date(2026, 10, 2),
        runfile_urls=(),
        content_sha256="d",
    )
    release = FlatcarRelease(
        version=FlatcarVersion.parse(flatcar),
        channel="stable",
        arches=ARCHES,
        kernel=kernel,
        released_at=None,
        content_sha256="f",
    )
    return Target.of(driver, release, ARCHES)


def stored(*targets: TargetRecord) -> dict[str, TargetRecord]:
    return {target.tag: target for target in targets}


def test_new_targets_are_inserted_as_required_in_plan_order() -> None:
    plan = [planned("4593.2.5"), planned("4459.2.1")]
    diff = diff_targets({}, plan, T0)
    assert [record.tag for record in diff.result] == [target.tag for target in plan]
    assert diff.inserts == diff.result
    assert diff.updates == ()
    assert all(r.required and r.state is TargetState.UNKNOWN for r in diff.result)
    assert all(r.first_planned_at == r.updated_at == T0 for r in diff.result)


def test_an_unchanged_target_is_returned_as_stored_and_not_written() -> None:
    old = replace(TargetRecord.new(planned(), now=T0), state=TargetState.PUBLISHED, digest="d")
    diff = diff_targets(stored(old), [planned()], LATER)
    assert diff.result == (old,)
    assert (diff.inserts, diff.updates) == ((), ())


def test_a_changed_target_keeps_its_state_and_history() -> None:
    old = replace(TargetRecord.new(planned(), now=T0), state=TargetState.RETRYING, attempts=2)
    diff = diff_targets(stored(old), [planned(kernel="6.12.103")], LATER)
    [record] = diff.result
    assert diff.updates == (record,)
    assert diff.inserts == ()
    assert (record.target.kernel, record.state, record.attempts) == (
        "6.12.103",
        TargetState.RETRYING,
        2,
    )
    assert (record.first_planned_at, record.updated_at) == (T0, LATER)


def test_a_new_reason_is_written_and_keeps_the_state() -> None:
    old = replace(TargetRecord.new(planned(), now=T0), state=TargetState.PUBLISHED, digest="d")
    why = frozenset({TargetReason.CHANNEL, TargetReason.PENDING_REBOOT})
    diff = diff_targets(stored(old), [replace(planned(), reasons=why)], LATER)
    [record] = diff.result
    assert diff.updates == (record,)
    assert (record.target.reasons, record.state, record.digest) == (why, TargetState.PUBLISHED, "d")
    assert record.target.reason_text == "pending-reboot,channel"


def test_a_required_target_that_drops_out_is_kept_as_not_required() -> None:
    kept, dropped = (TargetRecord.new(planned(v), now=T0) for v in ("4593.2.5", "4459.2.1"))
    diff = diff_targets(stored(kept, dropped), [planned("4593.2.5")], LATER)
    assert diff.result == (kept,)
    assert diff.updates == (replace(dropped, required=False, updated_at=LATER),)


def test_a_not_required_target_is_left_alone_or_becomes_required_when_planned() -> None:
    hand = requested_target(planned("4459.2.1"), T0)
    assert hand.required is False
    assert diff_targets(stored(hand), [], LATER) == diff_targets({}, [], LATER)

    diff = diff_targets(stored(hand), [planned("4459.2.1")], LATER)
    [record] = diff.result
    assert diff.updates == (record,)
    assert (record.required, record.first_planned_at, record.updated_at) == (True, T0, LATER)


def test_a_plan_naming_a_tag_twice_is_refused() -> None:
    with pytest.raises(ValueError, match="twice"):
        diff_targets({}, [planned(), planned()], T0)
