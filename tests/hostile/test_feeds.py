"""Hostile feed answers, replayed through ``releasebot plan`` over real HTTP.

Each case of ``tests/data/hostile/feeds/`` poisons one feed (Flatcar stable, or NVIDIA)
after a good poll has stored it; the other feeds answer well. The case passes when: no
traceback anywhere, the poisoned feed's problem is one clean line on stderr (and in its
feed row, which counts the failure), the other feeds were polled, what was stored from
the good poll is unchanged, and the exit code is the documented one (0: the plan was made
from what is known).
"""

from __future__ import annotations

import logging
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from releasebot.cli import main
from tests.hostile.conftest import (
    Case,
    assert_absent,
    assert_clean_line,
    assert_no_traceback,
    body_of,
    cases,
)
from tests.support.feedserver import FeedServer, Reply
from tests.support.registryserver import RunningRegistry

FEEDS = {"stable": "/releases-stable.json", "beta": "/releases-beta.json", "nvidia": "/nvidia.json"}
STORED_AS = {"stable": "flatcar/stable", "beta": "flatcar/beta", "nvidia": "nvidia"}


def write_config(path: Path, server: FeedServer, registry: str, database: Path) -> Path:
    path.write_text(
        f"""
[database]
url = "sqlite:///{database}"
[flatcar]
feed_url = "{server.url("/releases-{channel}.json")}"
channels = ["stable", "beta"]
keep = 1
[nvidia]
feed_url = "{server.url("/nvidia.json")}"
branches = ["580"]
[registry]
repository = "{registry}"
insecure = true
[recipe]
check_inputs = false
""",
        encoding="utf-8",
    )
    return path


def rows(database: Path, query: str) -> list[tuple[Any, ...]]:
    with sqlite3.connect(database) as db:
        return db.execute(query).fetchall()


def feed_rows(database: Path) -> dict[str, tuple[Any, ...]]:
    found = rows(
        database,
        "select name, last_success_at, consecutive_failures, last_error, last_polled_at from feeds",
    )
    return {row[0]: row[1:] for row in found}


STORED = {
    "flatcar": "select * from flatcar_releases order by 1, 2",
    "drivers": "select * from driver_releases order by 1, 2",
}


def reply_of(case: Case, server: FeedServer) -> Reply:
    if "redirect" in case.data:
        location = case["redirect"].replace("{server}", server.url(""))
        return Reply(int(case.get("status", 302)), {"Location": location})
    return Reply(
        int(case.get("status", 200)),
        dict(case.get("headers", {"Content-Type": "application/json"})),
        body_of(case.get("body", "")),
    )


@pytest.fixture
def rig(
    tmp_path: Path, test_data: Path, plain_registry: RunningRegistry, registry_name: str
) -> Any:
    server = FeedServer().start()
    bodies = {
        "stable": (test_data / "flatcar/releases-stable.json").read_bytes(),
        "beta": (test_data / "flatcar/releases-beta.json").read_bytes(),
        "nvidia": (test_data / "nvidia/releases.json").read_bytes(),
    }
    for name, body in bodies.items():  # no validators: a 304 answers nothing sent
        server.route(FEEDS[name], Reply(200, {"Content-Type": "application/json"}, body))
    database = tmp_path / "state.db"
    config = write_config(
        tmp_path / "releasebot.toml", server, plain_registry.repository(registry_name), database
    )
    yield server, config, database
    server.stop()


@pytest.mark.parametrize("case", cases("feeds"))
def test_a_poisoned_feed_fails_alone(
    case: Case, rig: Any, capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    server, config, database = rig
    assert main(["plan", "-q", "--config", str(config)]) == 0, capsys.readouterr().err
    capsys.readouterr()
    stored = {name: rows(database, query) for name, query in STORED.items()}
    before = feed_rows(database)
    poisoned = case.get("feed", "stable")
    server.route(FEEDS[poisoned], reply_of(case, server))
    requests_before = len(server.requests)

    with caplog.at_level(logging.DEBUG):
        code = main(["plan", "-q", "--config", str(config)])
    out, err = capsys.readouterr()

    assert code == case.get("exit", 0), err
    assert_no_traceback(out, err, caplog.text)
    assert all(record.exc_info is None for record in caplog.records)
    lines = [line for line in err.splitlines() if line.strip()]
    for line in lines:
        assert_clean_line(line)
    [problem] = [line for line in lines if f"feed {STORED_AS[poisoned]}:" in line] or [err]
    assert_clean_line(problem, case["problem"])
    assert_absent(err, case.get("never_shown"))
    after = feed_rows(database)
    row = STORED_AS[poisoned]
    assert after[row][1] == before[row][1] + 1  # counted as failing
    assert_clean_line(after[row][2], case["problem"])
    for name in STORED_AS.values():
        if name != row:  # polled, and well
            assert after[name][1] == 0
            assert after[name][3] > before[name][3]
    assert {name: rows(database, query) for name, query in STORED.items()} == stored
    if "redirect" in case.data:  # a refused redirect is never asked
        assert all(r.path in FEEDS.values() for r in server.requests[requests_before:])
