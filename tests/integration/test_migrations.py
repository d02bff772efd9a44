"""The Alembic migrations on SQLite and PostgreSQL, run through ``releasebot.store.migrate``.

Each test gets an empty database (a SQLite file, or a fresh PostgreSQL database dropped
afterwards) and checks: upgrade to head, downgrade to base, upgrade again; that autogenerate
finds no drift between the migrated schema and ``tables.metadata``; that URLs work as well
as engines; that several processes upgrading one empty database at once all succeed; that
migration errors come out as ``StoreError``; and that 0008 masks the credentials older
releases stored in clear, in every text column, over more rows than one page.
"""

from __future__ import annotations

import json
import multiprocessing
import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import Engine, insert, inspect, select, text
from sqlalchemy.engine import URL, make_url

from releasebot.domain.shared.errors import StoreError
from releasebot.domain.targets.models import Validators
from releasebot.store import migrate
from releasebot.store.engine import make_engine
from releasebot.store.sql import SqlStateStore
from releasebot.store.tables import (
    builds,
    feeds,
    fleet_nodes,
    metadata,
    outbox,
    retention_deletions,
    targets,
)
from tests.support.leaks import KEPT, LEAK, clear_secrets
from tests.support.postgres import fresh_postgres_database

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


def _upgrade_in_a_process(url: str, start: Any, results: Any) -> None:
    """One ``releasebot db upgrade``: connect, wait for the others, migrate, report."""
    engine = make_engine(url)
    try:
        engine.connect().close()
        migrate.head_revision()  # import Alembic before the race, not during it
        start.wait(30)
        migrate.upgrade(engine)
        results.put(migrate.current_revision(engine))
    except Exception as error:  # noqa: BLE001 - whatever it is, the test shows it
        results.put(repr(error))
    finally:
        engine.dispose()


def test_concurrent_upgrades_of_an_empty_database_all_succeed(database_url: URL) -> None:
    # Three `releasebot db upgrade` (or three services starting) on one new database, all
    # migrating at the same moment. Processes, not threads: Alembic keeps the running
    # migration in module globals, so threads would mostly test that instead.
    count = 3
    spawn = multiprocessing.get_context("spawn")
    start, results = spawn.Barrier(count), spawn.Queue()
    url = database_url.render_as_string(hide_password=False)
    workers = [
        spawn.Process(target=_upgrade_in_a_process, args=(url, start, results))
        for _ in range(count)
    ]
    for worker in workers:
        worker.start()
    try:
        reports = [results.get(timeout=60) for _ in workers]
    finally:
        for worker in workers:
            worker.join(10)
            if worker.is_alive():
                worker.kill()
                worker.join()

    assert reports == [migrate.HEAD_REVISION] * count
    engine = make_engine(database_url)
    try:
        assert tables_in(engine) == TABLES | {"alembic_version"}
        assert migrate.is_at_head(engine)
    finally:
        engine.dispose()


def test_an_upgrade_or_downgrade_to_where_the_database_is_runs_no_migration(
    engine: Engine,
) -> None:
    migrate.upgrade(engine)
    migrate.upgrade(engine, migrate.HEAD_REVISION)
    migrate.downgrade(engine, "0001")
    migrate.downgrade(engine, "0001")
    assert migrate.current_revision(engine) == "0001"
    migrate.upgrade(engine, "heads")
    assert migrate.is_at_head(engine)
    # Relative revisions count from where the database is, each time.
    versions = Path(__file__).parents[2] / "migrations" / "versions"
    revisions = len(list(versions.glob("[0-9][0-9][0-9][0-9]_*.py")))
    for _ in range(revisions):
        migrate.downgrade(engine, "-1")
    assert migrate.current_revision(engine) is None
    migrate.upgrade(engine, f"+{revisions}")
    assert migrate.is_at_head(engine)


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


