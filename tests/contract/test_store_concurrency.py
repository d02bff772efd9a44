"""Several releasebot processes writing one fresh database at the same moment.

Three ``releasebot plan`` started together on an empty database all find no feed row and no
targets, and all insert them. Each thread here has its own engine (as a process would) and
starts its first write when the others do; every one must succeed and the stored state must
be what one run alone would have left. SQLite serializes writers with ``BEGIN IMMEDIATE``;
PostgreSQL with the store's advisory lock (``engine.STORE_WRITE_LOCK``), whose wait is
bounded by the engine's busy timeout.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TypeVar

import pytest
from sqlalchemy.engine import URL, make_url

from releasebot.domain.shared.errors import StoreUnavailableError
from releasebot.domain.targets.models import TargetRecord
from releasebot.store import migrate
from releasebot.store.engine import lock_writes, make_engine
from releasebot.store.sql import SqlStateStore
from tests.contract.test_store_contract import SEEN, driver, flatcar, plan
from tests.contract.test_store_contract import URL as FEED_URL
from tests.support.postgres import fresh_postgres_database

T0 = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
WRITERS = 4
Result = TypeVar("Result")


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def fresh_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[URL]:
    """A migrated database that nothing has written to yet."""
    if request.param == "sqlite":
        url = make_url(f"sqlite:///{tmp_path / 'releasebot.db'}")
        migrate.upgrade(url)
        yield url
    else:
        with fresh_postgres_database() as url:
            migrate.upgrade(url)
            yield url


def all_at_once(count: int, work: Callable[[SqlStateStore], Result], url: URL) -> list[Result]:
    """Run ``work`` in ``count`` threads, each on its own connected engine, released together."""
    start = threading.Barrier(count, timeout=30)

    def one() -> Result:
        engine = make_engine(url)
        try:
            engine.connect().close()  # connect first, so that the writes, not the logins, race
            start.wait()
            return work(SqlStateStore(engine))
        finally:
            engine.dispose()

    with ThreadPoolExecutor(max_workers=count) as pool:
        futures = [pool.submit(one) for _ in range(count)]
        return [future.result(timeout=60) for future in futures]


def test_concurrent_first_runs_all_succeed_and_agree(fresh_url: URL) -> None:
    releases = [flatcar("4459.2.1"), flatcar("4593.2.5")]
    planned = [plan(driver(), release) for release in releases]

    def first_run(store: SqlStateStore) -> list[TargetRecord]:
        store.record_flatcar_feed("stable", FEED_URL, releases, SEEN, T0)
        return store.sync_targets(planned, T0)

    results = all_at_once(WRITERS, first_run, fresh_url)

    assert all(result == results[0] for result in results)
    assert [record.tag for record in results[0]] == [target.tag for target in planned]
    engine = make_engine(fresh_url)
    try:
        store = SqlStateStore(engine)
        assert store.targets() == sorted(results[0], key=lambda record: record.tag)
        assert [r.version.text for r in store.flatcar_releases("stable")] == [
            "4459.2.1",
            "4593.2.5",
        ]
        state = store.feed_state("stable")
        assert state is not None
        assert (state.validators, state.consecutive_failures) == (SEEN, 0)
    finally:
        engine.dispose()


def test_concurrent_hand_asked_targets_are_inserted_once(fresh_url: URL) -> None:
    target = plan(driver(), flatcar())
    results = all_at_once(WRITERS, lambda store: store.ensure_target(target, T0), fresh_url)
    assert {record.tag for record in results} == {target.tag}
    assert all(record.required is False for record in results)


@pytest.mark.postgres
def test_a_writer_waits_for_the_lock_only_as_long_as_the_busy_timeout() -> None:
    # A writer stuck inside its transaction (a paused process) must not stall every other
    # writer forever: past the busy timeout they give up with a temporary error, as on SQLite.
    with fresh_postgres_database() as url:
        migrate.upgrade(url)
        holder = make_engine(url)
        waiter = make_engine(url, busy_timeout=timedelta(milliseconds=200))
        try:
            with holder.connect() as conn, conn.begin():
                lock_writes(conn)
                with pytest.raises(StoreUnavailableError, match="lock timeout"):
                    SqlStateStore(waiter).record_feed_failure("stable", FEED_URL, "x", T0)
            SqlStateStore(waiter).record_feed_failure("stable", FEED_URL, "x", T0)
            assert SqlStateStore(waiter).feed_state("stable") is not None
        finally:
            holder.dispose()
            waiter.dispose()
