"""The fleet end to end: GPU nodes on the fake Kubernetes API drive what the cycle builds.

Real: SQLite, the feeds over HTTP (the real stable snapshot, the real LTS feed for a node
on a channel nobody configured), the OCI registry, the Kubernetes API over HTTP (Jobs,
Nodes shaped as real ones, RBAC refusals), Slack's Web API fake over HTTP with slack-sdk's
client, Prometheus' client for the metrics. The test plays Kaniko (``KanikoPlayer``).

Covers: a node on a version outside ``keep`` gets its Job; a node's pending version gets
its Job before other due work and before FLUO reboots it; with the gate on, the annotation
appears only once that image is verified, goes when the pending version changes, and never
appears when the build fails; ``releasebot_fleet_nodes``/``releasebot_fleet_missing_images``
and the Slack alert rise once and fall once; the GPU Operator's own driver is built when
its ClusterPolicy pulls from releasebot's repository; Nodes that cannot be listed (RBAC)
are one line and one alert, the cycle completes on the channel policy and no target is
lost, and the fleet's targets come back when the listing does; a Node list with items that
are not Nodes (``null``) still builds for the nodes it shows, one line per item skipped,
and the fleet view is unsure (retention deletes nothing: ``tests/integration/
test_cli_retention.py``); a node whose name reads like another's once its control
characters are removed is shown escaped and never gets a gate written, to it or to the
other; a Node listing cut short by a bound opens no gate, however ready the node it shows.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from dataclasses import replace
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from releasebot.domain.fleet.nodes import DEFAULT_GATE_ANNOTATION, GATE_VERSION_ANNOTATION
from releasebot.domain.shared.versions import Arch
from releasebot.domain.targets.models import TargetReason, TargetState
from releasebot.fleet.gate import KubernetesNodeAnnotator
from releasebot.fleet.kubernetes import KubernetesFleetSource
from releasebot.notify.slack import SlackNotifier, make_web_client
from releasebot.runtime.metrics import ServiceMetrics
from releasebot.service.fleet import FleetService
from releasebot.service.notifications import NotificationService
from releasebot.service.plan import FeedSpec, PlanService
from releasebot.service.reconcile import CycleReport
from tests.e2e.test_reconcile import OLD, Rig, _rig, feeds, publish_existing  # noqa: F401
from tests.support.feedserver import FeedServer
from tests.support.fleetnodes import gpu_node
from tests.support.slackapi import BOT_TOKEN, CHANNEL, SlackApi

BEHIND = "580.178.04-flatcar4593.2.1"  # a release behind keep (2: 4593.2.4 and 4593.2.3)
PENDING = "580.178.04-flatcar4081.3.10"  # LTS, which the rig does not configure
RUNNING = "580.178.04-flatcar4081.3.9"
DATA = Path(__file__).parents[1] / "data" / "fleet"


@pytest.fixture
def rig(request: pytest.FixtureRequest, shared_data: Path) -> Iterator[Rig]:
    for rig in _rig(request, frozenset({Arch.AMD64})):
        lts = (shared_data / "flatcar" / "releases-lts.json").read_bytes()
        rig.feeds.route("/releases-lts.json", FeedServer.static(lts, etag='"l1"'))
        yield rig


@pytest.fixture
def opened() -> Iterator[list[Any]]:
    """Adapters a test opened, closed at its end."""
    adapters: list[Any] = []
    yield adapters
    for adapter in adapters:
        adapter.close()


@pytest.fixture
def slack(rig: Rig) -> Iterator[SlackApi]:
    with SlackApi(clock=lambda: rig.clock.now.timestamp()) as api:
        yield api


def with_fleet(
    rig: Rig,
    opened: list[Any],
    *,
    gate: bool = False,
    slack: bool = True,
    max_nodes: int = 50_000,
) -> FleetService:
    """The rig's planner, with the fleet read from the fake API server."""
    source = KubernetesFleetSource(
        rig.api.client(), page_size=2, max_nodes=max_nodes, sleep=lambda _: None
    )
    annotator = KubernetesNodeAnnotator(rig.api.client(), sleep=lambda _: None) if gate else None
    opened += [source, *([annotator] if annotator else [])]
    fleet = FleetService(
        source=source,
        store=rig.store,
        clock=rig.clock,
        repository=rig.registry.repository,
        annotator=annotator,
        alerts=slack,
    )
    plan_with(rig, fleet)
    return fleet


