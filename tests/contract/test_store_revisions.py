"""The store's change counters (``StateStore.revisions``), on every backend.

A counter must move whenever its table was written by the store, and must not move on a
read or on a write of another table: readers skip re-reading a table whose counter did not
move, so a write that moved nothing would be missed.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import text

from releasebot.domain.ports import StateStore
from releasebot.domain.shared.errors import StoreError
from releasebot.domain.shared.versions import Arch
from releasebot.domain.targets.builds import BuildRecord, BuildState
from releasebot.domain.targets.models import TargetRecord, TargetState, Validators
from releasebot.store.sql import SqlStateStore
from tests.contract.conftest import Backend
from tests.contract.test_store_contract import URL, driver, flatcar, plan

T0 = datetime(2026, 12, 3, 8, 0, tzinfo=UTC)
SEEN = Validators(etag='"v1"')


@pytest.fixture
def store(backend: Backend) -> StateStore:
    return backend.store


def moved(before: dict[str, int], after: dict[str, int]) -> set[str]:
    return {table for table in after if after[table] != before.get(table, 0)}


def test_a_new_store_has_no_counters(store: StateStore) -> None:
    assert store.revisions() == {}


def test_reads_move_nothing(store: StateStore) -> None:
    store.record_flatcar_feed("flatcar/stable", URL, [flatcar()], SEEN, T0)
    before = store.revisions()
    store.targets()
    store.feed_states()
    store.flatcar_releases("flatcar/stable")
    store.builds()
    store.flag("paused")
    assert store.revisions() == before


def test_each_write_moves_the_counters_of_what_it_wrote(store: StateStore) -> None:
    before = store.revisions()
    store.record_feed_unchanged("flatcar/stable", URL, SEEN, T0)
    assert moved(before, after := store.revisions()) == {"feeds"}

    target = plan(driver(), flatcar())
    store.sync_targets([target], T0)
    assert "targets" in moved(after, after2 := store.revisions())
    assert "feeds" not in moved(after, after2)

    record = store.targets()[0]
    store.save(targets=[replace(record, state=TargetState.MISSING)])
    assert moved(after2, after3 := store.revisions()) == {"targets"}

    store.set_flag("paused", "someone", T0)
    assert moved(after3, store.revisions()) == {"flags"}


def test_counters_only_grow(store: StateStore) -> None:
    target = plan(driver(), flatcar())
    values = []
    for minute in range(3):
        store.sync_targets([target], T0 + timedelta(minutes=minute))
        store.save(targets=[replace(store.targets()[0], last_error=f"try {minute}")])
        values.append(store.revisions()["targets"])
    assert values == sorted(values)
    assert len(set(values)) == 3


def test_a_failed_write_moves_nothing(sql_backend: Backend) -> None:
    store = sql_backend.store
    store.sync_targets([plan(driver(), flatcar())], T0)
    before = store.revisions()
    record = store.targets()[0]
    build = _build_for_unknown_target(record)
    with pytest.raises(StoreError):
        store.save(targets=[replace(record, last_error="x")], builds=[build])
    assert store.revisions() == before
    assert store.targets()[0].last_error is None  # and the target row was rolled back too


def test_an_edit_behind_the_stores_back_moves_nothing(sql_backend: Backend) -> None:
    """Why readers still read everything now and then: raw SQL is not counted."""
    store = sql_backend.store
    assert isinstance(store, SqlStateStore)
    assert sql_backend.engine is not None
    store.sync_targets([plan(driver(), flatcar())], T0)
    before = store.revisions()
    with sql_backend.engine.begin() as conn:
        conn.execute(text("UPDATE targets SET last_error = 'edited'"))
    assert store.revisions() == before


def test_two_stores_on_one_database_see_each_others_writes(sql_backend: Backend) -> None:
    assert sql_backend.engine is not None
    first = sql_backend.store
    second = SqlStateStore(sql_backend.engine)
    first.sync_targets([plan(driver(), flatcar())], T0)
    seen = second.revisions()
    first.save(targets=[replace(first.targets()[0], last_error="x")])
    assert second.revisions()["targets"] == seen["targets"] + 1


def _build_for_unknown_target(record: TargetRecord) -> BuildRecord:
    return BuildRecord(
        tag=record.tag + "-unknown",
        arch=Arch.AMD64,
        attempt=1,
        job_name="rb-none",
        destination_tag=record.tag + "-unknown",
        state=BuildState.RUNNING,
        created_at=T0,
    )


def test_a_write_of_many_tables_costs_at_most_three_statements_more(sql_backend: Backend) -> None:
    from tests.contract.test_store_contract import big_poll

    assert sql_backend.engine is not None
    flatcars, _drivers = big_poll()
    counted: list[str] = []

    def record(_conn: object, _cursor: object, statement: str, *_args: object) -> None:
        if "store_revisions" in statement.split():
            counted.append(statement.split()[0].upper())

    from sqlalchemy import event

    event.listen(sql_backend.engine, "before_cursor_execute", record)
    try:
        sql_backend.store.record_flatcar_feed("flatcar/stable", URL, flatcars, SEEN, T0)
        sql_backend.store.record_flatcar_feed("flatcar/stable", URL, flatcars[:10], SEEN, T0)
    finally:
        event.remove(sql_backend.engine, "before_cursor_execute", record)
    # first: read, insert three new counters; then: read, one update of the three
    assert counted == ["SELECT", "INSERT", "SELECT", "UPDATE"]
    assert set(sql_backend.store.revisions()) == {
        "feeds",
        "flatcar_releases",
        "flatcar_feed_entries",
    }
