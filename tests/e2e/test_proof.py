"""The after-reboot proof end to end: FLUO reboots GPU nodes one by one, releasebot lets the
next one go only once the first proved its driver image.

Real: SQLite, the feeds over HTTP, the OCI registry, the Kubernetes API over HTTP (Nodes,
the GPU Operator's driver and validator Pods shaped as the operator makes them, their
logs), Slack's Web API fake over HTTP. Played: Kaniko (``KanikoPlayer``) and FLUO
(``FluoPlayer``: one node at a time, before- and after-reboot annotations as FLUO waits on
them). Covers: a good image is proven on the first node (after the soak), its annotation
set, the image marked proven, and the next node may go; a bad image (CrashLoopBackOff) is
refused on the first node: the annotation stays unset, the image is ``refused``, the
next node's gate stays closed, one Slack alert with the driver pod's log, the API and the
metrics say so, a person's release lets FLUO go on and a rebuild reopens the next node's
gate; a releasebot restart mid-proof
resumes it; pods that cannot be read (RBAC) hold the node, with one line.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import replace
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest

from releasebot.domain.fleet.nodes import (
    DEFAULT_GATE_ANNOTATION,
    DEFAULT_PROOF_ANNOTATION,
    FLUO_AFTER_REBOOT,
)
from releasebot.domain.fleet.proof import ProofRules, ProofState
from releasebot.domain.shared.versions import Arch
from releasebot.domain.targets.commands import Command, Verb
from releasebot.domain.targets.models import TargetState
from releasebot.fleet.gate import KubernetesNodeAnnotator
from releasebot.fleet.kubernetes import KubernetesFleetSource
from releasebot.fleet.pods import KubernetesPodSource
from releasebot.runtime.metrics import ServiceMetrics
from releasebot.service.commands import CommandService
from releasebot.service.fleet import FleetService
from releasebot.service.proof import ProofService
from tests.e2e.test_fleet import PENDING, cycle, delivery, gauge, plan_with
from tests.e2e.test_reconcile import Rig, _rig, feeds  # noqa: F401 (a fixture)
from tests.support.feedserver import FeedServer
from tests.support.fleetnodes import gpu_node
from tests.support.fluo import FluoPlayer
from tests.support.operatorpods import NAMESPACE, driver_pod, validator_pod
from tests.support.overview import PageServer
from tests.support.slackapi import SlackApi

RULES = ProofRules(soak=timedelta(minutes=2), deadline=timedelta(minutes=30))
CRASH_LOG = (
    "NVRM: loading NVIDIA UNIX x86_64 Kernel Module\n"
    "insmod: ERROR: could not insert module nvidia.ko: Unknown symbol in module\n"
)


@pytest.fixture
def rig(request: pytest.FixtureRequest, shared_data: Path) -> Iterator[Rig]:
    for rig in _rig(request, frozenset({Arch.AMD64})):
        lts = (shared_data / "flatcar" / "releases-lts.json").read_bytes()
        rig.feeds.route("/releases-lts.json", FeedServer.static(lts, etag='"l1"'))
        yield rig


@pytest.fixture
def slack(rig: Rig) -> Iterator[SlackApi]:
    with SlackApi(clock=lambda: rig.clock.now.timestamp()) as api:
        yield api


class Proving:
    """The rig's planner with the fleet, the gate and the proof on the fake API server."""

    def __init__(self, rig: Rig, *, requires_proof: bool = False) -> None:
        self.rig = rig
        self.requires_proof = requires_proof
        self.opened: list[Any] = []
        self.fleet = self.start()

    def start(self) -> FleetService:
        """A fresh service, as a restarted releasebot (or a new leader) builds it."""
        rig, none = self.rig, lambda _: None
        source = KubernetesFleetSource(rig.api.client(), sleep=none)
        annotator = KubernetesNodeAnnotator(rig.api.client(), sleep=none)
        pods = KubernetesPodSource(rig.api.client(), namespace=NAMESPACE, sleep=none)
        self.opened += [source, annotator, pods]
        self.annotator = annotator
        prover = ProofService(
            pods=pods, annotator=annotator, store=rig.store, clock=rig.clock, rules=RULES
        )
        fleet = FleetService(
            source=source,
            store=rig.store,
            clock=rig.clock,
            repository=rig.registry.repository,
            annotator=annotator,
            alerts=True,
            prover=prover,
            requires_proof=self.requires_proof,
        )
        plan_with(rig, fleet)
        self.fleet = fleet
        return fleet

    def close(self) -> None:
        for adapter in self.opened:
            adapter.close()