def plan_with(rig: Rig, fleet: FleetService) -> None:
    """The rig's planner, reading the fleet through ``fleet`` (and the channels its nodes
    follow from the rig's feed server)."""
    old = rig.planner
    rig.planner = PlanService(
        store=rig.store,
        fetcher=old._fetcher,
        flatcar_feeds=old._flatcar_feeds,
        nvidia_feed=old._nvidia_feed,
        parse_flatcar=old._parse_flatcar,
        parse_nvidia=old._parse_nvidia,
        policy=old._policy,
        clock=rig.clock,
        fleet=fleet,
        channel_feed=lambda channel: FeedSpec.flatcar(
            channel, rig.feeds.url(f"/releases-{channel}.json")
        ),
    )


def delivery(rig: Rig, slack: SlackApi) -> NotificationService:
    client = make_web_client(
        BOT_TOKEN, base_url=slack.base_url, timeout=timedelta(seconds=5), sleep=lambda _s: None
    )
    notifier = SlackNotifier(client, channel=CHANNEL, repository=rig.registry.repository)
    return NotificationService(store=rig.store, notifier=notifier)


def cycle(rig: Rig, metrics: ServiceMetrics | None = None) -> CycleReport:
    report = rig.cycle()
    if metrics is not None:
        metrics.observe_cycle(report, rig.store, duration=timedelta(1), finished_at=rig.clock())
    rig.clock.advance(timedelta(minutes=5))
    return report


def gauge(metrics: ServiceMetrics, name: str, **labels: str) -> float | None:
    return metrics.registry.get_sample_value(name, labels)


def fleet_alerts(slack: SlackApi) -> list[str]:
    return [m.text for m in slack.messages() if m.thread_ts is None and "Flatcar" in m.text]


def annotations(rig: Rig, node: str) -> dict[str, str]:
    return dict(rig.api.fleet.node(node)["metadata"].get("annotations", {}))


def test_a_node_outside_keep_gets_its_job_and_the_alerts_rise_and_fall_once(
    rig: Rig, slack: SlackApi, opened: list[Any]
) -> None:
    publish_existing(rig, *OLD)
    rig.api.fleet.add_nodes(gpu_node("gpu-0", "4593.2.1"), gpu_node("gpu-1", "4593.2.4"))
    with_fleet(rig, opened)
    metrics, notify = ServiceMetrics(), delivery(rig, slack)

    first = cycle(rig, metrics)
    notify.deliver(rig.clock.now)
    assert [(d.action, d.tag) for d in first.launched()] == [("launched", BEHIND)]
    assert rig.target(BEHIND).target.reasons == {TargetReason.FLEET}
    assert rig.target(OLD[0]).target.reasons == {TargetReason.CHANNEL, TargetReason.FLEET}
    assert gauge(metrics, "releasebot_fleet_nodes", verdict="building") == 1
    assert gauge(metrics, "releasebot_fleet_nodes", verdict="verified") == 1
    assert gauge(metrics, "releasebot_fleet_missing_images", reason="fleet") == 1
    [alert] = fleet_alerts(slack)
    assert "4593.2.1" in alert

    rig.kaniko.build_all()
    for _ in range(3):  # published, then nothing more to say
        cycle(rig, metrics)
        notify.deliver(rig.clock.now)
    assert rig.target(BEHIND).state is TargetState.PUBLISHED
    assert gauge(metrics, "releasebot_fleet_nodes", verdict="verified") == 2
    assert gauge(metrics, "releasebot_fleet_nodes", verdict="building") == 0
    assert gauge(metrics, "releasebot_fleet_missing_images", reason="fleet") == 0
    [message] = [m for m in slack.messages() if m.thread_ts is None and "Flatcar" in m.text]
    assert message.updates == 1  # the same message, edited once: resolved
    assert "ready" in message.text.lower()
    assert fleet_events(rig) == ["fleet_exposed", "fleet_covered"]


