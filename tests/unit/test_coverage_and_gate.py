"""``fleet_coverage`` (a verdict per GPU node) and ``decide_gates`` (the reboot gate).

Coverage: each lifecycle state gives its verdict, the worst image decides, a version in no
feed is ``unknown-version``, a foreign repository is ``foreign-repository``; the counts
and missing images the metrics export; exposures per Flatcar version (running without a
verified image, or rebooting into one with no prospect of an image).

The gate: opened only when every image of the pending version is verified, with the
version it was opened for; held (with the reason) while building, failed, unknown, foreign,
without a pending version or without the operator's objects; closed when the pending
version changes or an image it vouched for is gone; a node without GPU labels is opened at
once; nodes FLUO is not waiting on are left alone.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import pytest

from releasebot.domain.fleet.coverage import Coverage, Verdict, fleet_coverage
from releasebot.domain.fleet.gate import GateMove, decide_gates
from releasebot.domain.fleet.nodes import parse_node
from releasebot.domain.fleet.operator import OperatorView, parse_cluster_policy
from releasebot.domain.targets.models import TargetRecord, TargetState
from tests.support.fleetnodes import gpu_node, ubuntu_gpu_node
from tests.unit.test_fleet_plan import plan

T0 = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
RUNNING = "580.178.04-flatcar4593.2.4"
PENDING = "580.178.04-flatcar4593.2.5"


def records(states: dict[str, TargetState], *raw: dict[str, Any]) -> dict[str, TargetRecord]:
    result = plan(*raw)
    targets = {target.tag: target for target in result.targets}
    return {
        tag: replace(TargetRecord.new(targets[tag], now=T0), state=state)
        for tag, state in states.items()
    }


def cover(states: dict[str, TargetState], *raw: dict[str, Any], **kwargs: Any) -> Coverage:
    return fleet_coverage(plan(*raw, **kwargs), records(states, *raw))


@pytest.mark.parametrize(
    ("state", "verdict"),
    [
        (TargetState.PUBLISHED, Verdict.VERIFIED),
        (TargetState.BUILDING, Verdict.BUILDING),
        (TargetState.RETRYING, Verdict.BUILDING),
        (TargetState.FAILED, Verdict.FAILED),
        (TargetState.MISSING, Verdict.MISSING),
        (TargetState.WAITING, Verdict.MISSING),
        (TargetState.UNKNOWN, Verdict.MISSING),
        (TargetState.STALE, Verdict.MISSING),
    ],
)
def test_each_state_gives_its_verdict(state: TargetState, verdict: Verdict) -> None:
    [node] = cover({RUNNING: state}, gpu_node("gpu-0", "4593.2.4")).nodes
    assert (node.verdict, node.pending_verdict) == (verdict, None)


def test_an_image_without_a_target_is_missing_and_the_worst_image_decides() -> None:
    node = gpu_node("gpu-0", "4593.2.4", pending="4593.2.5")
    coverage = cover({RUNNING: TargetState.PUBLISHED}, node)
    [covered] = coverage.nodes
    assert (covered.verdict, covered.pending_verdict) == (Verdict.VERIFIED, Verdict.MISSING)
    assert coverage.missing_images(pending=True) == 1
    assert coverage.missing_images(pending=False) == 0
    assert coverage.counts()[Verdict.VERIFIED] == 1
    assert set(coverage.counts()) == set(Verdict)


def test_unknown_versions_and_foreign_repositories_have_their_verdicts() -> None:
    unknown = cover({}, gpu_node("gpu-0", "4800.0.0", group="alpha"))
    assert unknown.nodes[0].verdict is Verdict.UNKNOWN_VERSION
    assert "no feed" in (unknown.nodes[0].note or "")
    raw = {
        "metadata": {"name": "cp"},
        "spec": {"driver": {"repository": "nvcr.io/nvidia", "image": "driver", "version": "580"}},
    }
    foreign = cover(
        {}, gpu_node("gpu-0", "4593.2.4"), operator=OperatorView((parse_cluster_policy(raw),), None)
    )
    assert foreign.nodes[0].verdict is Verdict.FOREIGN
    assert foreign.exposures == ()
    assert foreign.missing_images(pending=False) == 0


def test_exposures_count_per_version_running_and_pending() -> None:
    nodes = [
        gpu_node("gpu-0", "4593.2.4"),
        gpu_node("gpu-1", "4593.2.4"),
        gpu_node("gpu-2", "4593.2.3", pending="4593.2.5"),
    ]
    states = {
        RUNNING: TargetState.BUILDING,
        "580.178.04-flatcar4593.2.3": TargetState.PUBLISHED,
        PENDING: TargetState.FAILED,
    }
    coverage = cover(states, *nodes)
    assert [(e.key, e.verdict, e.running, e.pending) for e in coverage.exposures] == [
        ("4593.2.5", Verdict.FAILED, (), ("gpu-2",)),
        ("4593.2.4", Verdict.BUILDING, ("gpu-0", "gpu-1"), ()),
    ]
    building = cover({**states, PENDING: TargetState.BUILDING}, *nodes)
    assert [e.key for e in building.exposures] == ["4593.2.4"]  # a pending build is on its way


def test_ignored_gpu_nodes_are_kept_for_the_listing() -> None:
    coverage = cover({}, ubuntu_gpu_node("gpu-ubuntu"))
    assert coverage.nodes == ()
    assert [n.name for n in coverage.ignored] == ["gpu-ubuntu"]


# -- the gate ------------------------------------------------------------------------------


def gates(states: dict[str, TargetState], *raw: dict[str, Any], **kwargs: Any) -> list[Any]:
    known = kwargs.pop("operator_known", True)
    coverage = cover(states, *raw, **kwargs)
    decided = decide_gates([parse_node(n) for n in raw], coverage, operator_known=known)
    return [(d.node, d.move, d.version) for d in decided]


def waiting(**kwargs: Any) -> dict[str, Any]:
    return gpu_node("gpu-0", "4593.2.4", pending="4593.2.5", before_reboot=True, **kwargs)


def test_the_gate_opens_only_once_every_pending_image_is_verified() -> None:
    assert gates({PENDING: TargetState.BUILDING}, waiting()) == [("gpu-0", None, "4593.2.5")]
    assert gates({PENDING: TargetState.PUBLISHED}, waiting()) == [
        ("gpu-0", GateMove.OPEN, "4593.2.5")
    ]
    opened = waiting(gate="true", gate_version="4593.2.5")
    assert gates({PENDING: TargetState.PUBLISHED}, opened) == [("gpu-0", None, "4593.2.5")]


@pytest.mark.parametrize(
    "state", [TargetState.FAILED, TargetState.MISSING, TargetState.WAITING, TargetState.STALE]
)
def test_the_gate_stays_closed_and_says_why(state: TargetState) -> None:
    coverage = cover({PENDING: state}, waiting())
    [decision] = decide_gates([parse_node(waiting())], coverage, operator_known=True)
    assert decision.move is None
    assert decision.why.startswith(PENDING)


def test_the_gate_never_opens_on_doubt() -> None:
    published = {PENDING: TargetState.PUBLISHED}
    assert gates(published, waiting(), operator_known=False)[0][1] is None
    unknown = gpu_node("gpu-0", "4593.2.4", pending="4800.0.0", before_reboot=True)
    assert gates(published, unknown)[0][1] is None
    no_version = gpu_node("gpu-0", "4593.2.4", before_reboot=True)
    assert gates(published, no_version)[0][1] is None


def test_the_gate_closes_when_the_pending_version_changes_or_the_image_goes() -> None:
    stale = waiting(gate="true", gate_version="4593.2.4")  # opened for an earlier update
    assert gates({PENDING: TargetState.PUBLISHED}, stale) == [("gpu-0", GateMove.OPEN, "4593.2.5")]
    assert gates({PENDING: TargetState.MISSING}, stale)[0][1] is GateMove.CLOSE
    vanished = waiting(gate="true", gate_version="4593.2.5")
    assert gates({PENDING: TargetState.MISSING}, vanished)[0][1] is GateMove.CLOSE
    rebooted = gpu_node("gpu-0", "4593.2.5", gate_version="4593.2.5")  # FLUO deleted the gate
    assert gates({}, rebooted) == [("gpu-0", GateMove.CLOSE, "-")]


def test_a_gate_a_person_opened_is_theirs() -> None:
    by_hand = waiting(gate="true")  # kubectl annotate, no version annotation
    assert gates({PENDING: TargetState.BUILDING}, by_hand) == [("gpu-0", None, "4593.2.5")]


def test_a_node_without_gpu_opens_at_once_and_idle_nodes_are_left_alone() -> None:
    cpu = gpu_node("cpu-0", "4593.2.4", gpu=False, pending="4593.2.5", before_reboot=True)
    idle = gpu_node("gpu-1", "4593.2.4")
    assert gates({}, cpu, idle) == [("cpu-0", GateMove.OPEN, "4593.2.5")]
