"""A database newer, stranger or stricter than the code, replayed from
``tests/data/hostile/database/`` against real SQLite files and a real PostgreSQL.

Each case seeds a real database (``releasebot plan`` on the project's feeds and the real
registry), then damages it (SQL statements, a downgrade, a read-only mode, a role without
grants), then runs the CLI as a real process: no traceback on stdout or stderr, the
documented exit code, ONE stderr line naming the problem and what to do, and the stored
rows unchanged. Where the advice is a command, the case runs it too and checks it works.

Last, ``releasebot run`` through a PostgreSQL outage (a proxy the test cuts): one log line
for the outage of the delivery rounds, one on recovery, no traceback, no password shown.
"""

from __future__ import annotations

import json
import secrets
import time
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
from tests.support.runprocess import ReleasebotProcess, free_port, wait_for
from tests.support.slackapi import BOT_TOKEN, CHANNEL, SlackApi
from tests.support.tcpproxy import TcpProxy

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


# -- the service through a PostgreSQL outage ------------------------------------------------

OUTAGE_SECRETS = ("RunUserPw1", "RunSslPw2")


@pytest.mark.timeout(180)
def test_run_through_a_postgresql_outage(
    tmp_path: Path,
    served_feeds: FeedServer,
    plain_registry: RunningRegistry,
    registry_name: str,
    kube_api: FakeKubeApi,
) -> None:
    """``releasebot run`` (a real process, JSON logs) on PostgreSQL behind a proxy the test
    cuts: /readyz says "store unreachable" without the URL's passwords, the delivery rounds
    (every 10 s) log ONE line for the whole outage and no traceback, and one line when
    delivery works again."""
    with ExitStack() as stack:
        direct = stack.enter_context(fresh_postgres_database())
        proxy = stack.enter_context(TcpProxy((direct.host or "127.0.0.1", direct.port or 5432)))
        url = (
            f"postgresql+psycopg://{direct.username}:{OUTAGE_SECRETS[0]}@127.0.0.1:{proxy.port}"
            f"/{direct.database}?sslpassword={OUTAGE_SECRETS[1]}&sslmode=disable"
        )
        slack = stack.enter_context(SlackApi())
        port = free_port()
        config = write_settings(
            tmp_path / "releasebot.toml",
            database_url=url,
            flatcar_url=served_feeds.url("/releases-{channel}.json"),
            nvidia_url=served_feeds.url("/nvidia.json"),
            repository=plain_registry.repository(registry_name),
            kubeconfig=kube_api.write_kubeconfig(tmp_path / "kubeconfig"),
            namespace=kube_api.namespace,
            extra=(
                f'[slack]\nchannel = "{CHANNEL}"\nbase_url = "{slack.base_url}"\n'
                f'[run]\nlisten = "127.0.0.1:{port}"\nleader_election = "none"\n'
                'log_format = "json"\ninterval_seconds = 3600\n'
            ),
        )
        env = {"RELEASEBOT_SLACK_BOT_TOKEN": BOT_TOKEN}
        bot = stack.enter_context(
            ReleasebotProcess(
                ["run", "--config", str(config)], tmp_path / "run.log", port=port, env=env
            )
        )
        bot.wait_serving()
        wait_for(lambda: "cycle completed" in bot.output(), timeout=60, what="the first cycle")

        proxy.cut()
        down = wait_for(
            lambda: (
                (r := bot.get("/readyz", timeout=15)) is not None and r.status_code == 503 and r
            ),
            timeout=60,
            what="/readyz 503",
        )
        assert "store unreachable" in down.text, down.text
        assert "***" in down.text, down.text
        wait_for(lambda: "notifications not delivered" in bot.output(), timeout=40, what="the line")
        time.sleep(25)  # two or three more rounds fail while the database is away
        proxy.restore()
        wait_for(
            lambda: "delivery works again" in bot.output(), timeout=60, what="the recovery line"
        )
        assert bot.terminate() == 0
        output = bot.output()

    assert_no_traceback(output)
    records = [json.loads(line) for line in output.splitlines() if line.startswith("{")]
    assert all("exc" not in record for record in records), output
    outage_lines = [r for r in records if r["message"].startswith("notifications not delivered")]
    assert len(outage_lines) == 1, output
    assert outage_lines[0]["level"] == "warning"
    assert len([r for r in records if "delivery works again" in r["message"]]) == 1, output
    for secret in OUTAGE_SECRETS:
        assert secret not in output, output
        assert secret not in down.text, down.text


# -- rows only the service reads ------------------------------------------------------------


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_outbox_row_of_an_unknown_kind_is_named(tmp_path: Path, backend: str) -> None:
    """An event kind a newer releasebot wrote, met by a delivery round: one ``StoreError``
    naming the outbox row (the round logs it once), never a ``ValueError``; the row stays."""
    from datetime import UTC, datetime

    from releasebot.domain.shared.errors import StoreError
    from releasebot.store import migrate
    from releasebot.store.sql import SqlStateStore

    with database(backend, tmp_path) as url:
        migrate.upgrade(url)
        execute(
            url,
            [
                "INSERT INTO outbox (kind, message_key, subject, payload, created_at, attempts)"
                " VALUES ('teleported', 'k#1', 's', '{}', '2026-01-01 00:00:00', 0)"
            ],
        )
        before = snapshot(url, ["outbox"])
        engine = make_engine(url)
        try:
            with pytest.raises(StoreError) as raised:
                SqlStateStore(engine).pending_events(datetime(2026, 1, 2, tzinfo=UTC))
        finally:
            engine.dispose()
        assert "table outbox, row id=1" in str(raised.value)
        assert "teleported" in str(raised.value)
        assert snapshot(url, ["outbox"]) == before
