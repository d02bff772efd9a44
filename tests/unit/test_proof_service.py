"""``ProofService`` on the in-memory fleet and store, the gate's canary rule, the messages.

The service: a node FLUO wants to reboot is armed with its GPUs; back from the reboot it is
proven (annotation, the image's ``proven`` mark, one event that edits the build's message)
or refused (the image ``refused``, one event with the driver pod's log); a node deleted
mid-proof loses its record, but not a node missing from a listing that is not whole (an
item skipped, cut short by a bound); a dry run decides without writing anything. The gate with
``gate_requires_proof``: the first node of an unproven image goes (the canary), the others
wait for its proof, and every node goes once the image is proven. The Slack messages of a
proof and a refusal are valid Block Kit and say what to do. A rebuilt image (a new digest)
must be proven again.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

from slack_sdk.models.blocks import Block

from releasebot.domain.fleet.coverage import fleet_coverage
from releasebot.domain.fleet.gate import GateMove, decide_gates
from releasebot.domain.fleet.nodes import DEFAULT_PROOF_ANNOTATION, parse_node
from releasebot.domain.fleet.proof import ProofRecord, ProofRules, ProofState
from releasebot.domain.shared.versions import Arch
from releasebot.domain.targets.builds import BuildRecord, BuildState
from releasebot.domain.targets.events import EventKind, proven_event, refused_event
from releasebot.domain.targets.lifecycle import mark_published
from releasebot.domain.targets.models import TargetRecord, TargetState
from releasebot.fleet.memory import MemoryFleetSource
from releasebot.notify.render import render_message
from releasebot.service.proof import ProofService
from releasebot.store.memory import MemoryStateStore
from tests.support.fleetnodes import gpu_node
from tests.support.operatorpods import driver_pod, validator_pod
from tests.unit.test_fleet_plan import REPOSITORY, plan

T0 = datetime(2026, 12, 2, 10, 0, tzinfo=UTC)
TAG = "580.178.04-flatcar4593.2.5"
IMAGE = f"{REPOSITORY}:{TAG}"
DIGEST = "sha256:" + "5" * 64


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> datetime:
        return self.now


def published(store: MemoryStateStore, *raw: dict[str, Any]) -> dict[str, TargetRecord]:
    """The plan's targets stored, the pending image published with ``DIGEST``."""
    result = plan(*raw)
    store.sync_targets(result.targets, T0)
    record = store.target(TAG)
    assert record is not None
    store.save(targets=[mark_published(record, DIGEST, T0)])
    return {record.tag: record for record in store.targets(required_only=False)}


def service(
    fleet: MemoryFleetSource, store: MemoryStateStore, clock: Clock, *, dry_run: bool = False
) -> ProofService:
    return ProofService(
        pods=fleet,
        annotator=fleet,
        store=store,
        clock=clock,
        rules=ProofRules(soak=timedelta(0)),
        dry_run=dry_run,
    )


def step(prover: ProofService, fleet: MemoryFleetSource, store: MemoryStateStore) -> Any:
    nodes = fleet.nodes().nodes
    raw = [fleet.node(node.name) for node in nodes]
    records = {r.tag: r for r in store.targets(required_only=False)}
    return prover.step(plan(*[r for r in raw if r is not None]), nodes, records)


class Scene:
    """gpu-0 on 4593.2.4, FLUO waiting to reboot it into 4593.2.5, whose image is
    published with ``DIGEST``; the service has armed it."""

    def __init__(self, **before: Any) -> None:
        self.store, self.clock = MemoryStateStore(), Clock()
        options: dict[str, Any] = {"pending": "4593.2.5", "before_reboot": True, **before}
        node = gpu_node("gpu-0", "4593.2.4", **options)
        published(self.store, node)
        self.fleet = MemoryFleetSource([node])
        self.prover = service(self.fleet, self.store, self.clock)
        self.step()

    def step(self) -> Any:
        return step(self.prover, self.fleet, self.store)

    def reboot(self, *pods: dict[str, Any], **after: Any) -> None:
        """FLUO rebooted it: back on 4593.2.5, the operator's ``pods`` on it."""
        options: dict[str, Any] = {"after_reboot": True, "boot_id": "b2", **after}
        self.fleet.set_nodes([gpu_node("gpu-0", "4593.2.5", **options)])
        self.fleet.set_pods("gpu-0", list(pods))

    def annotations(self) -> dict[str, str]:
        node = self.fleet.node("gpu-0")
        assert node is not None
        return dict(node["metadata"].get("annotations", {}))

    def proof(self) -> ProofRecord:
        [record] = self.store.proofs()
        return record

    def target(self) -> TargetRecord:
        record = self.store.target(TAG)
        assert record is not None
        return record


