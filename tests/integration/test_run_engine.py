"""``releasebot run`` opens ONE database engine, ONE reconcile service and one Kubernetes
client per API server configuration for everything it does.

The cycle's store, the runner's guard and gauges, notification delivery (every few
seconds, under the cycle guard) and the chat commands' service all share the engine;
before, every delivery round built and disposed of an engine of its own. The chat commands
use the cycle's reconcile service, and the build Jobs, the fleet and the proof's Node
annotations share one Kubernetes client (the settings' check at start makes and closes one
more; with ``leader_election = "none"`` there is no Lease client); before, the chat commands
had a reconcile service of their own and each part its own client. Here ``run_service`` runs in a
thread of the test (the only way to count what it builds) against real parts: SQLite, the
feeds over HTTP, the OCI registry, and the fakes over real HTTP for the Kubernetes API and
Slack. Engines are counted where SQLAlchemy makes them; delivery rounds where the
notification service runs one. The delivery period is shortened through the run wiring's
own ``runner_options`` so that ten periods take a second, not a minute and a half.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import replace
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from releasebot.config import Settings, load_settings
from releasebot.edge import kube as kube_module
from releasebot.runtime.runner import RunnerOptions
from releasebot.service.notifications import DeliveryReport, NotificationService
from releasebot.service.reconcile import ReconcileService
from releasebot.store import engine as engine_module
from releasebot.wiring import run as run_module
from tests.support.feedserver import FeedServer
from tests.support.kubeapi import FakeKubeApi
from tests.support.registryserver import RunningRegistry
from tests.support.runprocess import free_port, wait_for, write_config
from tests.support.slackapi import BOT_TOKEN, CHANNEL, SlackApi

SECRET = "8f742231b10e8888abcd99yyyzzz85a5"
TAG = "580.178.04-flatcar4593.2.5"
PERIODS = 10


@pytest.fixture
def slack() -> Iterator[SlackApi]:
    with SlackApi() as api:
        yield api


def settings_for(
    tmp_path: Path,
    feeds: FeedServer,
    slack: SlackApi,
    registry: RunningRegistry,
    registry_name: str,
    kube_api: FakeKubeApi,
) -> Settings:
    config = write_config(
        tmp_path / "releasebot.toml",
        database_url=f"sqlite:///{tmp_path / 'state.db'}",
        flatcar_url=feeds.url("/releases-{channel}.json"),
        nvidia_url=feeds.url("/nvidia.json"),
        repository=registry.repository(registry_name),
        kubeconfig=kube_api.write_kubeconfig(tmp_path / "kubeconfig"),
        namespace=kube_api.namespace,
        port=free_port(),
        leader_election="none",
    )
    with config.open("a", encoding="utf-8") as extra:
        extra.write(f'[slack]\nchannel = "{CHANNEL}"\nbase_url = "{slack.base_url}"\n')
    environ = {
        "RELEASEBOT_RUN_IDENTITY": "replica-a",
        "RELEASEBOT_SLACK_BOT_TOKEN": BOT_TOKEN,
        "RELEASEBOT_SLACK_SIGNING_SECRET": SECRET,  # the chat commands are wired too
        "RELEASEBOT_FLEET_ENABLED": "true",  # the fleet's client, and the proof's annotator
        "RELEASEBOT_FLEET_PROOF": "true",
    }
    return load_settings(config, environ=environ)


@pytest.mark.timeout(90)
@pytest.mark.usefixtures("logging_restored")
def test_ten_delivery_periods_of_run_open_one_engine(
    tmp_path: Path,
    served_feeds: FeedServer,
    slack: SlackApi,
    plain_registry: RunningRegistry,
    registry_name: str,
    kube_api: FakeKubeApi,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    settings = settings_for(tmp_path, served_feeds, slack, plain_registry, registry_name, kube_api)
    engines: list[object] = []
    create_engine = engine_module.create_engine

    def counting_create_engine(*args: Any, **kwargs: Any) -> Any:
        engine = create_engine(*args, **kwargs)
        engines.append(engine)
        return engine

    monkeypatch.setattr(engine_module, "create_engine", counting_create_engine)
    rounds: list[datetime] = []
    deliver = NotificationService.deliver

    def counting_deliver(self: NotificationService, now: datetime) -> DeliveryReport:
        rounds.append(now)
        return deliver(self, now)

    monkeypatch.setattr(NotificationService, "deliver", counting_deliver)
    clients: list[object] = []
    make_kube_client = kube_module.make_kube_client

    def counting_make_kube_client(*args: Any, **kwargs: Any) -> Any:
        clients.append(args)
        return make_kube_client(*args, **kwargs)

    monkeypatch.setattr(kube_module, "make_kube_client", counting_make_kube_client)
    services: list[ReconcileService] = []
    reconcile_init = ReconcileService.__init__

    def counting_init(self: ReconcileService, *args: Any, **kwargs: Any) -> None:
        services.append(self)
        reconcile_init(self, *args, **kwargs)

    monkeypatch.setattr(ReconcileService, "__init__", counting_init)
    runner_options = run_module.runner_options

    def fast(settings: Settings) -> RunnerOptions:
        return replace(runner_options(settings), deliver_every=timedelta(milliseconds=50))

    monkeypatch.setattr(run_module, "runner_options", fast)

    stop = threading.Event()
    service = threading.Thread(
        target=run_module.run_service, args=(settings,), kwargs={"stop": stop, "quiet": True}
    )
    service.start()
    try:
        wait_for(lambda: len(rounds) >= PERIODS, timeout=60, what=f"{PERIODS} delivery rounds")
        posted = wait_for(
            lambda: [m for m in slack.messages() if m.thread_ts is None and TAG in m.text],
            timeout=30,
            what="the build message in Slack",
        )
    finally:
        stop.set()
        service.join(timeout=40)
    assert not service.is_alive()
    assert len(posted) == 1  # the deliveries were real ones, and told the build once
    assert len(rounds) >= PERIODS
    assert len(engines) == 1
    assert len(services) == 1
    assert len(clients) == 2  # the settings' check (closed at once), then the shared one
