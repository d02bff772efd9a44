"""The Alembic migrations on SQLite and PostgreSQL, run through ``releasebot.store.migrate``.

Each test gets an empty database (a SQLite file, or a fresh PostgreSQL database dropped
afterwards) and checks: upgrade to head, downgrade to base, upgrade again; that autogenerate
finds no drift between the migrated schema and ``tables.metadata``; that URLs work as well
as engines; and that migration errors come out as ``StoreError``.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import Engine, inspect
from sqlalchemy.engine import URL, make_url

from releasebot.domain.errors import StoreError
from releasebot.domain.models import Validators
from releasebot.store import migrate
from releasebot.store.engine import make_engine
from releasebot.store.sql import SqlStateStore
from releasebot.store.tables import metadata
from tests.postgres import fresh_postgres_database

TABLES = {table.name for table in metadata.sorted_tables}


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[URL]:
    if request.param == "sqlite":
        yield make_url(f"sqlite:///{tmp_path / 'releasebot.db'}")
    else:
        with fresh_postgres_database() as url:
            yield url


@pytest.fixture
def engine(database_url: URL) -> Iterator[Engine]:
    engine = make_engine(database_url)
    yield engine
    engine.dispose()


def tables_in(engine: Engine) -> set[str]:
    return set(inspect(engine).get_table_names())


def test_upgrade_downgrade_and_upgrade_again(engine: Engine) -> None:
    assert migrate.current_revision(engine) is None
    assert not migrate.is_at_head(engine)

    migrate.upgrade(engine)
    assert tables_in(engine) == TABLES | {"alembic_version"}
    assert migrate.current_revision(engine) == migrate.head_revision()
    assert migrate.is_at_head(engine)

    migrate.downgrade(engine, "base")
    assert tables_in(engine) == {"alembic_version"}
    assert migrate.current_revision(engine) is None

    migrate.upgrade(engine)
    assert migrate.is_at_head(engine)
    # The schema works, not only exists.
    now = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
    SqlStateStore(engine).record_feed_unchanged("stable", "https://x.test/", Validators(), now)
    state = SqlStateStore(engine).feed_state("stable")
    assert state is not None
    assert state.last_success_at == now


def test_the_migrated_schema_matches_the_tables(engine: Engine) -> None:
    migrate.upgrade(engine)
    with engine.connect() as conn:
        context = MigrationContext.configure(conn, opts={"compare_type": True})
        drift = compare_metadata(context, metadata)
    assert drift == []


def test_a_url_works_as_well_as_an_engine(database_url: URL) -> None:
    url = database_url.render_as_string(hide_password=False)
    migrate.upgrade(url, "head")
    assert migrate.is_at_head(url)
    assert migrate.current_revision(database_url) == migrate.head_revision()


def test_an_unknown_revision_is_a_store_error(engine: Engine) -> None:
    with pytest.raises(StoreError, match="migration"):
        migrate.upgrade(engine, "no-such-revision")
    assert migrate.current_revision(engine) is None


def test_the_source_tree_migrations_are_found() -> None:
    found = migrate.migrations_dir()
    assert (found / "env.py").is_file()
    assert list((found / "versions").glob("0001_*.py"))


def test_the_head_constant_matches_the_migration_scripts() -> None:
    # is_at_head() compares against HEAD_REVISION without importing Alembic: keep them equal.
    assert migrate.head_revision() == migrate.HEAD_REVISION
