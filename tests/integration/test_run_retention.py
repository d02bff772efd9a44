"""``releasebot run`` with ``[retention] enabled = true, dry_run = false``: the leader runs
retention on its schedule, deletes the tag nothing needs from the real registry, keeps
the one a GPU node runs, records the deletion and tells Slack once.

Real parts: SQLite, the feeds over HTTP, the OCI registry; the fakes over real HTTP for
the Kubernetes API (one GPU node) and Slack. The store is seeded as polls long ago left
it (a release listed 200 days ago and dropped 100 days ago); the retention check period
is shortened through the run wiring's own ``runner_options``.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest

from releasebot.config import Settings
from releasebot.runtime.runner import RunnerOptions
from releasebot.store import migrate
from releasebot.store.engine import make_engine
from releasebot.store.sql import SqlStateStore
from releasebot.wiring import run as run_module
from tests.contract.test_store_contract import SEEN, URL, flatcar
from tests.integration.test_run_engine import settings_for
from tests.support.feedserver import FeedServer
from tests.support.fleetnodes import gpu_node
from tests.support.kubeapi import FakeKubeApi
from tests.support.registryserver import RunningRegistry
from tests.support.runprocess import wait_for
from tests.support.slackapi import SlackApi

GONE = "580.105.08-flatcar4230.2.4"
RUNNING = "580.178.04-flatcar4593.2.5"


@pytest.fixture
def slack_api() -> Iterator[SlackApi]:
    with SlackApi() as api:
        yield api


def seed(path: Path) -> None:
    engine = make_engine(f"sqlite:///{path}")
    migrate.upgrade(engine)
    store = SqlStateStore(engine)
    now = datetime.now(UTC)
    store.record_flatcar_feed("stable", URL, [flatcar("4230.2.4")], SEEN, now - timedelta(days=200))
    store.record_flatcar_feed("stable", URL, [], SEEN, now - timedelta(days=100))
    engine.dispose()


def tags(registry: RunningRegistry, name: str) -> set[str]:
    answer = httpx.get(f"{registry.base_url}/v2/{name}/tags/list")
    return set(answer.json()["tags"] or [])


@pytest.mark.timeout(90)
@pytest.mark.usefixtures("logging_restored")
def test_the_service_runs_retention_on_the_leader_and_tells_each_deletion_once(
    tmp_path: Path,
    served_feeds: FeedServer,
    slack_api: SlackApi,
    plain_registry: RunningRegistry,
    registry_name: str,
    kube_api: FakeKubeApi,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    base = settings_for(tmp_path, served_feeds, slack_api, plain_registry, registry_name, kube_api)
    settings: Settings = replace(
        base,
        fleet=replace(base.fleet, enabled=True),
        retention=replace(base.retention, enabled=True, dry_run=False),
    )
    seed(tmp_path / "state.db")
    kube_api.fleet.add_nodes(gpu_node("gpu-0", "4593.2.5"))
    gone = plain_registry.push_image(registry_name, GONE)
    plain_registry.push_image(registry_name, RUNNING)
    runner_options = run_module.runner_options

    def fast(settings: Settings) -> RunnerOptions:
        return replace(
            runner_options(settings),
            retention_check_every=timedelta(milliseconds=100),
            deliver_every=timedelta(milliseconds=100),
        )

    monkeypatch.setattr(run_module, "runner_options", fast)
    stop = threading.Event()
    service = threading.Thread(
        target=run_module.run_service, args=(settings,), kwargs={"stop": stop, "quiet": True}
    )
    service.start()
    try:
        wait_for(
            lambda: GONE not in tags(plain_registry, registry_name),
            timeout=60,
            what="retention deleting the tag nothing needs",
        )
        wait_for(
            lambda: [m for m in slack_api.messages() if "Deleted" in m.text and GONE in m.text],
            timeout=30,
            what="the deletion in Slack",
        )
        assert RUNNING in tags(plain_registry, registry_name)
    finally:
        stop.set()
        service.join(timeout=40)
    assert not service.is_alive()
    told = [m for m in slack_api.messages() if "Deleted" in m.text]
    assert len(told) == 1  # many retention checks and delivery rounds ran: told once
    assert gone in str(told[0].blocks)
    engine = make_engine(f"sqlite:///{tmp_path / 'state.db'}")
    (recorded,) = SqlStateStore(engine).deletions()
    engine.dispose()
    assert (recorded.tag, recorded.digest) == (GONE, gone)