def running(state: Any = "ready", digest: str = DIGEST) -> list[dict[str, Any]]:
    return [driver_pod("gpu-0", image=IMAGE, digest=digest, state=state), validator_pod("gpu-0")]


def test_armed_then_proven_marks_the_image_once_and_edits_its_message() -> None:
    scene = Scene(gpus=4)
    assert (scene.proof().state, scene.proof().gpus_before) == (ProofState.ARMED, 4)
    assert scene.proof().tag == TAG
    scene.reboot(*running(), gpus=4)
    scene.step()  # healthy: with no soak, proven at once
    assert scene.annotations()[DEFAULT_PROOF_ANNOTATION] == "true"
    target = scene.target()
    assert (target.proven_node, target.proven_at) == ("gpu-0", T0)
    events = scene.store.pending_events(T0)
    [event] = [e.event for e in events if e.event.kind is EventKind.IMAGE_PROVEN]
    assert event.message_key == f"{TAG}#{target.attempts}"  # the build's own message
    scene.clock.now += timedelta(minutes=5)
    outcome = scene.step()  # proven and annotated: nothing more is read
    assert outcome.calls == 0
    assert len(scene.store.pending_events(scene.clock.now)) == 1


def test_an_update_waiting_for_its_reboot_is_armed_before_fluo_asks() -> None:
    scene = Scene(before_reboot=False, gpus=2)  # FLUO without a before-reboot annotation
    assert (scene.proof().state, scene.proof().gpus_before) == (ProofState.ARMED, 2)


def test_a_refusal_blames_the_image_and_keeps_the_log() -> None:
    scene = Scene()
    crashing = running("crashloop")
    scene.reboot(*crashing)
    name = crashing[0]["metadata"]["name"]
    scene.fleet.set_log(
        "gpu-operator", name, "nvidia-driver-ctr", "modprobe: FATAL\n", previous=True
    )
    scene.step()
    assert scene.target().state is TargetState.REFUSED
    assert scene.proof().state is ProofState.REFUSED
    assert scene.proof().log_tail == "modprobe: FATAL"
    [event] = [e.event for e in scene.store.pending_events(T0)]
    assert event.kind is EventKind.IMAGE_REFUSED
    assert event.payload["image_refused"] == "yes"
    assert event.payload["log_tail"] == "modprobe: FATAL"
    assert DEFAULT_PROOF_ANNOTATION not in scene.annotations()
    scene.step()  # told once
    assert len(scene.store.pending_events(T0)) == 1


def test_only_the_published_attempt_s_image_counts_as_verified() -> None:
    scene = Scene()
    old = "sha256:" + "0" * 64
    target = scene.target()
    scene.store.save(  # an earlier attempt built another image, since replaced
        builds=[
            BuildRecord(
                TAG, Arch.AMD64, target.attempts - 1, "job-old", TAG, BuildState.SUCCEEDED, T0, old
            )
        ]
    )
    scene.reboot(*running(digest=old))
    scene.step()
    assert DEFAULT_PROOF_ANNOTATION not in scene.annotations()
    assert "not the verified" in (scene.proof().reason or "")
    assert scene.target().proven_at is None