def _rows_in_clear(engine: Engine, now: datetime) -> None:
    """What a release before 0008 stored: every outside text with credentials in clear."""
    target = {
        "tag": "580.178.04-flatcar4593.2.5",
        "driver_version": "580.178.04",
        "driver_branch": "580",
        "flatcar_version": "4593.2.5",
        "flatcar_channel": "stable",
        "kernel": "6.12.102",
        "arches": "amd64",
        "reasons": "fleet",
        "state": "failed",
        "required": True,
        "first_planned_at": now,
        "updated_at": now,
        "attempts": 1,
        "last_error": LEAK,
    }
    at_the_limit = "x" * (1000 - len(" password=ab")) + " password=ab"
    payload = json.dumps({"tag": target["tag"], "error": LEAK, "jobs": [LEAK]}, sort_keys=True)
    with engine.begin() as conn:
        conn.execute(
            insert(feeds),
            [
                {"name": "nvidia", "url": "u", "last_error": LEAK, "consecutive_failures": 1},
                {"name": "full", "url": "u", "last_error": at_the_limit, "consecutive_failures": 1},
            ],
        )
        conn.execute(insert(targets), [target])
        conn.execute(
            insert(builds),
            [
                {
                    "tag": target["tag"],
                    "arch": "amd64",
                    "attempt": 1,
                    "job_name": "rb-job-1",
                    "destination_tag": target["tag"],
                    "state": "failed",
                    "message": LEAK,
                    "log_tail": "make: *** Error 2\n" + LEAK,
                    "created_at": now,
                }
            ],
        )
        rows = _page_rows() * 2 + 7  # more than one page
        conn.execute(
            insert(outbox),
            [
                {
                    "kind": "build-failed",
                    "message_key": f"build:{index}",
                    "subject": "s",
                    "payload": payload,
                    "created_at": now,
                    "last_error": LEAK,
                }
                for index in range(rows)
            ],
        )
        conn.execute(
            insert(fleet_nodes),
            [
                {
                    "name": "gpu-odd",
                    "gpu": True,
                    "ignored_reason": LEAK,
                    "first_seen_at": now,
                    "last_seen_at": now,
                }
            ],
        )
        conn.execute(
            insert(retention_deletions),
            [
                {
                    "tag": "570.1.1-flatcar4459.2.4",
                    "digest": "sha256:" + "a" * 64,
                    "flatcar_version": "4459.2.4",
                    "reason": LEAK,
                    "deleted_at": now,
                }
            ],
        )


def _page_rows() -> int:
    """0008's page size, read from the script itself (a module Alembic loads by path)."""
    script = migrate.migrations_dir() / "versions" / "0008_mask_stored_text.py"
    for line in script.read_text().splitlines():
        if line.startswith("PAGE_ROWS = "):
            return int(line.split("=", 1)[1])
    raise AssertionError("0008 names no PAGE_ROWS")


def test_0008_masks_what_older_releases_stored_in_clear(engine: Engine) -> None:
    migrate.upgrade(engine, "0006")
    _rows_in_clear(engine, datetime(2026, 11, 30, 12, 0, tzinfo=UTC))
    before = {column for column, _secret in clear_secrets(engine)}
    assert before == {
        "feeds.last_error",
        "targets.last_error",
        "builds.message",
        "builds.log_tail",
        "outbox.payload",
        "outbox.last_error",
        "fleet_nodes.ignored_reason",
        "retention_deletions.reason",
    }
    migrate.upgrade(engine)
    assert clear_secrets(engine) == []
    with engine.connect() as conn:
        errors = dict(conn.execute(select(feeds.c.name, feeds.c.last_error)).all())
        payloads = conn.execute(select(outbox.c.payload)).scalars().all()
        [log] = conn.execute(select(builds.c.log_tail)).scalars().all()
    assert all(kept in errors["nvidia"] for kept in KEPT)  # masked, not dropped
    assert "***" in errors["nvidia"]
    assert len(errors["full"]) <= 1000  # the mask is longer than "ab": cut as the store cuts
    assert all("***" in json.loads(payload)["error"] for payload in payloads)
    assert log.startswith("make: *** Error 2\n")
    # the downgrade unmasks nothing (it cannot), and changes no schema
    migrate.downgrade(engine, "0007")
    assert clear_secrets(engine) == []
    assert tables_in(engine) == TABLES - {"store_revisions", "driver_bases"} | {"alembic_version"}