@pytest.fixture
def proving(rig: Rig) -> Iterator[Proving]:
    rig.options = replace(rig.options, max_concurrent_builds=1)
    rig.api.fleet.add_nodes(
        gpu_node("gpu-0", "4081.3.9", group="lts", pending="4081.3.10", boot_id="boot-0"),
        gpu_node("gpu-1", "4081.3.9", group="lts", pending="4081.3.10", boot_id="boot-0"),
    )
    setup = Proving(rig)
    yield setup
    setup.close()


def annotations(rig: Rig, node: str) -> dict[str, str]:
    return dict(rig.api.fleet.node(node)["metadata"].get("annotations", {}))


def labels(rig: Rig, node: str) -> dict[str, str]:
    return dict(rig.api.fleet.node(node)["metadata"].get("labels", {}))


def publish_pending(rig: Rig, fluo: FluoPlayer) -> str:
    """FLUO asks for gpu-0; the image it reboots into is built and verified; the gate opens."""
    assert fluo.step() == "wants to reboot gpu-0"
    cycle(rig)  # launches the pending image first
    [digest] = rig.kaniko.build_all().values()
    cycle(rig)
    assert rig.target(PENDING).state is TargetState.PUBLISHED
    assert annotations(rig, "gpu-0")[DEFAULT_GATE_ANNOTATION] == "true"
    assert rig.target(PENDING).digest == digest
    return digest


def player(rig: Rig, image_state: str) -> tuple[FluoPlayer, dict[str, str]]:
    """FLUO with both hooks; each rebooted node gets the operator's pods in ``image_state``."""
    built: dict[str, str] = {}

    def pods_after(node: str) -> None:
        image = f"{rig.registry.repository}:{PENDING}"
        driver = driver_pod(node, image=image, digest=built["digest"], state=image_state)  # type: ignore[arg-type]
        rig.api.add_pods(driver, validator_pod(node))
        rig.api.set_log(driver["metadata"]["name"], CRASH_LOG, namespace=NAMESPACE, previous=True)

    fluo = FluoPlayer(
        rig.api.fleet,
        before=(DEFAULT_GATE_ANNOTATION,),
        after=(DEFAULT_PROOF_ANNOTATION,),
        on_reboot=pods_after,
    )
    return fluo, built


def test_a_good_image_is_proven_and_the_next_node_may_go(proving: Proving) -> None:
    rig = proving.rig
    fluo, built = player(rig, "ready")
    metrics = ServiceMetrics()
    built["digest"] = publish_pending(rig, fluo)

    assert fluo.step() == "rebooted gpu-0"
    assert labels(rig, "gpu-0")[FLUO_AFTER_REBOOT] == "true"
    first = cycle(rig, metrics)  # healthy: the soak starts
    assert DEFAULT_PROOF_ANNOTATION not in annotations(rig, "gpu-0")
    assert fluo.step() == "waiting after the reboot of gpu-0"  # no other node starts
    assert first.fleet is not None
    assert first.fleet.proof is not None
    assert [r.state for r in first.fleet.proof.records if r.node == "gpu-0"] == [ProofState.PROVING]
    assert gauge(metrics, "releasebot_proof_nodes", state="proving") == 1

    cycle(rig, metrics)  # five minutes later: past the soak
    assert annotations(rig, "gpu-0")[DEFAULT_PROOF_ANNOTATION] == "true"
    target = rig.target(PENDING)
    assert (target.state, target.proven_node) == (TargetState.PUBLISHED, "gpu-0")
    assert target.proven_at is not None
    assert gauge(metrics, "releasebot_images_proven") == 1

    commands = CommandService(
        store=rig.store, reconciler=rig.service(), clock=rig.clock, annotator=proving.annotator
    )
    answer = json.dumps(commands.run(Command(Verb.REBUILD, tag=PENDING), "U123"))
    assert "`rebuild` is for an image a GPU node refused" in answer  # a proven image stays
    assert rig.target(PENDING).state is TargetState.PUBLISHED

    assert fluo.step() == "gpu-0 done"
    assert fluo.step() == "wants to reboot gpu-1"
    cycle(rig)
    assert annotations(rig, "gpu-1")[DEFAULT_GATE_ANNOTATION] == "true"
    assert fluo.step() == "rebooted gpu-1"
    assert fluo.rebooted == ["gpu-0", "gpu-1"]


