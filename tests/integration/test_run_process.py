"""``releasebot run`` as a REAL process: its endpoints over HTTP, its metrics through
``prometheus_client``'s parser, its JSON log lines, and a clean exit on SIGTERM.

Wired from a settings file to SQLite, HTTP feeds on loopback, the real registry and the
fake Kubernetes API (a kubeconfig; Leases for the election), with a 1 s interval. The test
plays Kaniko for the Job the first cycle launches and watches the next cycles publish it.
A bad setting ends the process at once with exit code 2 and one line naming the key.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.builds import KanikoPlayer
from tests.support.feedserver import FeedServer
from tests.support.kubeapi import FakeKubeApi
from tests.support.registryserver import RunningRegistry
from tests.support.runprocess import ReleasebotProcess, free_port, wait_for, write_config

TAG = "580.178.04-flatcar4593.2.5"


@pytest.fixture
def config(
    tmp_path: Path,
    served_feeds: FeedServer,
    plain_registry: RunningRegistry,
    registry_name: str,
    kube_api: FakeKubeApi,
) -> Path:
    return write_config(
        tmp_path / "releasebot.toml",
        database_url=f"sqlite:///{tmp_path / 'state.db'}",
        flatcar_url=served_feeds.url("/releases-{channel}.json"),
        nvidia_url=served_feeds.url("/nvidia.json"),
        repository=plain_registry.repository(registry_name),
        kubeconfig=kube_api.write_kubeconfig(tmp_path / "kubeconfig"),
        namespace=kube_api.namespace,
        port=free_port(),
    )


def port_of(config: Path) -> int:
    return int(config.read_text().split('listen = "127.0.0.1:')[1].split('"')[0])


@pytest.mark.timeout(90)
def test_run_serves_probes_and_metrics_and_stops_on_sigterm(
    config: Path,
    tmp_path: Path,
    kube_api: FakeKubeApi,
    plain_registry: RunningRegistry,
) -> None:
    args = ["run", "--config", str(config)]
    env = {"RELEASEBOT_RUN_IDENTITY": "replica-a"}
    with ReleasebotProcess(args, tmp_path / "run.log", port=port_of(config), env=env) as bot:
        bot.wait_serving()
        player = KanikoPlayer(kube_api, plain_registry)
        [job] = wait_for(player.job_names, timeout=30, what="the first cycle's Job")
        assert bot.get("/readyz").status_code == 200  # type: ignore[union-attr]
        metrics = bot.metrics()
        assert metrics[("releasebot_is_leader", ())] == 1
        assert metrics[("releasebot_builds_started_total", ())] == 1
        assert metrics[("releasebot_required_tags_unpublished", ())] == 1
        assert metrics[("releasebot_last_cycle_timestamp_seconds", ())] > 0
        polls = ("releasebot_feed_polls_total", (("feed", "nvidia"), ("result", "changed")))
        assert metrics[polls] == 1
        assert kube_api.leases()["releasebot-leader"]["spec"]["holderIdentity"] == "replica-a"

        digest = player.build(job)
        wait_for(
            lambda: bot.metric("releasebot_required_tags_unpublished") == 0,
            timeout=30,
            what="the build to be published",
        )
        finished = bot.metric("releasebot_builds_finished_total", reason="", result="succeeded")
        assert finished == 1
        assert bot.metric("releasebot_targets", state="published") == 1
        assert bot.metric("releasebot_build_duration_seconds_count") == 1
        assert bot.get("/nothing").status_code == 404  # type: ignore[union-attr]

        assert bot.terminate(timeout=20) == 0
        output = bot.output()
    assert len(kube_api.requests_to("POST", "jobs")) == 1  # one Job, however many cycles
    lease = kube_api.leases()["releasebot-leader"]["spec"]
    assert "holderIdentity" not in lease  # released on the way out
    lines = [json.loads(line) for line in output.splitlines()]
    decisions = [line for line in lines if line.get("action") == "published"]
    assert decisions
    assert decisions[0]["tag"] == TAG
    assert digest in decisions[0]["message"]
    assert any(line["message"] == "shutting down" for line in lines)


def test_a_bad_setting_exits_2_with_one_line(config: Path, tmp_path: Path) -> None:
    env = {"RELEASEBOT_RUN_LISTEN": "localhost"}
    with ReleasebotProcess(["run", "--config", str(config)], tmp_path / "bad.log", env=env) as bot:
        assert bot.wait(timeout=20) == 2
        output = bot.output()
    assert output.count("\n") == 1
    assert "RELEASEBOT_RUN_LISTEN" in output
    assert "HOST:PORT" in output
