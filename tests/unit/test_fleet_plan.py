"""``plan_fleet`` and ``fleet_channels``: the images GPU nodes need, merged into the plan.

Covers: a node a release behind ``keep`` and a pending reboot each get a target whatever
the channel policy says, with their reason; a channel target a node needs too gains the
node's arch and reason; the GPU Operator's driver wins when it pulls from releasebot's
repository, the selected drivers stand in otherwise (no operator, a foreign repository,
objects that could not be read); precompiled, digest-pinned and unknown drivers, and a
version in no feed, are needs with a problem and a warning, never a target or an error;
non-GPU nodes need nothing; the urgent tags; and which channel feeds the fleet follows.
"""

from __future__ import annotations

from datetime import date
from typing import Any

from releasebot.domain.fleet.nodes import parse_node
from releasebot.domain.fleet.operator import OperatorView, parse_cluster_policy
from releasebot.domain.fleet.plan import FleetPlan, fleet_channels, plan_fleet
from releasebot.domain.shared.versions import Arch, DriverVersion, FlatcarVersion
from releasebot.domain.targets.models import DriverRelease, FlatcarRelease, Target, TargetReason
from releasebot.domain.targets.policy import DriverPolicy, FlatcarPolicy, Policy, plan_targets
from tests.support.fleetnodes import gpu_node, ubuntu_gpu_node

REPOSITORY = "registry.example.com/nvidia/driver"
BOTH = frozenset({Arch.AMD64, Arch.ARM64})
POLICY = Policy(
    FlatcarPolicy(("stable",), frozenset({Arch.AMD64}), keep=2),
    DriverPolicy(frozenset({"580"}), frozenset(), keep=1),
)
CHANNEL = frozenset({TargetReason.CHANNEL})
FLEET = frozenset({TargetReason.FLEET})
PENDING = frozenset({TargetReason.PENDING_REBOOT})


def release(version: str, channel: str = "stable", kernel: str = "6.12.102") -> FlatcarRelease:
    return FlatcarRelease(FlatcarVersion.parse(version), channel, BOTH, kernel, None, version)


def driver(version: str, arches: frozenset[Arch] = BOTH) -> DriverRelease:
    parsed = DriverVersion.parse(version)
    return DriverRelease(parsed, parsed.branch, "lts branch", arches, date(2026, 8, 1), (), version)


RELEASES = {
    r.version: r
    for r in (
        release("4593.2.5"),
        release("4593.2.4", kernel="6.12.95"),
        release("4593.2.3", kernel="6.12.93"),
        release("4757.1.0", "beta"),
    )
}
DRIVERS = [driver("580.178.04"), driver("580.173.02"), driver("595.91.07")]


NO_OPERATOR = OperatorView(None, None)


def plan(*raw: dict[str, Any], operator: OperatorView | None = NO_OPERATOR) -> FleetPlan:
    stable = [r for r in RELEASES.values() if r.channel == "stable"]
    channel = plan_targets(POLICY, {"stable": stable}, DRIVERS)
    nodes = [parse_node(node) for node in raw]
    return plan_fleet(
        POLICY,
        channel,
        nodes,
        operator,
        repository=REPOSITORY,
        releases=RELEASES,
        drivers=DRIVERS,
    )


def by_tag(result: FleetPlan) -> dict[str, Target]:
    return {target.tag: target for target in result.targets}


def cluster_policy(repository: str, version: str, **driver: object) -> OperatorView:
    raw = {
        "metadata": {"name": "cluster-policy"},
        "spec": {"driver": {"repository": repository, "image": "driver", "version": version}},
    }
    raw["spec"]["driver"].update(driver)  # type: ignore[attr-defined]
    return OperatorView((parse_cluster_policy(raw),), None)


def test_without_nodes_the_plan_is_the_channel_policys() -> None:
    result = plan()
    assert [(t.tag, t.reasons) for t in result.targets] == [
        ("580.178.04-flatcar4593.2.5", CHANNEL),
        ("580.178.04-flatcar4593.2.4", CHANNEL),
    ]
    assert result.nodes == ()
    assert result.warnings == ()


def test_a_node_a_release_behind_keep_gets_its_target() -> None:
    result = plan(gpu_node("gpu-0", "4593.2.3"))
    target = by_tag(result)["580.178.04-flatcar4593.2.3"]
    assert (target.reasons, target.arches, target.kernel) == (FLEET, (Arch.AMD64,), "6.12.93")
    assert [t.flatcar_version.text for t in result.targets] == ["4593.2.5", "4593.2.4", "4593.2.3"]
    [entry] = result.nodes
    assert [need.tag for need in entry.needs] == ["580.178.04-flatcar4593.2.3"]


