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

from releasebot.domain.coverage import fleet_coverage
from releasebot.domain.events import EventKind, proven_event, refused_event
from releasebot.domain.fleet import DEFAULT_PROOF_ANNOTATION, parse_node
from releasebot.domain.gate import GateMove, decide_gates
from releasebot.domain.lifecycle import mark_published
from releasebot.domain.models import TargetRecord, TargetState
from releasebot.domain.proof import ProofRules, ProofState
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


def test_armed_then_proven_marks_the_image_once_and_edits_its_message() -> None:
    store, clock = MemoryStateStore(), Clock()
    before = gpu_node("gpu-0", "4593.2.4", pending="4593.2.5", before_reboot=True, gpus=4)
    published(store, before)
    fleet = MemoryFleetSource([before])
    prover = service(fleet, store, clock)
    step(prover, fleet, store)
    [armed] = store.proofs()
    assert (armed.state, armed.gpus_before, armed.tag) == (ProofState.ARMED, 4, TAG)

    fleet.set_nodes([gpu_node("gpu-0", "4593.2.5", after_reboot=True, gpus=4, boot_id="b2")])
    fleet.set_pods(
        "gpu-0", [driver_pod("gpu-0", image=IMAGE, digest=DIGEST), validator_pod("gpu-0")]
    )
    step(prover, fleet, store)  # healthy: with no soak, proven at once
    node = fleet.node("gpu-0")
    assert node is not None
    assert node["metadata"]["annotations"][DEFAULT_PROOF_ANNOTATION] == "true"
    target = store.target(TAG)
    assert target is not None
    assert (target.proven_node, target.proven_at) == ("gpu-0", T0)
    [event] = [e.event for e in store.pending_events(T0) if e.event.kind is EventKind.IMAGE_PROVEN]
    assert event.message_key == f"{TAG}#{target.attempts}"  # the build's own message

    clock.now += timedelta(minutes=5)
    outcome = step(prover, fleet, store)  # proven and annotated: nothing more is read
    assert outcome.calls == 0
    assert len(store.pending_events(clock.now)) == 1


def test_a_refusal_blames_the_image_and_keeps_the_log() -> None:
    store, clock = MemoryStateStore(), Clock()
    before = gpu_node("gpu-0", "4593.2.4", pending="4593.2.5", before_reboot=True)
    published(store, before)
    fleet = MemoryFleetSource([before])
    prover = service(fleet, store, clock)
    step(prover, fleet, store)
    fleet.set_nodes([gpu_node("gpu-0", "4593.2.5", after_reboot=True, boot_id="b2")])
    crashing = driver_pod("gpu-0", image=IMAGE, digest=DIGEST, state="crashloop")
    fleet.set_pods("gpu-0", [crashing, validator_pod("gpu-0")])
    name = crashing["metadata"]["name"]
    fleet.set_log("gpu-operator", name, "nvidia-driver-ctr", "modprobe: FATAL\n", previous=True)
    step(prover, fleet, store)
    target = store.target(TAG)
    assert target is not None
    assert target.state is TargetState.REFUSED
    [record] = store.proofs()
    assert record.state is ProofState.REFUSED
    assert record.log_tail == "modprobe: FATAL"
    [event] = [e.event for e in store.pending_events(T0)]
    assert event.kind is EventKind.IMAGE_REFUSED
    assert event.payload["image_refused"] == "yes"
    assert event.payload["log_tail"] == "modprobe: FATAL"
    node = fleet.node("gpu-0")
    assert node is not None
    assert DEFAULT_PROOF_ANNOTATION not in node["metadata"]["annotations"]
    step(prover, fleet, store)  # told once
    assert len(store.pending_events(T0)) == 1


def test_a_proof_fluo_left_without_releasebot_is_released() -> None:
    store, clock = MemoryStateStore(), Clock()
    before = gpu_node("gpu-0", "4593.2.4", pending="4593.2.5", before_reboot=True)
    published(store, before)
    fleet = MemoryFleetSource([before])
    prover = service(fleet, store, clock)
    step(prover, fleet, store)
    fleet.set_nodes([gpu_node("gpu-0", "4593.2.5", after_reboot=True, boot_id="b2")])
    step(prover, fleet, store)  # no pods yet: proving
    assert [r.state for r in store.proofs()] == [ProofState.PROVING]
    fleet.set_nodes([gpu_node("gpu-0", "4593.2.5", boot_id="b2")])  # FLUO went on
    step(prover, fleet, store)
    [record] = store.proofs()
    assert record.state is ProofState.RELEASED
    assert "by hand" in (record.reason or "")


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
    store, clock = MemoryStateStore(), Clock()
    before = gpu_node("gpu-0", "4593.2.4", pending="4593.2.5", before_reboot=True)
    published(store, before)
    fleet = MemoryFleetSource([before])
    step(service(fleet, store, clock), fleet, store)
    assert [r.node for r in store.proofs()] == ["gpu-0"]
    outcome = service(fleet, store, clock).step(plan(), (), {}, complete=False)
    assert [r.node for r in store.proofs()] == ["gpu-0"]  # not seen is not gone
    assert [r.node for r in outcome.records] == ["gpu-0"]
    service(fleet, store, clock).step(plan(), (), {})  # a whole listing without it: gone
    assert store.proofs() == []


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
        nodes, coverage, operator_known=True, requires_proof=True, proving={TAG: "gpu-0"}
    )
    assert still.move is None
    proven = fleet_coverage(result, {TAG: replace(record, proven_at=T0, proven_node="gpu-0")})
    moves = decide_gates(nodes, proven, operator_known=True, requires_proof=True)
    assert [d.move for d in moves] == [GateMove.OPEN, GateMove.OPEN]
    refused = fleet_coverage(result, {TAG: replace(record, state=TargetState.REFUSED)})
    assert [d.move for d in decide_gates(nodes, refused, operator_known=True)] == [None, None]


def test_a_rebuilt_image_must_be_proven_again() -> None:
    result = plan(gpu_node("gpu-0", "4593.2.4"))
    record = TargetRecord.new(result.targets[0], now=T0)
    proven = replace(mark_published(record, DIGEST, T0), proven_at=T0, proven_node="gpu-0")
    assert mark_published(proven, DIGEST, T0).proven_at == T0  # the same image: still proven
    rebuilt = mark_published(proven, "sha256:" + "6" * 64, T0)
    assert (rebuilt.proven_at, rebuilt.proven_node) == (None, None)


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