def test_0009_adds_the_change_counters_and_its_downgrade_drops_them(engine: Engine) -> None:
    migrate.upgrade(engine, "0008")
    assert "store_revisions" not in tables_in(engine)
    migrate.upgrade(engine)
    assert "store_revisions" in tables_in(engine)
    migrate.downgrade(engine, "0008")
    assert tables_in(engine) == TABLES - {"store_revisions", "driver_bases"} | {"alembic_version"}


def test_0010_adds_the_driver_bases_and_its_downgrade_drops_them(engine: Engine) -> None:
    migrate.upgrade(engine, "0009")
    assert "driver_bases" not in tables_in(engine)
    migrate.upgrade(engine)
    assert "driver_bases" in tables_in(engine)
    migrate.downgrade(engine, "0009")
    assert tables_in(engine) == TABLES - {"driver_bases"} | {"alembic_version"}


# -- upgrade_apart: run's migration in a child process ----------------------------------------


_PROBE = """
import sys
from releasebot.store import migrate
from releasebot.store.engine import make_engine
migrate.upgrade_apart(make_engine(sys.stdin.readline().strip()))
print(sorted(name for name in sys.modules if name == "alembic" or name.startswith("alembic.")))
"""


def _upgrade_apart_in_a_fresh_process(url: str) -> str:
    """What a fresh process that ran ``upgrade_apart`` has imported of Alembic."""
    done = subprocess.run(
        [sys.executable, "-c", _PROBE], input=url, capture_output=True, text=True, check=True
    )
    return done.stdout.strip()


def test_upgrade_apart_migrates_in_a_child_and_keeps_alembic_out(database_url: URL) -> None:
    url = database_url.render_as_string(hide_password=False)
    assert _upgrade_apart_in_a_fresh_process(url) == "[]"
    assert migrate.schema_status(url) is migrate.Schema.CURRENT
    assert migrate.is_at_head(url)
    # At the head it asks once and starts no child at all.
    assert _upgrade_apart_in_a_fresh_process(url) == "[]"


def test_upgrade_apart_brings_an_older_schema_to_the_head(engine: Engine) -> None:
    migrate.upgrade(engine, "0009")
    migrate.upgrade_apart(engine)
    assert migrate.is_at_head(engine)


def test_upgrade_apart_reports_the_childs_error_in_one_line(engine: Engine) -> None:
    migrate.upgrade(engine, "0009")
    with engine.begin() as conn:  # in the way of 0010, which creates it
        conn.execute(text("CREATE TABLE driver_bases (x INTEGER)"))
    with pytest.raises(StoreError) as raised:
        migrate.upgrade_apart(engine)
    message = str(raised.value)
    assert message.startswith("state store: migration failed: state store:")
    assert "\n" not in message
    assert "Traceback" not in message
    assert migrate.current_revision(engine) == "0009"  # nothing half-done


def test_upgrade_apart_refuses_a_newer_schema_before_any_child(engine: Engine) -> None:
    migrate.upgrade(engine)
    with engine.begin() as conn:
        conn.execute(text("UPDATE alembic_version SET version_num = '9999'"))
    with pytest.raises(StoreError, match="newer"):
        migrate.upgrade_apart(engine)


def test_upgrade_apart_leaves_an_in_memory_database_to_the_caller() -> None:
    for url in ("sqlite://", "sqlite:///:memory:"):  # another database in every process
        engine = make_engine(url)
        migrate.upgrade_apart(engine)
        assert migrate.schema_status(engine) is migrate.Schema.EMPTY  # nothing done here
        engine.dispose()
