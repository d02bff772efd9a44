"""The shipped alerts and dashboard against the real thing: Debian's ``prometheus`` scraping a
real ``releasebot run``.

The bot runs as a process on the demo's data (its feeds over HTTP, its simulated fleet as
Nodes of the fake Kubernetes API), with SQLite, the real OCI registry and the fake Slack
API, one build at a time, the proof and the gate on, and a configured channel whose feed
URL is wrong (404). The test plays Kaniko: the first build fails for good (NonZeroExit),
the second is published, the third stays running, the rest wait: failed, published,
building and missing targets, a node on a version without an image, one about to reboot
into one. Slack refuses every message, so the outbox grows.

Prometheus (loopback, a free port, its own storage directory) scrapes ``/metrics`` every
second and evaluates a copy of ``config/components/alerts`` whose ``for`` durations are one
second (nothing else changed). Through its HTTP API the test asserts: every rule is loaded
and evaluates without error, every rule expression parses and the series it names exist,
the alerts this scenario must raise are pending or firing with their annotations expanded
(no template error), every dashboard query (Grafana's
variables filled in) parses and returns series, and every series releasebot exports
reaches Prometheus. Finally the bot stops and ``ReleasebotDown`` goes off. No timed
assertion: each condition is polled with a generous deadline.

Skipped when ``prometheus`` is missing (Debian's ``prometheus`` package); failed in CI.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.builds import KanikoPlayer
from tests.support.feedserver import FeedServer
from tests.support.kubeapi import FakeKubeApi
from tests.support.prometheus import (
    SERIES,
    RunningPrometheus,
    alerts,
    dashboard_queries,
    exported_series,
    rule_groups,
    runnable,
    tool,
    write_rules,
)
from tests.support.registryserver import RunningRegistry
from tests.support.runprocess import ReleasebotProcess, free_port, wait_for, write_config
from tests.support.slackapi import BOT_TOKEN, CHANNEL, SlackApi

DEMO = Path(__file__).resolve().parents[2] / "releasebot" / "demo"

EXPECTED_ALERTS = {
    "ReleasebotRequiredTagsMissing",  # missing, building and failed targets
    "ReleasebotBuildsFailed",  # the first build failed for good
    "ReleasebotFeedNeverAnswered",  # the alpha channel's feed answers 404
    "ReleasebotFleetNodeWithoutImage",  # demo nodes run versions still unbuilt
    "ReleasebotFleetPendingRebootWithoutImage",  # the beta node reboots into an unbuilt one
}
QUIET_ALERTS = {
    "ReleasebotFeedFailing": "the feeds that answered did so seconds ago; six hours "
    "cannot pass here (the promtool tests fire it)",
    "ReleasebotNoLeaderCycling": "the bot completes a cycle every second",
    "ReleasebotNotificationsStuck": "it needs a backlog that has not shrunk for a whole "
    "minute (the runner's judgement) or above 20: it may or may not be pending by the end",
    "ReleasebotDown": "the bot is up; the test stops it at the end and sees this alert",
    "ReleasebotDriverRefusedOnNode": "no node comes back from a reboot here, so none is "
    "refused; the proof's series exist (a node armed)",
}
EMPTY_QUERIES: dict[str, str] = {}
"""Dashboard queries that legitimately return nothing in this scenario, and why (none)."""


@pytest.fixture
def slack() -> Iterator[SlackApi]:
    with SlackApi() as api:
        yield api


@pytest.fixture
def demo_feeds() -> Iterator[FeedServer]:
    """The demo's feeds; the alpha channel's URL answers 404 (the FeedServer's default)."""
    with FeedServer() as server:
        for path, name in [
            ("/releases-stable.json", "releases-stable.json"),
            ("/releases-beta.json", "releases-beta.json"),
            ("/nvidia.json", "nvidia-releases.json"),
        ]:
            server.route(path, FeedServer.static((DEMO / name).read_bytes(), etag='"1"'))
        yield server


def prometheus_config(rules: Path, port: int) -> dict[str, Any]:
    return {
        # 2 s: one scrape of a process busy with its cycle may take more than 1 s on a
        # loaded machine, and a failed scrape makes every series stale (absent() would go
        # pending).
        "global": {"scrape_interval": "2s", "scrape_timeout": "2s", "evaluation_interval": "1s"},
        "rule_files": [str(rules)],
        "scrape_configs": [
            {
                "job_name": "releasebot",
                "static_configs": [{"targets": [f"127.0.0.1:{port}"]}],
            }
        ],
    }


def shortened(groups: list[dict[str, Any]]) -> list[dict[str, Any]]:
    for group in groups:
        for rule in group["rules"]:
            rule["for"] = "1s"
    return groups


def active(prometheus: RunningPrometheus) -> dict[str, str]:
    """Alert name -> its state (pending or firing); firing wins over pending."""
    states: dict[str, str] = {}
    for alert in prometheus.alerts():
        name = alert["labels"]["alertname"]
        if states.get(name) != "firing":
            states[name] = alert["state"]
    return states


@pytest.mark.timeout(300)
def test_prometheus_scrapes_releasebot_and_raises_the_shipped_alerts(
    tmp_path: Path,
    demo_feeds: FeedServer,
    slack: SlackApi,
    plain_registry: RunningRegistry,
    registry_name: str,
    kube_api: FakeKubeApi,
) -> None:
    tool("prometheus")  # before anything starts: skip (or fail in CI) with the reason
    port = free_port()
    config = write_config(
        tmp_path / "releasebot.toml",
        database_url=f"sqlite:///{tmp_path / 'state.db'}",
        flatcar_url=demo_feeds.url("/releases-{channel}.json"),
        nvidia_url=demo_feeds.url("/nvidia.json"),
        repository=plain_registry.repository(registry_name),
        kubeconfig=kube_api.write_kubeconfig(tmp_path / "kubeconfig"),
        namespace=kube_api.namespace,
        port=port,
        channels=("stable", "alpha"),
        keep=2,
    )
    with config.open("a", encoding="utf-8") as extra:
        extra.write(
            "[build]\nmax_concurrent_builds = 1\n"
            "[fleet]\nenabled = true\ngate = true\nproof = true\n"
            f'[slack]\nchannel = "{CHANNEL}"\nbase_url = "{slack.base_url}"\n'
        )
    kube_api.fleet.add_nodes(*json.loads((DEMO / "fleet.json").read_text(encoding="utf-8")))
    slack.fail("chat.postMessage", times=1_000_000, error="not_in_channel")
    rules = write_rules(tmp_path / "rules.yaml", shortened(rule_groups()))
    (tmp_path / "prometheus").mkdir()
    env = {"RELEASEBOT_RUN_IDENTITY": "replica-a", "RELEASEBOT_SLACK_BOT_TOKEN": BOT_TOKEN}
    args = ["run", "--config", str(config)]
    with (
        ReleasebotProcess(args, tmp_path / "run.log", port=port, env=env) as bot,
        RunningPrometheus(prometheus_config(rules, port), tmp_path / "prometheus") as prometheus,
    ):
        bot.wait_serving()
        prometheus.wait_ready()
        player = KanikoPlayer(kube_api, plain_registry)
        [first] = wait_for(player.job_names, timeout=60, what="the first build Job")
        kube_api.exit_nonzero(first, 2, log="make: *** [Makefile:12: modules] Error 2\n")

        def second_job() -> list[str]:
            return [name for name in player.job_names() if name != first]

        [second] = wait_for(second_job, timeout=60, what="the second build Job")
        player.build(second)
        wait_for(lambda: len(player.job_names()) >= 3, timeout=60, what="a third Job, left running")

        # Every rule loaded, evaluated, without error.
        def evaluated() -> list[dict[str, Any]]:
            loaded = prometheus.rules()
            done = all(rule["health"] == "ok" for rule in loaded)
            return loaded if done and len(loaded) == len(alerts()) else []

        loaded = wait_for(evaluated, timeout=60, every=0.5, what="every rule evaluated")
        assert {rule["name"] for rule in loaded} == set(alerts())
        assert all(not rule.get("lastError") for rule in loaded), loaded

        # The alerts the scenario raises.
        states: dict[str, str] = {}

        def raised() -> bool:
            states.clear()
            states.update(active(prometheus))
            return set(states) >= EXPECTED_ALERTS

        try:
            wait_for(raised, timeout=120, every=0.5, what="the expected alerts")
        except AssertionError:
            expected = sorted(EXPECTED_ALERTS)
            pytest.fail(f"expected {expected}, active: {states}\n{bot.output()[-3000:]}")
        assert {states[name] for name in EXPECTED_ALERTS} <= {"pending", "firing"}
        # Not firing while releasebot runs (one slow scrape may make it pending for a moment).
        assert states.get("ReleasebotDown") != "firing"
        # Their annotations as Prometheus expanded them, on real labels and values.
        for alert in prometheus.alerts():
            name = alert["labels"]["alertname"]
            shipped = alerts()[name]["annotations"]
            assert alert["annotations"]["runbook_url"] == shipped["runbook_url"]
            for key in ("summary", "description"):
                text = alert["annotations"][key]
                assert text.strip(), (name, key)
                for broken in ("error expanding template", "{{", "<no value>"):
                    assert broken not in text, (name, key, text)

        # Every series releasebot exports reached Prometheus (a renamed one would not).
        missing: set[str] = set()

        def scraped() -> bool:
            found = prometheus.query('count by (__name__) ({__name__=~"releasebot_.*"})')
            missing.clear()
            missing.update(exported_series() - {sample["metric"]["__name__"] for sample in found})
            return not missing

        try:
            wait_for(scraped, timeout=60, every=0.5, what="every exported series scraped")
        except AssertionError:
            pytest.fail(f"series releasebot exports that Prometheus never got: {sorted(missing)}")

        # Every rule expression parses; the quiet ones name series that exist.
        assert set(QUIET_ALERTS) | EXPECTED_ALERTS == set(alerts())
        for name, rule in alerts().items():
            result = prometheus.query(rule["expr"])  # a parse error fails here, with its text
            if name in EXPECTED_ALERTS:
                assert result, name
            for series in SERIES.findall(rule["expr"]):
                assert prometheus.query(f"count({series})"), (name, series)

        # Every dashboard query parses and returns series.
        unanswered: list[tuple[str, str]] = []

        def all_answered() -> bool:
            unanswered[:] = [
                (title, query)
                for title, query in dashboard_queries()
                if query not in EMPTY_QUERIES and not prometheus.query(runnable(query))
            ]
            return not unanswered

        try:
            wait_for(all_answered, timeout=60, every=0.5, what="every dashboard query")
        except AssertionError:
            pytest.fail(f"dashboard queries without series: {unanswered}")

        # The bot goes away: its series go stale, and ReleasebotDown goes off.
        assert bot.terminate() == 0
        wait_for(
            lambda: "ReleasebotDown" in active(prometheus),
            timeout=60,
            every=0.5,
            what="ReleasebotDown after the bot stopped",
        )
    log = (tmp_path / "run.log").read_text()
    assert BOT_TOKEN not in log