def fleet_events(rig: Rig) -> list[str]:
    """The kinds of the fleet's events in the outbox, oldest first."""
    with rig.engine.connect() as conn:
        rows = conn.exec_driver_sql(
            "SELECT kind FROM outbox WHERE message_key LIKE 'fleet:%' ORDER BY id"
        ).all()
    return [str(row[0]) for row in rows]


def test_a_pending_reboot_builds_first_and_the_gate_opens_only_once_verified(
    rig: Rig, opened: list[Any]
) -> None:
    rig.options = replace(rig.options, max_concurrent_builds=1)
    node = gpu_node("gpu-0", "4081.3.9", group="lts", pending="4081.3.10", before_reboot=True)
    rig.api.fleet.add_nodes(node)
    with_fleet(rig, opened, gate=True, slack=False)

    first = cycle(rig)  # the channel's 4593.2.4 and .3 are due too, and newer
    assert [d.tag for d in first.launched()] == [PENDING]
    assert rig.target(PENDING).target.reasons == {TargetReason.PENDING_REBOOT}
    assert rig.target(PENDING).target.flatcar_channel == "lts"  # its feed was read for it
    assert {rig.target(tag).state for tag in OLD} == {TargetState.MISSING}
    assert DEFAULT_GATE_ANNOTATION not in annotations(rig, "gpu-0")

    cycle(rig)  # still building: FLUO keeps waiting
    assert DEFAULT_GATE_ANNOTATION not in annotations(rig, "gpu-0")
    rig.kaniko.build_all()
    report = cycle(rig)
    assert rig.target(PENDING).state is TargetState.PUBLISHED
    opened = annotations(rig, "gpu-0")
    assert (opened[DEFAULT_GATE_ANNOTATION], opened[GATE_VERSION_ANNOTATION]) == (
        "true",
        "4081.3.10",
    )
    assert report.fleet is not None
    assert [(d.node, d.move) for d in report.fleet.applied] == [("gpu-0", "open")]

    # update_engine installed a newer release meanwhile: the gate no longer holds.
    newer = copy.deepcopy(rig.api.fleet.node("gpu-0"))
    newer["metadata"]["annotations"]["flatcar-linux-update.v1.flatcar-linux.net/new-version"] = (
        "4081.3.99"
    )
    rig.api.fleet.add_nodes(newer)
    cycle(rig)
    closed = annotations(rig, "gpu-0")
    assert DEFAULT_GATE_ANNOTATION not in closed
    assert GATE_VERSION_ANNOTATION not in closed


def test_a_gate_is_never_written_to_a_node_another_name_reads_like(
    rig: Rig, opened: list[Any]
) -> None:
    odd = "gpu-\x1b[0m1"  # cleans to gpu-1, an idle node's name
    waiting = gpu_node(odd, "4081.3.9", group="lts", pending="4081.3.10", before_reboot=True)
    rig.api.fleet.add_nodes(waiting, gpu_node("gpu-1", "4081.3.9", group="lts"))
    with_fleet(rig, opened, gate=True, slack=False)
    cycle(rig)
    rig.kaniko.build_all()
    report = cycle(rig)
    assert rig.target(PENDING).state is TargetState.PUBLISHED  # ready: it would open
    assert report.fleet is not None
    [decision] = report.fleet.gates
    assert (decision.node, decision.move) == ("'gpu-\\x1b[0m1'", None)
    assert "releasebot writes nothing to it" in decision.why
    assert report.fleet.applied == []
    assert rig.api.requests_to("PATCH", "nodes") == []
    assert DEFAULT_GATE_ANNOTATION not in annotations(rig, "gpu-1")
    assert report.plan is not None
    [line] = [w for w in report.plan.warnings if "not a valid Node name" in w]
    assert "(it reads as gpu-1, another listed Node)" in line
    assert "\x1b" not in line


