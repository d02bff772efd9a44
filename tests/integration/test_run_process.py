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

import httpx
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
        # the coverage page and its API, on the probes' port ([web] listen left empty)
        page = bot.get("/")
        assert page is not None
        assert page.status_code == 200
        assert "/static/app.js" in page.text
        matrix = bot.get("/api/targets").json()  # type: ignore[union-attr]
        [row] = matrix["rows"]
        assert [cell["state"] for cell in row["cells"]] == ["published"]
        detail = bot.get(f"/api/targets/{TAG}").json()  # type: ignore[union-attr]
        assert detail["digest"] == digest
        assert detail["builds"][0]["jobs"][0]["job_name"] == job

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


@pytest.mark.timeout(60)
def test_the_page_on_a_port_of_its_own(config: Path, tmp_path: Path) -> None:
    page_port = free_port()
    env = {
        "RELEASEBOT_RUN_IDENTITY": "replica-a",
        "RELEASEBOT_WEB_LISTEN": f"127.0.0.1:{page_port}",
        "RELEASEBOT_WEB_ALLOWED_HOSTS": "releasebot.acme.example",
    }
    with ReleasebotProcess(
        ["run", "--config", str(config)], tmp_path / "run.log", port=port_of(config), env=env
    ) as bot:
        bot.wait_serving()
        page = f"http://127.0.0.1:{page_port}"
        feeds = wait_for(lambda: _answer(page + "/api/feeds"), timeout=20, what="the page")
        assert feeds.status_code == 200
        assert httpx.get(page + "/healthz").status_code == 404
        assert httpx.get(page + "/metrics").status_code == 404
        assert bot.get("/api/feeds").status_code == 404  # type: ignore[union-attr]
        assert bot.get("/healthz").status_code == 200  # type: ignore[union-attr]
        # both servers answer the allowed name and refuse any other (DNS rebinding)
        probes = f"http://127.0.0.1:{port_of(config)}"
        for url in (page + "/api/feeds", probes + "/metrics"):
            assert httpx.get(url, headers={"Host": "releasebot.acme.example"}).status_code == 200
            assert httpx.get(url, headers={"Host": "evil.example"}).status_code == 421
        assert bot.terminate(timeout=20) == 0


def _answer(url: str) -> httpx.Response | None:
    try:
        return httpx.get(url, timeout=2)
    except httpx.TransportError:
        return None


def test_a_bad_setting_exits_2_with_one_line(config: Path, tmp_path: Path) -> None:
    env = {"RELEASEBOT_RUN_LISTEN": "localhost"}
    with ReleasebotProcess(["run", "--config", str(config)], tmp_path / "bad.log", env=env) as bot:
        assert bot.wait(timeout=20) == 2
        output = bot.output()
    assert output.count("\n") == 1
    assert "RELEASEBOT_RUN_LISTEN" in output
    assert "HOST:PORT" in output
