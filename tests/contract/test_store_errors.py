"""Which database failures are temporary and which permanent, and what their messages say.

A scheduler retries a ``TemporaryError`` and stops at a ``PermanentError``, so the branch
matters: a network failure or a lock conflict is temporary; a database that does not exist,
a role the server does not know, a SQLite path that is a directory or a file that is no
database are permanent (retrying them forever hides a configuration mistake). Data the
database refuses (a constraint, a value too long) is permanent and says "state store refused
the data", without the SQL or its parameters, so that it never reads like an outage.

What the local servers can provoke is provoked for real; the rest (a wrong password, too
many clients, a deadlock) goes through ``translate_error`` with psycopg's own error classes.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

import psycopg
import pytest
from psycopg import errors as pg
from sqlalchemy import Engine, exc, insert, text, update
from sqlalchemy.engine import URL, make_url
from sqlalchemy.sql.expression import Executable

from releasebot.domain.ports import StateStore
from releasebot.domain.shared.errors import (
    ReleasebotError,
    StoreError,
    StoreUnavailableError,
    TemporaryError,
)
from releasebot.domain.shared.versions import Arch
from releasebot.domain.targets.builds import BuildRecord, BuildState
from releasebot.store import migrate
from releasebot.store.engine import make_engine, translate_error
from releasebot.store.sql import SqlStateStore
from releasebot.store.tables import feeds, flatcar_releases
from tests.contract.conftest import Backend
from tests.contract.test_store_contract import driver, flatcar, plan
from tests.support.postgres import reachable_postgres_url

T0 = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
REFUSED = "state store refused the data: "


def first_use(url: URL | str) -> ReleasebotError:
    """The error of the first store call (and of a migration check) on ``url``."""
    engine = make_engine(url)
    try:
        with pytest.raises(ReleasebotError) as caught:
            SqlStateStore(engine).targets()
        with pytest.raises(type(caught.value)):
            migrate.is_at_head(engine)
    finally:
        engine.dispose()
    return caught.value


# --- connecting --------------------------------------------------------------------------


@pytest.mark.postgres
def test_a_database_that_does_not_exist_is_permanent() -> None:
    error = first_use(reachable_postgres_url().set(database="releasebot_no_such_database"))
    assert isinstance(error, StoreError)
    assert 'database "releasebot_no_such_database" does not exist' in str(error)


@pytest.mark.postgres
def test_a_role_the_server_does_not_know_is_permanent() -> None:
    error = first_use(reachable_postgres_url().set(username="releasebot_no_such_role"))
    assert isinstance(error, StoreError)
    assert 'role "releasebot_no_such_role" does not exist' in str(error)


def test_a_wrong_port_is_temporary() -> None:
    # Nothing listens on port 1 of the loopback address: the connection is refused at once.
    error = first_use("postgresql://postgres@127.0.0.1:1/test")
    assert isinstance(error, StoreUnavailableError)
    assert "cannot reach the database" in str(error)


def test_a_sqlite_path_that_is_a_directory_is_permanent(tmp_path: Path) -> None:
    (tmp_path / "state.db").mkdir()
    error = first_use(f"sqlite:///{tmp_path / 'state.db'}")
    assert isinstance(error, StoreError)
    assert "unable to open database file" in str(error)


def test_a_sqlite_file_with_garbage_is_permanent(tmp_path: Path) -> None:
    (tmp_path / "state.db").write_bytes(b"this is not a SQLite database\n" * 200)
    error = first_use(f"sqlite:///{tmp_path / 'state.db'}")
    assert isinstance(error, StoreError)
    assert "file is not a database" in str(error)


def connection_failed(fatal: str) -> psycopg.OperationalError:
    """What psycopg raises when libpq fails to connect: no SQLSTATE, only the message."""
    return psycopg.OperationalError(
        f'connection failed: connection to server at "db.example", port 5432 failed: {fatal}'
    )


@pytest.mark.parametrize(
    ("origin", "expected"),
    [
        (connection_failed('FATAL:  password authentication failed for user "rb"'), StoreError),
        (connection_failed('FATAL:  no pg_hba.conf entry for host "10.0.0.7"'), StoreError),
        (connection_failed('FATAL:  role "rb" is not permitted to log in'), StoreError),
        (connection_failed('FATAL:  permission denied for database "rb"'), StoreError),
        (connection_failed("fe_sendauth: no password supplied"), StoreError),
        (pg.lookup("28P01")("password authentication failed"), StoreError),
        (pg.lookup("3D000")('database "rb" does not exist'), StoreError),
        (connection_failed("Connection refused"), StoreUnavailableError),
        (connection_failed("timeout expired"), StoreUnavailableError),
        (connection_failed("server closed the connection unexpectedly"), StoreUnavailableError),
        (connection_failed("FATAL:  sorry, too many clients already"), StoreUnavailableError),
        (pg.lookup("53300")("sorry, too many clients already"), StoreUnavailableError),
        (pg.lookup("57P03")("the database system is starting up"), StoreUnavailableError),
    ],
    ids=lambda value: getattr(value, "__name__", None) or str(value)[-40:],
)
def test_connect_failures_are_permanent_only_when_retrying_cannot_help(
    origin: psycopg.Error, expected: type[ReleasebotError]
) -> None:
    error = exc.DBAPIError.instance(None, None, origin, psycopg.Error)
    translated = translate_error(error, make_url("postgresql://rb@db.example/rb"), connecting=True)
    assert type(translated) is expected


# --- data the database refuses, and conflicts --------------------------------------------


@pytest.mark.parametrize(
    ("origin", "expected"),
    [
        (pg.lookup("23505")('duplicate key value violates unique constraint "pk_feeds"'), REFUSED),
        (pg.lookup("23503")('violates foreign key constraint "fk_builds_tag"'), REFUSED),
        (pg.lookup("23514")('violates check constraint "ck_targets_state"'), REFUSED),
        (pg.lookup("22001")("value too long for type character varying(32)"), REFUSED),
        (pg.lookup("40001")("could not serialize access"), "state store: database busy: "),
        (pg.lookup("40P01")("deadlock detected"), "state store: database busy: "),
    ],
    ids=lambda value: getattr(value, "sqlstate", None) or str(value).rstrip(": ").split(": ")[-1],
)
def test_refused_data_is_permanent_and_conflicts_are_temporary(
    origin: psycopg.Error, expected: str
) -> None:
    statement = "INSERT INTO feeds (name) VALUES (%(name)s)"
    error = exc.DBAPIError.instance(statement, {"name": "s3cret-value"}, origin, psycopg.Error)
    translated = translate_error(error, make_url("postgresql://rb@db.example/rb"))
    assert str(translated).startswith(expected)
    assert isinstance(translated, TemporaryError) == ("busy" in expected)
    assert "INSERT" not in str(translated)
    assert "s3cret-value" not in str(translated)


def test_a_build_for_an_unknown_target_is_refused_data(store: StateStore) -> None:
    [record] = store.sync_targets([plan(driver(), flatcar())], T0)
    orphan = BuildRecord(
        tag="580.1.1-flatcar1.2.3",
        arch=Arch.AMD64,
        attempt=1,
        job_name="rb-orphan-job",
        destination_tag=f"{record.tag}-amd64",
        state=BuildState.LAUNCHING,
        created_at=T0,
    )
    with pytest.raises(StoreError) as caught:
        store.save(targets=[replace(record, attempts=1)], builds=[orphan])
    message = str(caught.value)
    assert message.startswith(REFUSED)
    assert "INSERT" not in message
    assert "rb-orphan-job" not in message


def refused(engine: Engine, statement: Executable, params: dict[str, object]) -> ReleasebotError:
    with pytest.raises(exc.SQLAlchemyError) as caught, engine.begin() as conn:
        conn.execute(statement, params)
    return translate_error(caught.value, engine.url)


def test_real_constraint_violations_are_refused_data(sql_backend: Backend) -> None:
    engine = sql_backend.engine
    assert engine is not None
    feed = {"name": "s3cret-feed", "url": "https://x.test/", "consecutive_failures": 0}
    with engine.begin() as conn:
        conn.execute(insert(feeds), feed)
    duplicate = refused(engine, insert(feeds), feed)
    missing = refused(engine, insert(feeds), {**feed, "name": "other", "url": None})
    for error in (duplicate, missing):
        assert isinstance(error, StoreError)
        assert str(error).startswith(REFUSED)
        assert "INSERT" not in str(error)
        assert "s3cret-feed" not in str(error)


@pytest.mark.postgres
def test_a_value_too_long_is_refused_data(postgres_engine: Engine) -> None:
    row = {"version": "9" * 40, "major": 1, "minor": 2, "patch": 3, "channel": "stable"}
    row |= {"arches": "amd64", "kernel": "6.12", "content_sha256": "x"}
    row |= {"first_seen_at": T0, "updated_at": T0}
    error = refused(postgres_engine, insert(flatcar_releases), row)
    assert isinstance(error, StoreError)
    assert str(error).startswith(REFUSED + "value too long")


@pytest.fixture
def pg_feed(postgres_engine: Engine) -> Iterator[Engine]:
    with postgres_engine.begin() as conn:
        conn.execute(insert(feeds), {"name": "race", "url": "u", "consecutive_failures": 0})
    yield postgres_engine
    with postgres_engine.begin() as conn:
        conn.execute(feeds.delete().where(feeds.c.name == "race"))


@pytest.mark.postgres
def test_a_real_serialization_failure_is_temporary(pg_feed: Engine) -> None:
    bump = update(feeds).where(feeds.c.name == "race").values(consecutive_failures=1)
    with pg_feed.connect() as first:
        first.execution_options(isolation_level="REPEATABLE READ")
        with first.begin():
            first.execute(text("SELECT count(*) FROM feeds"))  # takes the snapshot
            with pg_feed.begin() as second:
                second.execute(bump)
            with pytest.raises(exc.SQLAlchemyError) as caught:
                first.execute(bump)  # the row changed since the snapshot: 40001
    error = translate_error(caught.value, pg_feed.url)
    assert isinstance(error, StoreUnavailableError)
    assert "could not serialize access" in str(error)