def test_a_bad_image_is_refused_on_the_first_node_and_no_other_node_follows(
    proving: Proving, slack: SlackApi
) -> None:
    rig = proving.rig
    fluo, built = player(rig, "crashloop")
    metrics, notify = ServiceMetrics(), delivery(rig, slack)
    built["digest"] = publish_pending(rig, fluo)
    assert fluo.step() == "rebooted gpu-0"

    report = cycle(rig, metrics)
    notify.deliver(rig.clock.now)
    target = rig.target(PENDING)
    assert target.state is TargetState.REFUSED
    assert "refused on node gpu-0" in (target.last_error or "")
    assert "CrashLoopBackOff" in (target.last_error or "")
    assert DEFAULT_PROOF_ANNOTATION not in annotations(rig, "gpu-0")
    assert gauge(metrics, "releasebot_proof_nodes", state="refused") == 1
    assert report.fleet is not None
    [refused] = [r for r in report.fleet.proof.records if r.node == "gpu-0"]  # type: ignore[union-attr]
    assert "Unknown symbol in module" in (refused.log_tail or "")

    alerts = [m for m in slack.messages() if m.thread_ts is None and "Refused" in m.text]
    [alert] = alerts
    assert "gpu-0" in alert.text
    assert PENDING in alert.text
    blocks = json.dumps(alert.blocks)
    assert "Unknown symbol in module" in blocks
    assert "/releasebot release gpu-0" in blocks

    with PageServer(rig.store) as page:  # the page's API says so too
        shown = httpx.get(f"{page.url}/api/targets/{PENDING}", timeout=10).json()
        matrix = httpx.get(f"{page.url}/api/targets?state=refused", timeout=10).json()
    assert shown["state"] == "refused"
    assert "refused on node gpu-0" in shown["last_error"]
    assert "refused" in shown["words"]
    assert PENDING in json.dumps(matrix)

    for _ in range(3):  # FLUO halts at gpu-0; nothing is told twice
        assert fluo.step() == "waiting after the reboot of gpu-0"
        cycle(rig, metrics)
        notify.deliver(rig.clock.now)
    assert len([m for m in slack.messages() if m.thread_ts is None and "Refused" in m.text]) == 1
    assert rig.target(PENDING).state is TargetState.REFUSED

    # A person rolled gpu-0 back and releases it: FLUO goes on, but gpu-1's gate stays shut.
    commands = CommandService(
        store=rig.store, reconciler=rig.service(), clock=rig.clock, annotator=proving.annotator
    )
    answer = commands.run(Command(Verb.RELEASE, node="gpu-0"), "U123")
    assert "released `gpu-0`" in json.dumps(answer)
    assert annotations(rig, "gpu-0")[DEFAULT_PROOF_ANNOTATION] == "true"
    assert fluo.step() == "gpu-0 done"
    assert fluo.step() == "wants to reboot gpu-1"
    cycle(rig)
    cycle(rig)
    assert DEFAULT_GATE_ANNOTATION not in annotations(rig, "gpu-1")
    assert fluo.step() == "waiting before the reboot of gpu-1"
    assert rig.target(PENDING).state is TargetState.REFUSED

    # NVIDIA fixed it; a person rebuilds the image: once published again, gpu-1 may go.
    answer = commands.run(Command(Verb.REBUILD, tag=PENDING), "U123")
    assert rig.target(PENDING).state is TargetState.BUILDING, answer
    rig.kaniko.build_all()
    cycle(rig)
    assert rig.target(PENDING).state is TargetState.PUBLISHED
    assert annotations(rig, "gpu-1")[DEFAULT_GATE_ANNOTATION] == "true"


def test_a_restart_mid_proof_resumes_it(proving: Proving) -> None:
    rig = proving.rig
    fluo, built = player(rig, "ready")
    built["digest"] = publish_pending(rig, fluo)
    assert fluo.step() == "rebooted gpu-0"
    cycle(rig)  # healthy since now
    [record] = [r for r in rig.store.proofs() if r.node == "gpu-0"]
    assert record.state is ProofState.PROVING
    started = record.started_at

    proving.start()  # a new process (or leader) on the same store
    rig.clock.advance(-timedelta(minutes=4))  # only one minute after the first look
    cycle(rig)
    [resumed] = [r for r in rig.store.proofs() if r.node == "gpu-0"]
    assert resumed.started_at == started  # resumed, not started over
    assert DEFAULT_PROOF_ANNOTATION not in annotations(rig, "gpu-0")
    cycle(rig)
    assert annotations(rig, "gpu-0")[DEFAULT_PROOF_ANNOTATION] == "true"


def test_pods_that_cannot_be_read_hold_the_node_with_one_line(proving: Proving) -> None:
    rig = proving.rig
    fluo, built = player(rig, "ready")
    built["digest"] = publish_pending(rig, fluo)
    assert fluo.step() == "rebooted gpu-0"
    rig.api.fleet.forbid("list", "pods")
    for _ in range(8):  # 40 minutes, past the deadline: doubt never releases nor refuses
        report = cycle(rig)
    assert DEFAULT_PROOF_ANNOTATION not in annotations(rig, "gpu-0")
    assert rig.target(PENDING).state is TargetState.PUBLISHED
    assert report.fleet is not None
    assert report.fleet.proof is not None
    assert any("grant" in error and "pods" in error for error in report.fleet.proof.errors)
    lines = report.fleet.proof.errors
    assert all("\n" not in line and "Traceback" not in line for line in lines)
