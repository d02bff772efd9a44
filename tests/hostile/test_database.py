"""A database newer, stranger or stricter than the code, replayed from
``tests/data/hostile/database/`` against real SQLite files and a real PostgreSQL.

Each case seeds a real database (``releasebot plan`` on the project's feeds and the real
registry), then damages it (SQL statements, a downgrade, a read-only mode, a role without
grants), then runs the CLI as a real process: no traceback on stdout or stderr, the
documented exit code, ONE stderr line naming the problem and what to do, and the stored
rows unchanged. Where the advice is a command, the case runs it too and checks it works.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text

from releasebot.cli import main
from releasebot.store.engine import make_engine
from tests.support.feedserver import FeedServer
from tests.support.hostile_cli import (
    assert_no_traceback,
    assert_one_line_says,
    cases,
    execute,
    load_case,
    run_cli,
    snapshot,
    write_settings,
)
from tests.support.kubeapi import FakeKubeApi
from tests.support.postgres import POSTGRES_URL, fresh_postgres_database
from tests.support.registryserver import RunningRegistry

TAG = "580.178.04-flatcar4593.2.5"

CASES = [
    pytest.param(path, backend, id=f"{path.stem}-{backend}")
    for path in cases("database")
    for backend in load_case(path).get("backends", ["sqlite", "postgresql"])
]


@contextmanager
def database(backend: str, tmp_path: Path) -> Iterator[str]:
    if backend == "sqlite":
        yield f"sqlite:///{tmp_path / 'state.db'}"
        return
    with fresh_postgres_database() as url:
        yield url.render_as_string(hide_password=False)


def _admin(statement: str) -> None:
    engine = make_engine(POSTGRES_URL)
    try:
        with engine.connect() as conn:
            conn.execution_options(isolation_level="AUTOCOMMIT")
            conn.execute(text(statement))
    finally:
        engine.dispose()


@contextmanager
def damaged_url(case: dict[str, Any], backend: str, url: str, stack: ExitStack) -> Iterator[str]:
    """The URL the commands get: the database's own, or one that makes it read-only for
    them (SQLite's ``mode=ro``; PostgreSQL's ``default_transaction_read_only``), or one
    logging in as a role without grants."""
    if case.get("read_only"):
        if backend == "sqlite":
            yield "sqlite:///file:" + url.removeprefix("sqlite:///") + "?mode=ro&uri=true"
            return
        name = url.rsplit("/", 1)[1]
        _admin(f'ALTER DATABASE "{name}" SET default_transaction_read_only = on')
        yield url
        return
    if case.get("role") == "no_grants":
        role = f"releasebot_nogrants_{secrets.token_hex(4)}"
        _admin(f'CREATE ROLE "{role}" LOGIN')
        stack.callback(_admin, f'DROP ROLE IF EXISTS "{role}"')
        user = url.split("://", 1)[1].split("@", 1)[0]
        yield url.replace(f"://{user}@", f"://{role}@", 1)
        return
    yield url


@pytest.mark.timeout(240)
@pytest.mark.parametrize(("path", "backend"), CASES)
def test_database_case(
    path: Path,
    backend: str,
    tmp_path: Path,
    served_feeds: FeedServer,
    plain_registry: RunningRegistry,
    registry_name: str,
    kube_api: FakeKubeApi,
) -> None:
    case = load_case(path)
    kubeconfig = kube_api.write_kubeconfig(tmp_path / "kubeconfig")

    def settings(url: str, name: str) -> str:
        return str(
            write_settings(
                tmp_path / name,
                database_url=url,
                flatcar_url=served_feeds.url("/releases-{channel}.json"),
                nvidia_url=served_feeds.url("/nvidia.json"),
                repository=plain_registry.repository(registry_name),
                kubeconfig=kubeconfig,
                namespace=kube_api.namespace,
            )
        )

    with ExitStack() as stack:
        url = stack.enter_context(database(backend, tmp_path))
        own = settings(url, "own.toml")
        assert main(["plan", "-q", "--config", own]) == 0, "seeding the database failed"
        for before in case.get("before", []):
            assert main([*before, "-q", "--config", own]) == 0, f"{before} failed"
        execute(url, [s.replace("{tag}", TAG) for s in case.get("sql", [])])
        used = settings(stack.enter_context(damaged_url(case, backend, url, stack)), "used.toml")
        unchanged = case.get("unchanged", "all")
        tables = None if unchanged == "all" else unchanged
        stored = snapshot(url, tables)

        outcome = run_cli([*case["command"], "--config", used])

        assert_no_traceback(outcome.stdout, outcome.stderr)
        assert outcome.code == case["exit"], outcome.describe()
        if case["says"]:
            line = assert_one_line_says(outcome.stderr, case["says"], outcome.describe())
            assert line.startswith("releasebot: "), line
        for phrase in case.get("not_says", []):
            assert phrase not in outcome.stderr + outcome.stdout, outcome.describe()
        if unchanged != "none":
            assert snapshot(url, tables) == stored, "the stored rows changed"
        for step in case.get("then", []):  # the advice works
            after = run_cli([*step["command"], "--config", own])
            assert_no_traceback(after.stdout, after.stderr)
            assert after.code == step["exit"], after.describe()
            for phrase in step.get("says", []):
                assert phrase in after.stderr + after.stdout, after.describe()