def test_a_listing_cut_short_opens_no_gate_however_ready(rig: Rig, opened: list[Any]) -> None:
    node = gpu_node("gpu-0", "4081.3.9", group="lts", pending="4081.3.10", before_reboot=True)
    rig.api.fleet.add_nodes(node)
    with_fleet(rig, opened, gate=True, slack=False)
    cycle(rig)
    rig.kaniko.build_all()
    cycle(rig)
    assert rig.target(PENDING).state is TargetState.PUBLISHED
    assert DEFAULT_GATE_ANNOTATION in annotations(rig, "gpu-0")  # whole: it opens
    rig.api.fleet.remove_node("gpu-0")  # start again, the listing cut short this time
    rig.api.fleet.add_nodes(node, gpu_node("gpu-1", "4081.3.9", group="lts"))
    with_fleet(rig, opened, gate=True, slack=False, max_nodes=1)
    report = cycle(rig)
    assert report.fleet is not None
    [decision] = report.fleet.gates
    assert (decision.node, decision.move) == ("gpu-0", None)
    assert decision.why.startswith("the Node listing was cut short")
    assert report.fleet.applied == []
    assert DEFAULT_GATE_ANNOTATION not in annotations(rig, "gpu-0")
    assert report.plan is not None
    assert any("cut short: more than 1 nodes" in w for w in report.plan.warnings)


def test_with_the_gate_a_failed_build_never_opens_it_and_is_told(
    rig: Rig, slack: SlackApi, opened: list[Any]
) -> None:
    publish_existing(rig, *OLD)
    node = gpu_node("gpu-0", "4081.3.9", group="lts", pending="4081.3.10", before_reboot=True)
    rig.api.fleet.add_nodes(node)
    with_fleet(rig, opened, gate=True)
    metrics, notify = ServiceMetrics(), delivery(rig, slack)
    first = cycle(rig, metrics)
    jobs = {d.tag: d.job for d in first.launched()}
    assert list(jobs) == [PENDING, RUNNING]  # what it reboots into first, then what it runs
    rig.api.exit_nonzero(jobs[PENDING], 1, log="nvidia-installer: kernel module build failed")
    rig.kaniko.build(jobs[RUNNING])
    for _ in range(3):
        cycle(rig, metrics)
        notify.deliver(rig.clock.now)
    assert rig.target(PENDING).state is TargetState.FAILED
    assert rig.target(RUNNING).state is TargetState.PUBLISHED
    assert DEFAULT_GATE_ANNOTATION not in annotations(rig, "gpu-0")
    assert gauge(metrics, "releasebot_fleet_missing_images", reason="pending-reboot") == 1
    assert gauge(metrics, "releasebot_fleet_missing_images", reason="fleet") == 0
    alerts = {m.text: m for m in slack.messages() if m.thread_ts is None and "Flatcar" in m.text}
    [told] = [m for text, m in alerts.items() if "4081.3.10" in text]
    assert "failed" in str(told.blocks)
    [resolved] = [m for text, m in alerts.items() if "4081.3.9" in text]  # built: resolved
    assert (resolved.updates, "ready" in resolved.text.lower()) == (1, True)


def test_the_operators_driver_is_built_when_it_pulls_from_releasebot(
    rig: Rig, opened: list[Any]
) -> None:
    policy: dict[str, Any] = json.loads((DATA / "clusterpolicy.json").read_text())
    base, _, image = rig.registry.repository.rpartition("/")
    policy["spec"]["driver"].update(repository=base, image=image, version="580.173.02")
    rig.api.fleet.install_gpu_operator_crds([policy])
    rig.api.fleet.add_nodes(gpu_node("gpu-0", "4593.2.4"))
    with_fleet(rig, opened, slack=False)
    report = cycle(rig)
    launched = {d.tag for d in report.launched()}
    assert "580.173.02-flatcar4593.2.4" in launched
    assert rig.target("580.173.02-flatcar4593.2.4").target.reasons == {TargetReason.FLEET}


