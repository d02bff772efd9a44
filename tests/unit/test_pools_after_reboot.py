"""The pool a node will be in after its reboot decides what it needs for its pending version.

With one NVIDIADriver per Flatcar version, a node on 4593.2.4 (pool driver 580.173.02) that
FLUO reboots into 4593.2.5 (pool driver 595.91.07) will pull ``595.91.07-flatcar4593.2.5``:
planning, coverage and the reboot gate judge that image, never the current pool's driver on
the new version. A future pool that cannot be decided (no NVIDIADriver selects the node's
future labels, or two do) keeps the gate closed with the reason; a precompiled pool's tag
carries the new kernel; both references are named for ``releasebot fleet``.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

from releasebot.domain.fleet.coverage import Verdict, coverage_json, fleet_coverage
from releasebot.domain.fleet.gate import GateMove, decide_gates
from releasebot.domain.fleet.nodes import NFD_OS_ID, NFD_VERSION_ID, FleetNode, parse_node
from releasebot.domain.fleet.operator import (
    OperatorView,
    parse_cluster_policy,
    parse_nvidia_driver,
    rebooted,
    resolve_images,
)
from releasebot.domain.targets.models import TargetRecord, TargetState
from tests.support.fleetnodes import gpu_node
from tests.unit.test_fleet_plan import REPOSITORY, plan

T0 = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
OLD_POOL = "580.173.02-flatcar4593.2.4"
WRONG = "580.173.02-flatcar4593.2.5"
RIGHT = "595.91.07-flatcar4593.2.5"


def pool(name: str, version: str, driver: str, **spec: object) -> dict[str, Any]:
    base, _, image = REPOSITORY.rpartition("/")
    return {
        "metadata": {"name": name},
        "spec": {
            "driverType": "gpu",
            "repository": base,
            "image": image,
            "version": driver,
            "nodeSelector": {NFD_OS_ID: "flatcar", NFD_VERSION_ID: version},
            **spec,
        },
    }


def operator(*pools: dict[str, Any]) -> OperatorView:
    policy = parse_cluster_policy(
        {"metadata": {"name": "cluster-policy"}, "spec": {"driver": {"useNvidiaDriverCRD": True}}}
    )
    return OperatorView((policy,), tuple(parse_nvidia_driver(raw) for raw in pools))


TWO_POOLS = operator(
    pool("flatcar-4593-2-4", "4593.2.4", "580.173.02"),
    pool("flatcar-4593-2-5", "4593.2.5", "595.91.07"),
)
NODE = gpu_node("gpu-0", "4593.2.4", pending="4593.2.5", before_reboot=True)


def gates(states: dict[str, TargetState], view: OperatorView, *raw: dict[str, Any]) -> Any:
    result = plan(*raw, operator=view)
    targets = {target.tag: target for target in result.targets}
    records = {
        tag: replace(TargetRecord.new(targets[tag], now=T0), state=state)
        for tag, state in states.items()
        if tag in targets
    }
    coverage = fleet_coverage(result, records)
    nodes = [parse_node(node) for node in raw]
    return result, coverage, decide_gates(nodes, coverage, operator_known=True)


def test_the_pending_version_is_judged_by_the_pool_the_node_will_be_in() -> None:
    result, coverage, _ = gates({}, TWO_POOLS, NODE)
    tags = {target.tag for target in result.targets}
    assert RIGHT in tags
    assert OLD_POOL in tags
    assert WRONG not in tags  # the old pool's driver is never planned for the new version
    [covered] = coverage.nodes
    assert [image.tag for image in covered.images if image.pending] == [RIGHT]
    assert covered.reference == f"{REPOSITORY}:{OLD_POOL}"
    assert covered.pending_reference == f"{REPOSITORY}:{RIGHT}"
    assert covered.pending_source == "NVIDIADriver/flatcar-4593-2-5"
    shown = coverage_json(coverage)["nodes"][0]  # type: ignore[index]
    assert shown["image"] == f"{REPOSITORY}:{OLD_POOL}"
    assert shown["pending_image"] == f"{REPOSITORY}:{RIGHT}"


def test_the_gate_stays_closed_until_the_right_image_is_verified() -> None:
    wrong_only = {OLD_POOL: TargetState.PUBLISHED, WRONG: TargetState.PUBLISHED}
    _, coverage, [decision] = gates(wrong_only, TWO_POOLS, NODE)
    assert decision.move is None
    assert RIGHT in decision.why
    assert coverage.nodes[0].pending_verdict is Verdict.MISSING
    building = {**wrong_only, RIGHT: TargetState.BUILDING}
    _, _, [decision] = gates(building, TWO_POOLS, NODE)
    assert (decision.move, decision.why) == (None, f"{RIGHT}: building")
    verified = {**wrong_only, RIGHT: TargetState.PUBLISHED}
    _, _, [decision] = gates(verified, TWO_POOLS, NODE)
    assert decision.move is GateMove.OPEN
    assert decision.why == f"verified for Flatcar 4593.2.5: {RIGHT}"


def test_an_undecidable_future_pool_keeps_the_gate_closed_with_the_reason() -> None:
    only_old = operator(pool("flatcar-4593-2-4", "4593.2.4", "580.173.02"))
    published = {OLD_POOL: TargetState.PUBLISHED, WRONG: TargetState.PUBLISHED}
    _, _, [decision] = gates(published, only_old, NODE)
    assert decision.move is None
    assert "no NVIDIADriver selects this node" in decision.why
    overlapping = operator(
        pool("flatcar-4593-2-4", "4593.2.4", "580.173.02"),
        pool("flatcar-4593-2-5", "4593.2.5", "595.91.07"),
        pool("all-flatcar", "4593.2.5", "580.173.02"),
    )
    every = {**published, RIGHT: TargetState.PUBLISHED}
    _, _, [decision] = gates(every, overlapping, NODE)
    assert decision.move is None
    assert "several NVIDIADrivers" in decision.why


def test_a_default_nvidia_driver_serves_only_what_no_pool_selects() -> None:
    base, _, image = REPOSITORY.rpartition("/")
    default = {
        "metadata": {"name": "default"},
        "spec": {
            "driverType": "gpu",
            "default": True,
            "repository": base,
            "image": image,
            "version": "580.173.02",
        },
    }
    with_default = operator(pool("flatcar-4593-2-5", "4593.2.5", "595.91.07"), default)
    _, coverage, _ = gates({}, with_default, NODE)
    [covered] = coverage.nodes
    assert covered.source == "NVIDIADriver/default"  # today: no pool selects 4593.2.4
    assert covered.pending_source == "NVIDIADriver/flatcar-4593-2-5"  # the pool wins after
    assert [i.tag for i in covered.images] == [OLD_POOL, RIGHT]


def test_the_node_is_relabelled_as_nfd_will_label_it_after_the_reboot() -> None:
    node = parse_node(NODE)
    assert isinstance(node, FleetNode)
    future = rebooted(node, "6.12.102")
    assert future.version.text == "4593.2.5"
    assert future.labels[NFD_VERSION_ID] == "4593.2.5"
    assert future.labels[NFD_VERSION_ID + ".minor"] == "2"
    assert future.kernel == "6.12.102-flatcar"
    assert future.pending_version is None
    precompiled = operator(
        pool("flatcar-4593-2-4", "4593.2.4", "580", usePrecompiled=True),
        pool("flatcar-4593-2-5", "4593.2.5", "595", usePrecompiled=True),
    )
    [image] = resolve_images([node], precompiled, REPOSITORY, {future.version: "6.12.102"}).images
    assert image.reference == f"{REPOSITORY}:580-6.12.95-flatcar-flatcar4593.2.4"
    assert image.after_reboot is not None
    assert image.after_reboot.reference == f"{REPOSITORY}:595-6.12.102-flatcar-flatcar4593.2.5"


def test_a_cluster_policy_keeps_its_driver_across_the_reboot() -> None:
    base, _, image = REPOSITORY.rpartition("/")
    policy = {
        "metadata": {"name": "cluster-policy"},
        "spec": {"driver": {"repository": base, "image": image, "version": "580.173.02"}},
    }
    view = OperatorView((parse_cluster_policy(policy),), None)
    _, coverage, [decision] = gates({WRONG: TargetState.PUBLISHED}, view, NODE)
    assert [i.tag for i in coverage.nodes[0].images if i.pending] == [WRONG]
    assert decision.move is GateMove.OPEN
