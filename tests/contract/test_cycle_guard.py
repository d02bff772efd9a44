"""``CycleGuard`` on SQLite (the ``locks`` lease row) and PostgreSQL (a session advisory lock).

Two holders compete, each through its own engine as two processes would: only one gets
the guard until it releases; ``hold`` releases at the end of its block, and within one
process (one instance, several threads) only one block holds it at a time. SQLite only: a
lapsed row is taken over, a renewal keeps it, a holder that lost it learns so on renew.
PostgreSQL only: a holder whose connection dies (a killed process) frees the guard at once,
and releasing never leaves the lock on a pooled connection.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import Connection, Engine, select, text
from sqlalchemy.engine import URL, make_url

from releasebot.runtime.lock import CYCLE_LOCK, CycleGuard
from releasebot.store import migrate
from releasebot.store.engine import make_engine
from releasebot.store.tables import locks
from tests.support.postgres import fresh_postgres_database

T0 = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
TTL = timedelta(seconds=60)


@pytest.fixture(scope="module")
def sqlite_url(tmp_path_factory: pytest.TempPathFactory) -> URL:
    url = make_url(f"sqlite:///{tmp_path_factory.mktemp('guard') / 'releasebot.db'}")
    migrate.upgrade(url)
    return url


@pytest.fixture(scope="module")
def postgres_url() -> Iterator[URL]:
    with fresh_postgres_database() as url:
        migrate.upgrade(url)
        yield url


def two_engines(url: URL) -> Iterator[tuple[Engine, Engine]]:
    """Two engines on one database: two processes."""
    first, second = make_engine(url), make_engine(url)
    try:
        yield first, second
    finally:
        with first.begin() as conn:
            conn.exec_driver_sql("DELETE FROM locks")
        first.dispose()
        second.dispose()


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def engines(request: pytest.FixtureRequest) -> Iterator[tuple[Engine, Engine]]:
    yield from two_engines(request.getfixturevalue(f"{request.param}_url"))


@pytest.fixture
def sqlite_engines(sqlite_url: URL) -> Iterator[tuple[Engine, Engine]]:
    yield from two_engines(sqlite_url)


@pytest.fixture
def postgres_engines(postgres_url: URL) -> Iterator[tuple[Engine, Engine]]:
    yield from two_engines(postgres_url)


def test_only_one_of_two_holders_gets_it_until_released(engines: tuple[Engine, Engine]) -> None:
    a, b = CycleGuard(engines[0]), CycleGuard(engines[1])
    assert a.try_acquire("a", TTL, T0)
    assert not b.try_acquire("b", TTL, T0)
    assert a.try_acquire("a", TTL, T0)  # asking again while holding is fine
    assert (a.holder, b.holder) == ("a", None)
    a.release()
    assert not a.held
    assert b.try_acquire("b", TTL, T0)
    assert not a.try_acquire("a", TTL, T0)
    b.release()
    b.release()  # twice is harmless


def test_hold_releases_at_the_end_of_the_block(engines: tuple[Engine, Engine]) -> None:
    a, b = CycleGuard(engines[0]), CycleGuard(engines[1])
    with a.hold("a", TTL, lambda: T0) as held:
        assert held
        with b.hold("b", TTL, lambda: T0) as other:
            assert not other
    with b.hold("b", TTL, lambda: T0) as held:
        assert held


def test_one_process_holds_it_in_one_block_at_a_time(engines: tuple[Engine, Engine]) -> None:
    guard = CycleGuard(engines[0])  # shared by the cycle, delivery and chat threads
    seen: list[bool] = []

    def another_thread() -> None:
        with guard.hold("replica@host:1", TTL, lambda: T0) as held:
            seen.append(held)

    with guard.hold("replica@host:1", TTL, lambda: T0) as held:
        assert held
        thread = threading.Thread(target=another_thread)
        thread.start()
        thread.join(timeout=10)
        with guard.hold("replica@host:1", TTL, lambda: T0) as again:
            seen.append(again)  # nor this thread a second time
    assert seen == [False, False]
    thread = threading.Thread(target=another_thread)
    thread.start()
    thread.join(timeout=10)
    assert seen == [False, False, True]  # free again once the block ended


def test_release_after_an_error_in_the_block(engines: tuple[Engine, Engine]) -> None:
    a, b = CycleGuard(engines[0]), CycleGuard(engines[1])
    with pytest.raises(RuntimeError), a.hold("a", TTL, lambda: T0):
        raise RuntimeError("the cycle failed")
    assert b.try_acquire("b", TTL, T0)
    b.release()


def test_a_lapsed_row_is_taken_over_and_the_old_holder_learns_it(
    sqlite_engines: tuple[Engine, Engine],
) -> None:
    a, b = CycleGuard(sqlite_engines[0]), CycleGuard(sqlite_engines[1])
    assert a.try_acquire("a", TTL, T0)
    assert a.renew(T0 + timedelta(seconds=50))  # now valid until T0 + 110 s
    assert not b.try_acquire("b", TTL, T0 + timedelta(seconds=100))
    assert b.try_acquire("b", TTL, T0 + timedelta(seconds=111))
    assert not a.renew(T0 + timedelta(seconds=112))
    assert not a.held
    a.release()  # must not delete b's row
    assert not CycleGuard(sqlite_engines[0]).try_acquire("c", TTL, T0 + timedelta(seconds=120))
    b.release()


def test_the_keepalive_renews_the_row_while_held(sqlite_engines: tuple[Engine, Engine]) -> None:
    now = [T0]
    a, b = CycleGuard(sqlite_engines[0]), CycleGuard(sqlite_engines[1])
    short = timedelta(milliseconds=60)  # the keeper renews every 20 ms of real time
    with a.hold("a", short, lambda: now[0]) as held:
        assert held
        now[0] = T0 + timedelta(seconds=10)  # the block runs long: the keeper must renew
        renewed = threading.Event()
        for _ in range(250):  # at most 5 s
            with sqlite_engines[0].connect() as conn:
                expires = conn.execute(select(locks.c.expires_at)).scalar_one()
            if expires == now[0] + short:
                renewed.set()
                break
            renewed.wait(0.02)
        assert renewed.is_set(), "the keeper did not renew the row"
        assert not b.try_acquire("b", short, now[0])
    assert b.try_acquire("b", short, now[0])
    b.release()


HOLDERS = text(
    "SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND classid = :high AND objid = :low"
    " AND database = (SELECT oid FROM pg_database WHERE datname = current_database())"
    " AND pid <> pg_backend_pid()"
)
GONE_AFTER = timedelta(seconds=30)
"""How long a terminated backend may take to exit on a loaded machine before the test fails."""


def kill_the_holder(admin: Connection) -> None:
    """Terminate the backend holding the cycle lock in THIS database (other databases on the
    server belong to other test runs) and wait until it is gone: ``pg_terminate_backend``
    only signals it, and the lock is released while the backend exits."""
    keys = {"high": CYCLE_LOCK >> 32, "low": CYCLE_LOCK & 0xFFFFFFFF}
    [pid] = admin.execute(HOLDERS, keys).scalars().all()
    timeout = int(GONE_AFTER.total_seconds() * 1000)
    admin.execute(
        text("SELECT pg_terminate_backend(:pid, :timeout)"), {"pid": pid, "timeout": timeout}
    )
    admin.commit()
    deadline = time.monotonic() + GONE_AFTER.total_seconds()
    while True:
        admin.execute(text("SELECT pg_stat_clear_snapshot()"))
        alive = admin.execute(
            text(
                "SELECT (SELECT count(*) FROM pg_stat_activity WHERE pid = :pid)"
                " + (SELECT count(*) FROM pg_locks WHERE pid = :pid)"
            ),
            {"pid": pid},
        ).scalar_one()
        admin.commit()  # a fresh snapshot of the activity and lock views next round
        if not alive:
            return
        assert time.monotonic() < deadline, f"backend {pid} still there after {GONE_AFTER}"
        time.sleep(0.01)


@pytest.mark.postgres
def test_a_dead_session_frees_the_advisory_lock(postgres_engines: tuple[Engine, Engine]) -> None:
    a, b = CycleGuard(postgres_engines[0]), CycleGuard(postgres_engines[1])
    assert a.try_acquire("a", TTL, T0)
    try:
        with postgres_engines[1].connect() as admin:  # the process holding it is killed
            kill_the_holder(admin)
        assert b.try_acquire("b", TTL, T0)
        b.release()
    finally:
        a.release()  # its connection is gone: releasing must not raise, and closes it


@pytest.mark.postgres
def test_release_leaves_no_lock_on_pooled_connections(
    postgres_engines: tuple[Engine, Engine],
) -> None:
    a = CycleGuard(postgres_engines[0])
    for _ in range(3):
        assert a.try_acquire("a", TTL, T0)
        a.release()
    with postgres_engines[1].connect() as conn:
        # Only this test's database: other test runs on the same server hold their own.
        held = conn.execute(
            text(
                "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND database ="
                " (SELECT oid FROM pg_database WHERE datname = current_database())"
            )
        )
        assert held.scalar_one() == 0