def test_nodes_that_cannot_be_listed_fall_back_to_the_channel_policy(
    rig: Rig, slack: SlackApi, opened: list[Any]
) -> None:
    publish_existing(rig, *OLD)
    rig.api.fleet.add_nodes(gpu_node("gpu-0", "4593.2.1"))
    with_fleet(rig, opened)
    notify = delivery(rig, slack)
    cycle(rig)
    assert rig.target(BEHIND).required

    rig.api.fleet.forbid("list", "nodes")
    for _ in range(2):
        report = cycle(rig)
        notify.deliver(rig.clock.now)
    assert report.errors == []  # not a failed cycle
    assert report.plan is not None
    [line] = [w for w in report.plan.warnings if "cannot list Nodes" in w]
    assert "grant releasebot's ServiceAccount 'list' on 'nodes'" in line
    kept = rig.target(BEHIND)  # not deleted: kept, no longer required, its build goes on
    assert (kept.required, kept.state) == (False, TargetState.BUILDING)
    # Told once; the node's exposure told before is neither repeated nor called resolved.
    assert fleet_events(rig) == ["fleet_exposed", "fleet_unreadable"]

    rig.api.fleet.allow_all()
    cycle(rig)
    notify.deliver(rig.clock.now)
    assert rig.target(BEHIND).required
    assert fleet_events(rig) == ["fleet_exposed", "fleet_unreadable", "fleet_readable"]
    [message] = [m for m in slack.messages() if m.thread_ts is None and "the fleet" in m.text]
    assert message.updates == 1


def test_a_node_list_with_a_null_item_still_builds_for_the_other_nodes(
    rig: Rig, opened: list[Any]
) -> None:
    publish_existing(rig, *OLD)
    rig.api.fleet.add_nodes(gpu_node("gpu-0", "4593.2.1"))
    rig.api.fleet.add_raw_node_items(None, 7)
    fleet = with_fleet(rig, opened, slack=False)
    report = cycle(rig)
    assert report.errors == []
    assert [(d.action, d.tag) for d in report.launched()] == [("launched", BEHIND)]
    assert rig.target(BEHIND).target.reasons == {TargetReason.FLEET}
    assert report.plan is not None
    warnings = report.plan.warnings
    assert "fleet: item 2 of the Node list is null: skipped" in warnings
    assert "fleet: item 3 of the Node list is a number: skipped" in warnings
    assert any("not every node is known" in line for line in warnings)
    assert all("\n" not in line for line in warnings)
    snapshot = fleet.snapshot()
    assert snapshot.unsure is not None
    assert not snapshot.cut


def test_the_fixture_fleet_gets_a_verdict_per_gpu_node(
    rig: Rig, opened: list[Any], shared_data: Path
) -> None:
    rig.serve_stable(shared_data, "releases-stable.2026-08-13.json", '"s2"')
    rig.api.fleet.add_nodes(*json.loads((DATA / "nodes.json").read_text()))
    with_fleet(rig, opened, slack=False)
    report = cycle(rig)
    assert report.fleet is not None
    coverage = report.fleet.coverage
    verdicts = {node.name: node.verdict.value for node in coverage.nodes}
    assert verdicts == {
        "gpu-a10g-0": "building",
        "gpu-a10g-1": "building",
        "gpu-gh200-3": "building",  # arm64: its arch joins the amd64-only plan
        "gpu-l4-2": "unknown-version",  # alpha 4628.0.0: the alpha feed is not served here
        "gpu-lts-6": "building",  # no NFD labels: its version from the kubelet's osImage
    }
    assert [node.name for node in coverage.ignored] == ["gpu-broken-7", "gpu-ubuntu-4"]
    assert rig.target("580.178.04-flatcar4593.2.5").target.arches == (Arch.AMD64, Arch.ARM64)
    assert report.errors == []
    assert report.plan is not None
    assert any("4628.0.0 is in no feed" in warning for warning in report.plan.warnings)
