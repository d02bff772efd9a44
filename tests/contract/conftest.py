"""Fixtures for the store contract suite: the same tests against every ``StateStore``.

``backend`` is parametrized over the in-memory store, SQLite (a fresh file per test) and
PostgreSQL; ``sql_backend`` over the two SQL ones only, for tests that watch the statements
sent. PostgreSQL gets one fresh database per test session (``tests/support/postgres.py``), migrated
once, emptied with TRUNCATE before each test and dropped at the end.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from sqlalchemy import Engine

from releasebot.domain.ports import StateStore
from releasebot.store import migrate
from releasebot.store.engine import make_engine
from releasebot.store.memory import MemoryStateStore
from releasebot.store.sql import SqlStateStore
from releasebot.store.tables import metadata
from tests.support.postgres import fresh_postgres_database

SQL_PARAMS = ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]


@dataclass(frozen=True)
class Backend:
    name: str
    store: StateStore
    engine: Engine | None
    """The engine under an SQL store (to watch its statements); ``None`` for memory."""

    def without_events(self) -> StateStore:
        """The same store as the wiring builds it when Slack is off: events dropped."""
        if self.engine is None:
            return MemoryStateStore(keep_events=False)
        return SqlStateStore(self.engine, keep_events=False)


@pytest.fixture(scope="session")
def postgres_engine() -> Iterator[Engine]:
    """An engine on a fresh, migrated database, dropped when the session ends."""
    with fresh_postgres_database() as url:
        engine = make_engine(url)
        try:
            migrate.upgrade(engine)
            yield engine
        finally:
            engine.dispose()


def _backend(name: str, request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    if name == "memory":
        yield Backend(name, MemoryStateStore(), None)
    elif name == "sqlite":
        # A directory that does not exist yet: make_engine creates it.
        engine = make_engine(f"sqlite:///{tmp_path / 'state' / 'releasebot.db'}")
        try:
            migrate.upgrade(engine)
            yield Backend(name, SqlStateStore(engine), engine)
        finally:
            engine.dispose()
    else:
        engine = request.getfixturevalue("postgres_engine")
        tables = ", ".join(table.name for table in metadata.sorted_tables)
        with engine.begin() as conn:
            conn.exec_driver_sql(f"TRUNCATE {tables}")
        yield Backend(name, SqlStateStore(engine), engine)


@pytest.fixture(params=["memory", *SQL_PARAMS])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    yield from _backend(request.param, request, tmp_path)


@pytest.fixture(params=SQL_PARAMS)
def sql_backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    yield from _backend(request.param, request, tmp_path)


@pytest.fixture
def store(backend: Backend) -> StateStore:
    return backend.store