def test_a_node_changed_since_it_was_read_is_judged_again_not_proven() -> None:
    scene = Scene()
    scene.reboot(*running())
    nodes = scene.fleet.nodes().nodes  # read, then the node changes before the patch
    scene.fleet.set_nodes([gpu_node("gpu-0", "4593.2.5", after_reboot=True, boot_id="b3")])
    records = {r.tag: r for r in scene.store.targets(required_only=False)}
    raw = scene.fleet.node("gpu-0")
    assert raw is not None
    scene.prover.step(plan(raw), nodes, records)
    assert DEFAULT_PROOF_ANNOTATION not in scene.annotations()
    assert scene.proof().state is ProofState.PROVING
    assert scene.target().proven_at is None


def test_the_operator_unread_holds_the_proof() -> None:
    scene = Scene()
    scene.reboot(*running())
    nodes = scene.fleet.nodes().nodes
    raw = scene.fleet.node("gpu-0")
    assert raw is not None
    guess = replace(plan(raw), operator_known=False)
    records = {r.tag: r for r in scene.store.targets(required_only=False)}
    outcome = scene.prover.step(guess, nodes, records)
    assert outcome.calls == 0  # not even the pods: which image it needs is a guess
    assert DEFAULT_PROOF_ANNOTATION not in scene.annotations()
    assert "objects could not be read" in (scene.proof().reason or "")


def test_a_proof_fluo_left_without_releasebot_is_released() -> None:
    for pods in ((), running("crashloop")):  # proving, and refused
        scene = Scene()
        scene.reboot(*pods)
        scene.step()
        assert scene.proof().state in (ProofState.PROVING, ProofState.REFUSED)
        scene.fleet.set_nodes([gpu_node("gpu-0", "4593.2.5", boot_id="b2")])  # FLUO went on
        scene.step()
        assert scene.proof().state is ProofState.RELEASED
        assert "by hand" in (scene.proof().reason or "")


def test_a_node_deleted_mid_proof_loses_its_record_and_a_dry_run_writes_nothing() -> None:
    store, clock = MemoryStateStore(), Clock()
    before = gpu_node("gpu-0", "4593.2.4", pending="4593.2.5", before_reboot=True)
    published(store, before)
    fleet = MemoryFleetSource([before])
    service(fleet, store, clock, dry_run=True).step(plan(before), fleet.nodes().nodes, {})
    assert store.proofs() == []
    step(service(fleet, store, clock), fleet, store)
    assert [r.node for r in store.proofs()] == ["gpu-0"]
    fleet.set_nodes([])
    step(service(fleet, store, clock), fleet, store)
    assert store.proofs() == []


def test_a_node_missing_from_a_listing_that_is_not_whole_keeps_its_record() -> None:
    scene = Scene()
    prover = service(scene.fleet, scene.store, scene.clock)
    outcome = prover.step(plan(), (), {}, complete=False)
    assert [r.node for r in scene.store.proofs()] == ["gpu-0"]  # not seen is not gone
    assert [r.node for r in outcome.records] == ["gpu-0"]
    prover.step(plan(), (), {})  # a whole listing without it: gone
    assert scene.store.proofs() == []


def test_the_gate_lets_one_canary_through_until_the_image_is_proven() -> None:
    raw = [gpu_node(f"gpu-{n}", "4593.2.4", pending="4593.2.5", before_reboot=True) for n in (0, 1)]
    result = plan(*raw)
    targets = {t.tag: t for t in result.targets}
    record = replace(TargetRecord.new(targets[TAG], now=T0), state=TargetState.PUBLISHED)
    nodes = [parse_node(node) for node in raw]
    coverage = fleet_coverage(result, {TAG: record})
    canary, held = decide_gates(nodes, coverage, operator_known=True, requires_proof=True)
    assert (canary.node, canary.move) == ("gpu-0", GateMove.OPEN)
    assert "canary" in canary.why
    assert (held.node, held.move) == ("gpu-1", None)
    assert held.why == f"{TAG}: waiting for gpu-0 to prove it first"
    _, still = decide_gates(
        nodes,
        coverage,
        operator_known=True,
        requires_proof=True,
        proving={(TAG, Arch.AMD64): "gpu-0"},
    )
    assert still.move is None
    proven_record = replace(
        record, proven_at=T0, proven_node="gpu-0", proven_arches=frozenset({Arch.AMD64})
    )
    proven = fleet_coverage(result, {TAG: proven_record})
    moves = decide_gates(nodes, proven, operator_known=True, requires_proof=True)
    assert [d.move for d in moves] == [GateMove.OPEN, GateMove.OPEN]
    refused = fleet_coverage(result, {TAG: replace(record, state=TargetState.REFUSED)})
    assert [d.move for d in decide_gates(nodes, refused, operator_known=True)] == [None, None]


