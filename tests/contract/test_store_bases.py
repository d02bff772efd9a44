"""Driver bases in the store (``StateStore.bases``/``save_bases``), on every backend.

The memory store, SQLite and PostgreSQL keep the same base the same way: every field
round-trips (times as aware UTC), an upsert by tag replaces the attempt, the targets' status
and the outbox event are written in the same transaction, a Job's log tail and message are
masked as every stored text is, the ``driver_bases`` counter moves with each write, and a
row whose fields do not make its tag is one clear ``StoreError``. The dry-run store reads
the real one and keeps its own writes to itself.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import text

from releasebot.domain.ports import StateStore
from releasebot.domain.shared.errors import StoreError
from releasebot.domain.shared.versions import Arch, DriverVersion
from releasebot.domain.targets.base_tags import BaseSpec
from releasebot.domain.targets.bases import BaseRecord, BaseState, base_failed_event
from releasebot.domain.targets.builds import FailureReason
from releasebot.domain.targets.models import TargetRecord, TargetState
from releasebot.store.dryrun import DryRunStore
from tests.contract.conftest import Backend
from tests.contract.test_store_contract import driver, flatcar, plan
from tests.support.leaks import LEAK, SECRETS

T0 = datetime(2026, 12, 3, 8, 0, tzinfo=UTC)
SPEC = BaseSpec(
    DriverVersion.parse("580.95.05"),
    "580",
    Arch.AMD64,
    "0123456789ab",
    (("RUNTIME_IMAGE", "debian:13.1-slim@sha256:" + "a" * 64),),
)


def base(**changes: object) -> BaseRecord:
    record = BaseRecord(
        SPEC,
        BaseState.RUNNING,
        created_at=T0,
        updated_at=T0 + timedelta(seconds=1),
        attempts=2,
        budget_start=1,
        failures=1,
        job_name="rb-580-95-05-base-amd64-1234abcd-amd64-2",
        started_at=T0 + timedelta(seconds=2),
        next_attempt_at=T0 + timedelta(minutes=5),
    )
    return replace(record, **changes)  # type: ignore[arg-type]


@pytest.fixture
def store(backend: Backend) -> StateStore:
    return backend.store


def test_a_new_store_has_no_bases(store: StateStore) -> None:
    assert store.bases() == []


def test_a_base_round_trips_every_field(store: StateStore) -> None:
    published = base(
        state=BaseState.PUBLISHED,
        digest="sha256:" + "b" * 64,
        published_at=T0 + timedelta(minutes=9),
        reason=FailureReason.OOM_KILLED,
        last_error="OOMKilled: an earlier attempt",
        log_tail="line one\nline two",
    )
    store.save_bases(bases=[published])
    [stored] = store.bases()
    assert stored == published
    assert stored.updated_at.tzinfo is not None
    assert stored.updated_at.utcoffset() == timedelta(0)


def test_a_base_is_upserted_by_tag_and_listed_by_tag(store: StateStore) -> None:
    other = replace(SPEC, arch=Arch.ARM64)
    store.save_bases(bases=[base(), base(spec=other)])
    store.save_bases(bases=[base(state=BaseState.FAILED, attempts=3)])
    listed = store.bases()
    assert [record.tag for record in listed] == sorted([SPEC.tag, other.tag])
    assert {record.tag: record.state for record in listed} == {
        SPEC.tag: BaseState.FAILED,
        other.tag: BaseState.RUNNING,
    }


def test_the_base_its_targets_and_its_event_are_one_transaction(store: StateStore) -> None:
    [record] = store.sync_targets([plan(driver(), flatcar())], T0)
    waiting = replace(
        record, state=TargetState.WAITING, last_error=f"waiting for driver base {SPEC.tag}"
    )
    failed = base(state=BaseState.FAILED, last_error="NonZeroExit: make failed")
    store.save_bases(bases=[failed], targets=[waiting], events=[base_failed_event(failed, T0)])
    assert store.bases() == [failed]
    stored = store.target(record.tag)
    assert stored is not None
    assert (stored.state, stored.last_error) == (TargetState.WAITING, waiting.last_error)
    [event] = store.pending_events(T0 + timedelta(hours=1))
    assert (event.event.kind.value, event.event.subject) == ("base_failed", SPEC.tag)


def test_a_jobs_texts_are_stored_masked(store: StateStore) -> None:
    store.save_bases(bases=[base(last_error=f"push failed: {LEAK}", log_tail=f"auth {LEAK}\nend")])
    [stored] = store.bases()
    kept = f"{stored.last_error} {stored.log_tail}"
    assert not [secret for secret in SECRETS if secret in kept]
    assert "***" in kept


def test_each_write_moves_the_bases_counter(store: StateStore) -> None:
    before = store.revisions().get("driver_bases", 0)
    store.save_bases(bases=[base()])
    after = store.revisions().get("driver_bases", 0)
    assert after > before
    store.bases()
    assert store.revisions().get("driver_bases", 0) == after  # a read moves nothing
    store.save_bases()  # nothing to write: nothing moves
    assert store.revisions().get("driver_bases", 0) == after


def test_a_row_whose_fields_do_not_make_its_tag_is_one_clear_error(
    sql_backend: Backend,
) -> None:
    store, engine = sql_backend.store, sql_backend.engine
    assert engine is not None
    store.save_bases(bases=[base()])
    with engine.begin() as conn:
        conn.execute(text("UPDATE driver_bases SET arch = 'arm64'"))
    with pytest.raises(StoreError, match="driver_bases"):
        store.bases()


def test_the_dry_run_store_reads_through_and_writes_to_itself(store: StateStore) -> None:
    store.save_bases(bases=[base()])
    dry = DryRunStore(store)
    changed = base(state=BaseState.LAUNCHING, attempts=3)
    other = base(spec=replace(SPEC, arch=Arch.ARM64))
    dry.save_bases(bases=[changed, other])
    assert {r.tag: r.attempts for r in dry.bases()} == {SPEC.tag: 3, other.spec.tag: 2}
    assert store.bases() == [base()]  # the real store is untouched


def test_saving_bases_keeps_targets_written_only_as_save_does(store: StateStore) -> None:
    # A target the store does not know is not written by save_bases either (an UPDATE).
    unknown = TargetRecord.new(plan(driver(), flatcar()), now=T0)
    store.save_bases(bases=[base()], targets=[unknown])
    assert store.targets() == []
    assert len(store.bases()) == 1
