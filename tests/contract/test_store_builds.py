"""The ``StateStore`` contract for builds: target status and build rows, on every backend.

Covers ``save`` (status fields only, one transaction, upserted builds), ``builds`` filters,
``target`` lookups, that a replan keeps a target's build history, and that a failed
``save`` writes nothing.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from releasebot.domain.ports import StateStore
from releasebot.domain.shared.errors import StoreError
from releasebot.domain.shared.versions import Arch
from releasebot.domain.targets.builds import BuildRecord, BuildState, FailureReason
from releasebot.domain.targets.models import TargetRecord, TargetState
from tests.contract.test_store_contract import driver, flatcar, plan

T0 = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
DIGEST = "sha256:" + "a" * 64


def planned_target(store: StateStore) -> TargetRecord:
    [record] = store.sync_targets([plan(driver("580.178.04"), flatcar("4593.2.5"))], T0)
    return record


def build(record: TargetRecord, arch: Arch = Arch.AMD64, attempt: int = 1) -> BuildRecord:
    return BuildRecord(
        tag=record.tag,
        arch=arch,
        attempt=attempt,
        job_name=f"rb-job-{arch.value}-{attempt}",
        destination_tag=f"{record.tag}-{arch.value}",
        state=BuildState.LAUNCHING,
        created_at=T0,
    )


def test_a_new_target_has_no_build_history(store: StateStore) -> None:
    record = planned_target(store)
    assert record.state is TargetState.UNKNOWN
    assert record.attempts == 0
    assert record.digest is None
    assert store.target(record.tag) == record
    assert store.target("nope") is None
    assert store.builds() == []


def test_save_writes_status_and_builds_together(store: StateStore) -> None:
    record = planned_target(store)
    later = T0 + timedelta(minutes=1)
    building = replace(record, state=TargetState.BUILDING, attempts=1, updated_at=later)
    builds = [build(record, Arch.AMD64), build(record, Arch.ARM64)]
    store.save(targets=[building], builds=builds)
    stored = store.target(record.tag)
    assert stored is not None
    assert (stored.state, stored.attempts, stored.updated_at) == (TargetState.BUILDING, 1, later)
    assert [b.arch for b in store.builds(tag=record.tag)] == [Arch.AMD64, Arch.ARM64]
    assert len(store.builds(active_only=True)) == 2
    # Where the retry budget starts (a person's retry renews it) is kept with the status.
    store.save(targets=[replace(building, attempts=4, budget_start=3)])
    renewed = store.target(record.tag)
    assert renewed is not None
    assert (renewed.attempts, renewed.budget_start) == (4, 3)


def test_save_changes_only_status_fields(store: StateStore) -> None:
    record = planned_target(store)
    tampered = replace(
        record,
        target=replace(record.target, kernel="9.9.9"),
        state=TargetState.MISSING,
        required=False,
    )
    store.save(targets=[tampered])
    stored = store.target(record.tag)
    assert stored is not None
    assert stored.state is TargetState.MISSING
    assert stored.target.kernel == record.target.kernel
    assert stored.required is True


def test_builds_are_upserted_by_tag_arch_attempt(store: StateStore) -> None:
    record = planned_target(store)
    first = build(record)
    store.save(builds=[first])
    done = replace(
        first,
        state=BuildState.FAILED,
        reason=FailureReason.OOM_KILLED,
        message="x" * 5000,
        log_tail="line\n" * 2000,
        finished_at=T0 + timedelta(minutes=9),
    )
    store.save(builds=[done])
    [stored] = store.builds()
    assert stored.state is BuildState.FAILED
    assert stored.reason is FailureReason.OOM_KILLED
    assert stored.finished_at == T0 + timedelta(minutes=9)
    assert stored.log_tail is not None
    assert len(stored.log_tail) <= 4000
    assert stored.log_tail.endswith("line\n")
    assert stored.message is not None
    assert len(stored.message) <= 1000
    assert store.builds(active_only=True) == []


def test_published_target_keeps_digest_and_times(store: StateStore) -> None:
    record = planned_target(store)
    published = replace(
        record,
        state=TargetState.PUBLISHED,
        digest=DIGEST,
        published_at=T0 + timedelta(hours=1),
        next_attempt_at=None,
        last_error=None,
        updated_at=T0 + timedelta(hours=1),
    )
    store.save(targets=[published])
    stored = store.target(record.tag)
    assert stored is not None
    assert stored.digest == DIGEST
    assert stored.published_at == T0 + timedelta(hours=1)
    assert stored.published_at.tzinfo is UTC


def test_a_replan_keeps_the_build_history(store: StateStore) -> None:
    record = planned_target(store)
    store.save(targets=[replace(record, state=TargetState.RETRYING, attempts=2, last_error="oom")])
    moved = replace(plan(driver("580.178.04"), flatcar("4593.2.5", kernel="6.12.103")))
    [replanned] = store.sync_targets([moved], T0 + timedelta(days=1))
    assert replanned.target.kernel == "6.12.103"
    assert (replanned.state, replanned.attempts, replanned.last_error) == (
        TargetState.RETRYING,
        2,
        "oom",
    )


def test_a_build_for_an_unknown_target_writes_nothing(store: StateStore) -> None:
    record = planned_target(store)
    orphan = replace(build(record), tag="580.1.1-flatcar1.2.3", job_name="rb-orphan")
    building = replace(record, state=TargetState.BUILDING)
    with pytest.raises(StoreError):
        store.save(targets=[building], builds=[build(record), orphan])
    stored = store.target(record.tag)
    assert stored is not None
    assert stored.state is TargetState.UNKNOWN
    assert store.builds() == []
