"""A feed with a poisoned body fails alone: in ``reconcile --once`` and in ``run``.

The other feeds are polled, the poisoned feed's row is marked failing, and once it has
failed for ``slack.feed_alert_after`` the feed-failing alert reaches Slack (the fake Web
API over real HTTP). The failure streak's start is back-dated in the database rather than
waited for: the minimum alert delay is a minute.
"""

from __future__ import annotations

import sqlite3
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from releasebot.cli import main
from tests.hostile.conftest import assert_no_traceback
from tests.support.feedserver import FeedServer, Reply
from tests.support.kubeapi import FakeKubeApi
from tests.support.registryserver import RunningRegistry
from tests.support.runprocess import ReleasebotProcess, free_port, wait_for, write_config
from tests.support.slackapi import BOT_TOKEN, CHANNEL, SlackApi

POISON = b'{"current": {"version": ' + b"9" * 5000 + b"}}"
"""5,000 digits: Python's json raises ValueError past 4,300, which once ended every cycle."""
FAILING_FLAG = "feed-failing:flatcar/stable"


@pytest.fixture
def slack() -> Any:
    with SlackApi() as api:
        yield api


@pytest.fixture
def feeds(test_data: Path) -> Any:
    with FeedServer() as server:
        for path, name in [
            ("/releases-stable.json", "flatcar/releases-stable.json"),
            ("/releases-beta.json", "flatcar/releases-beta.json"),
            ("/nvidia.json", "nvidia/releases.json"),
        ]:
            body = (test_data / name).read_bytes()
            server.route(path, Reply(200, {"Content-Type": "application/json"}, body))
        yield server


def make_config(
    tmp_path: Path,
    feeds: FeedServer,
    registry: str,
    kube_api: FakeKubeApi,
    slack: SlackApi,
    port: int = 0,
) -> Path:
    config = write_config(
        tmp_path / "releasebot.toml",
        database_url=f"sqlite:///{tmp_path / 'state.db'}",
        flatcar_url=feeds.url("/releases-{channel}.json"),
        nvidia_url=feeds.url("/nvidia.json"),
        repository=registry,
        kubeconfig=kube_api.write_kubeconfig(tmp_path / "kubeconfig"),
        namespace=kube_api.namespace,
        port=port,
        channels=("stable", "beta"),
    )
    with config.open("a", encoding="utf-8") as extra:
        extra.write(
            f'[slack]\nchannel = "{CHANNEL}"\nbase_url = "{slack.base_url}"\n'
            "feed_alert_after_seconds = 60\n"
        )
    return config


def feed_rows(database: Path) -> dict[str, tuple[Any, ...]]:
    with sqlite3.connect(database, timeout=30) as db:
        found = db.execute(
            "select name, consecutive_failures, last_error, last_success_at from feeds"
        ).fetchall()
    return {row[0]: row[1:] for row in found}


def backdate_failing(database: Path) -> bool:
    """Say the stable feed's failures began two hours ago; False if no streak is stored."""
    since = (datetime.now(UTC) - timedelta(hours=2)).isoformat()
    with sqlite3.connect(database, timeout=30) as db:
        changed = db.execute("update flags set value = ? where name = ?", (since, FAILING_FLAG))
        return changed.rowcount == 1


def alerts(slack: SlackApi) -> list[str]:
    return [m.text for m in slack.messages() if "flatcar/stable" in m.text and "ail" in m.text]


def test_reconcile_once_polls_the_others_marks_it_failing_and_alerts(
    tmp_path: Path,
    feeds: FeedServer,
    plain_registry: RunningRegistry,
    registry_name: str,
    kube_api: FakeKubeApi,
    slack: SlackApi,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("RELEASEBOT_SLACK_BOT_TOKEN", BOT_TOKEN)
    config = make_config(tmp_path, feeds, plain_registry.repository(registry_name), kube_api, slack)
    database = tmp_path / "state.db"
    argv = ["reconcile", "--once", "-q", "--config", str(config)]
    assert main(argv) == 0, capsys.readouterr().err
    capsys.readouterr()
    feeds.route("/releases-stable.json", Reply(200, {"Content-Type": "application/json"}, POISON))

    code = main(argv)
    out, err = capsys.readouterr()
    assert code == 0, err  # the plan was made from the other feeds and what is stored
    assert_no_traceback(out, err)
    assert "feed flatcar/stable: an integer of 5000 digits" in err
    rows = feed_rows(database)
    assert rows["flatcar/stable"][0] == 1
    assert rows["flatcar/beta"][0] == rows["nvidia"][0] == 0
    assert alerts(slack) == []  # failing for less than feed_alert_after

    assert backdate_failing(database)
    code = main(argv)
    out, err = capsys.readouterr()
    assert code == 0, err
    assert_no_traceback(out, err)
    assert feed_rows(database)["flatcar/stable"][0] == 2
    [alert] = alerts(slack)
    assert "integer of 5000 digits" in alert


@pytest.mark.timeout(120)
def test_run_polls_the_others_marks_it_failing_and_alerts(
    tmp_path: Path,
    feeds: FeedServer,
    plain_registry: RunningRegistry,
    registry_name: str,
    kube_api: FakeKubeApi,
    slack: SlackApi,
) -> None:
    port = free_port()
    config = make_config(
        tmp_path, feeds, plain_registry.repository(registry_name), kube_api, slack, port
    )
    database = tmp_path / "state.db"
    feeds.route("/releases-stable.json", Reply(200, {"Content-Type": "application/json"}, POISON))
    env = {"RELEASEBOT_RUN_IDENTITY": "replica-a", "RELEASEBOT_SLACK_BOT_TOKEN": BOT_TOKEN}
    args = ["run", "--config", str(config)]
    with ReleasebotProcess(args, tmp_path / "run.log", port=port, env=env) as bot:
        bot.wait_serving()

        def others_polled_and_stable_failing() -> bool:
            rows = feed_rows(database) if database.exists() else {}
            return (
                rows.get("flatcar/stable", (0,))[0] >= 1
                and rows.get("flatcar/beta", (1, None, None))[2] is not None
                and rows.get("nvidia", (1, None, None))[2] is not None
            )

        wait_for(others_polled_and_stable_failing, timeout=60, what="the feeds polled")
        wait_for(lambda: backdate_failing(database), timeout=30, what="the failure streak")
        wait_for(lambda: alerts(slack), timeout=60, what="the feed-failing alert")
        log = bot.output()
    assert_no_traceback(log)
    assert "cycle failed unexpectedly" not in log
    assert "an integer of 5000 digits" in log