def test_the_canary_and_the_proof_are_per_arch() -> None:
    raw = [
        gpu_node(f"gpu-{n}", "4593.2.4", pending="4593.2.5", before_reboot=True, arch=arch)
        for n, arch in ((0, "amd64"), (1, "arm64"), (2, "arm64"))
    ]
    result = plan(*raw)
    targets = {t.tag: t for t in result.targets}
    record = replace(
        TargetRecord.new(targets[TAG], now=T0),
        state=TargetState.PUBLISHED,
        proven_at=T0,
        proven_node="gpu-0",
        proven_arches=frozenset({Arch.AMD64}),  # an amd64 node proved it
    )
    nodes = [parse_node(node) for node in raw]
    coverage = fleet_coverage(result, {TAG: record})
    amd, arm_canary, arm_held = decide_gates(
        nodes, coverage, operator_known=True, requires_proof=True
    )
    assert (amd.move, amd.why.endswith(", proven")) == (GateMove.OPEN, True)
    assert (arm_canary.node, arm_canary.move) == ("gpu-1", GateMove.OPEN)
    assert "canary" in arm_canary.why
    assert (arm_held.node, arm_held.move) == ("gpu-2", None)


def test_a_proof_marks_the_arch_it_was_proven_on() -> None:
    scene = Scene()
    scene.reboot(*running())
    scene.step()
    target = scene.target()
    assert target.proven_arches == {Arch.AMD64}
    assert len(scene.store.pending_events(T0)) == 1


def test_a_rebuilt_image_must_be_proven_again() -> None:
    result = plan(gpu_node("gpu-0", "4593.2.4"))
    record = TargetRecord.new(result.targets[0], now=T0)
    proven = replace(mark_published(record, DIGEST, T0), proven_at=T0, proven_node="gpu-0")
    assert mark_published(proven, DIGEST, T0).proven_at == T0  # the same image: still proven
    proven = replace(proven, proven_arches=frozenset({Arch.AMD64}))
    rebuilt = mark_published(proven, "sha256:" + "6" * 64, T0)
    assert (rebuilt.proven_at, rebuilt.proven_node, rebuilt.proven_arches) == (
        None,
        None,
        frozenset(),
    )


def test_the_messages_of_a_proof_and_a_refusal_are_valid_and_say_what_to_do() -> None:
    result = plan(gpu_node("gpu-0", "4593.2.4", pending="4593.2.5"))
    target = next(t for t in result.targets if t.tag == TAG)
    record = replace(TargetRecord.new(target, now=T0), attempts=1)
    proven = render_message([proven_event(record, "gpu-0", T0)], REPOSITORY)
    assert "Proven on node gpu-0" in proven.text
    refusal = refused_event(
        node="gpu-0",
        tag=TAG,
        reason="driver pod gpu-operator/x is in CrashLoopBackOff (7 restarts)",
        image=True,
        log_tail="insmod: ERROR: could not insert module nvidia.ko\n",
        started_at=T0,
        now=T0,
    )
    shown = render_message([refusal], REPOSITORY)
    assert "gpu-0" in shown.text
    assert "CrashLoopBackOff" in shown.text
    text = str(shown.blocks)
    assert "/releasebot release gpu-0" in text
    assert f"/releasebot rebuild {TAG}" in text
    assert "insmod: ERROR" in text
    for message in (proven, shown):
        for block in message.blocks:
            assert Block.parse(block) is not None  # slack-sdk's own models accept it