def test_a_pending_reboot_gets_its_target_and_adds_to_a_channel_target() -> None:
    result = plan(
        gpu_node("gpu-0", "4593.2.5", group="beta", pending="4757.1.0", before_reboot=True),
        gpu_node("gh200-1", "4593.2.5", arch="arm64"),
    )
    targets = by_tag(result)
    beta = targets["580.178.04-flatcar4757.1.0"]
    assert (beta.reasons, beta.flatcar_channel, beta.arches) == (PENDING, "beta", (Arch.AMD64,))
    current = targets["580.178.04-flatcar4593.2.5"]
    assert current.reasons == CHANNEL | FLEET
    assert current.arches == (Arch.AMD64, Arch.ARM64)  # the arm64 node's arch joins the plan's
    assert result.urgent_tags() == {"580.178.04-flatcar4757.1.0"}
    assert result.targets[0].tag == "580.178.04-flatcar4757.1.0"  # newest first


def test_the_operators_own_driver_wins_when_it_pulls_from_releasebot() -> None:
    view = cluster_policy("registry.example.com/nvidia", "580.173.02")
    result = plan(gpu_node("gpu-0", "4593.2.3"), operator=view)
    [entry] = result.nodes
    assert entry.source == "ClusterPolicy/cluster-policy"
    assert [need.tag for need in entry.needs] == ["580.173.02-flatcar4593.2.3"]
    assert by_tag(result)["580.173.02-flatcar4593.2.3"].reasons == FLEET


def test_a_foreign_repository_is_noted_and_the_selected_drivers_stand_in() -> None:
    view = cluster_policy("nvcr.io/nvidia", "580.173.02")
    result = plan(gpu_node("gpu-0", "4593.2.3"), operator=view)
    [entry] = result.nodes
    assert entry.foreign == "nvcr.io/nvidia/driver:580.173.02-flatcar4593.2.3"
    assert "not releasebot's" in (entry.note or "")
    assert [need.tag for need in entry.needs] == ["580.178.04-flatcar4593.2.3"]


def test_operator_objects_that_could_not_be_read_leave_the_selected_drivers() -> None:
    result = plan(gpu_node("gpu-0", "4593.2.3"), operator=None)
    assert result.operator_known is False
    assert [need.tag for need in result.nodes[0].needs] == ["580.178.04-flatcar4593.2.3"]


def test_drivers_releasebot_cannot_build_are_problems_not_targets() -> None:
    cases = {
        "usePrecompiled": cluster_policy("registry.example.com/nvidia", "580", usePrecompiled=True),
        "by digest": cluster_policy("registry.example.com/nvidia", "sha256:" + "a" * 64),
        "does not list": cluster_policy("registry.example.com/nvidia", "580.1.1"),
    }
    for expected, view in cases.items():
        result = plan(gpu_node("gpu-0", "4593.2.3"), operator=view)
        [need] = result.nodes[0].needs
        assert need.tag is None
        assert expected in (need.problem or ""), expected
        assert "580.178.04-flatcar4593.2.3" not in by_tag(result)
        assert any(expected in warning for warning in result.warnings), result.warnings


def test_a_version_in_no_feed_is_a_problem_and_a_warning_not_a_crash() -> None:
    result = plan(gpu_node("gpu-0", "4593.2.5", pending="4800.0.0"))
    pending = [need for need in result.nodes[0].needs if need.pending]
    assert [(n.tag, n.unknown_version) for n in pending] == [("580.178.04-flatcar4800.0.0", True)]
    assert "580.178.04-flatcar4800.0.0" not in by_tag(result)
    assert result.warnings == (
        "fleet: Flatcar 4800.0.0 is in no feed releasebot reads: no image can be built "
        "(node gpu-0)",
    )


def test_an_arch_the_driver_lacks_is_a_problem() -> None:
    drivers = [driver("580.178.04", frozenset({Arch.AMD64}))]
    result = plan_fleet(
        POLICY,
        [],
        [parse_node(gpu_node("gh200-0", "4593.2.5", arch="arm64"))],
        OperatorView(None, None),
        repository=REPOSITORY,
        releases=RELEASES,
        drivers=drivers,
    )
    [need] = result.nodes[0].needs
    assert need.problem == "driver 580.178.04 has no aarch64 runfile"
    assert result.targets == ()


def test_cpu_nodes_need_nothing_and_other_gpu_nodes_are_listed_as_ignored() -> None:
    result = plan(gpu_node("cpu-0", "4593.2.3", gpu=False), ubuntu_gpu_node("gpu-ubuntu"))
    assert result.nodes == ()
    [ignored] = result.ignored
    assert ignored.name == "gpu-ubuntu"
    assert "not Flatcar" in ignored.reason
    assert {t.reasons for t in result.targets} == {CHANNEL}


def test_the_fleet_follows_the_group_label_else_the_minor() -> None:
    nodes = [
        parse_node(gpu_node("a", "4593.2.5", group="beta")),  # a node switched to beta
        parse_node(gpu_node("b", "4081.3.10", group=None, pending="4757.1.0")),
        parse_node(gpu_node("cpu", "4722.0.0", gpu=False, group=None)),
    ]
    assert fleet_channels(nodes) == {"beta", "lts"}
