"""The target rows a store keeps between reads (``StateStore.forget``, ``store/targetcache``).

On every backend: whatever the store writes, and whatever another store on the same
database writes, is what the next read returns, whatever was read before. On the SQL
backends: a read that finds the counter where it was decodes no row, one after a change
decodes only the changed rows, and an edit behind the store's back (SQL by hand) is seen
once ``forget`` was called (the cycle's full pass), not before.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import Row, text

from releasebot.domain.ports import StateStore
from releasebot.domain.targets.models import Target, TargetRecord, TargetState
from releasebot.store import sql
from releasebot.store.sql import SqlStateStore
from tests.contract.conftest import Backend
from tests.contract.test_store_contract import driver, flatcar, plan


def targets(count: int) -> list[Target]:
    """``count`` planned targets, in tag order: one driver on as many Flatcar releases."""
    return [plan(driver(), flatcar(f"4593.2.{n}")) for n in range(count)]


T0 = datetime(2026, 12, 3, 8, 0, tzinfo=UTC)


@pytest.fixture
def store(backend: Backend) -> StateStore:
    return backend.store


def states(store: StateStore) -> dict[str, TargetState]:
    return {record.tag: record.state for record in store.targets()}


def test_what_the_store_writes_is_read_back_after_a_kept_read(store: StateStore) -> None:
    first, second = store.sync_targets(targets(2), T0)
    assert set(states(store).values()) == {TargetState.UNKNOWN}  # kept now
    published = replace(first, state=TargetState.PUBLISHED, updated_at=T0)
    store.save(targets=[published])
    assert states(store) == {first.tag: TargetState.PUBLISHED, second.tag: TargetState.UNKNOWN}
    assert store.targets(state=TargetState.PUBLISHED) == [published]
    # Dropped from the plan: kept, no longer required.
    store.sync_targets(targets(2)[1:], T0 + timedelta(minutes=1))
    assert [record.tag for record in store.targets()] == [second.tag]
    everything = store.targets(required_only=False)
    assert {record.tag: record.required for record in everything} == {
        first.tag: False,
        second.tag: True,
    }


def test_another_store_on_the_same_database_is_seen(sql_backend: Backend) -> None:
    """SQL only: the memory store is one process's own state."""
    backend = sql_backend
    assert backend.engine is not None
    mine = backend.store
    theirs = SqlStateStore(backend.engine)  # another process, another replica
    [record] = mine.sync_targets(targets(1), T0)
    assert states(mine) == {record.tag: TargetState.UNKNOWN}
    theirs.save(targets=[replace(record, state=TargetState.MISSING, updated_at=T0)])
    assert states(mine) == {record.tag: TargetState.MISSING}
    # sync_targets reads what it diffs against inside its own transaction, kept or not.
    [synced] = mine.sync_targets(targets(1), T0)
    assert synced.state is TargetState.MISSING


def test_forget_changes_nothing_a_read_returns(store: StateStore) -> None:
    records = store.sync_targets(targets(3), T0)
    before = store.targets()
    store.forget()
    assert store.targets() == before == sorted(records, key=lambda r: r.tag)


class Counting:
    """The store's row decoder, counting the rows it decodes."""

    def __init__(self) -> None:
        self.tags: list[str] = []

    def __call__(self, row: Row[Any]) -> TargetRecord:
        self.tags.append(row.tag)
        return decode(row)


decode = sql._target_record


@pytest.fixture
def counted(
    sql_backend: Backend, monkeypatch: pytest.MonkeyPatch
) -> tuple[SqlStateStore, Counting]:
    counting = Counting()
    monkeypatch.setattr(sql, "_target_record", counting)
    assert sql_backend.engine is not None
    return SqlStateStore(sql_backend.engine), counting


def test_a_row_is_decoded_once_until_it_changes(counted: tuple[SqlStateStore, Counting]) -> None:
    store, decoded = counted
    records = store.sync_targets(targets(3), T0)
    assert len(decoded.tags) == 0  # a new table: nothing to decode, the plan is the records
    store.targets()
    assert sorted(decoded.tags) == sorted(record.tag for record in records)
    decoded.tags.clear()
    store.targets()
    store.targets(required_only=False)
    store.sync_targets(targets(3), T0 + timedelta(minutes=5))
    assert decoded.tags == []
    changed = replace(records[1], state=TargetState.PUBLISHED, updated_at=T0)
    store.save(targets=[changed])
    assert store.targets()[1] == changed
    assert decoded.tags == [changed.tag]


def test_an_edit_behind_the_stores_back_is_seen_after_forget(
    sql_backend: Backend,
) -> None:
    assert sql_backend.engine is not None
    store = sql_backend.store
    [record] = store.sync_targets(targets(1), T0)
    assert states(store) == {record.tag: TargetState.UNKNOWN}
    with sql_backend.engine.begin() as conn:
        conn.execute(text("UPDATE targets SET state = 'failed' WHERE tag = :t"), {"t": record.tag})
    # No counter moved: the kept row is still what is read (the limit the full pass covers).
    assert states(store) == {record.tag: TargetState.UNKNOWN}
    store.forget()
    assert states(store) == {record.tag: TargetState.FAILED}
