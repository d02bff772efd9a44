"""The GPU Operator's rules: which image reference each Flatcar GPU node pulls.

ClusterPolicy and NVIDIADriver objects shaped like real ones (``tests/data/fleet/``) over
the fixture fleet: the exact references (OS suffix, digest, precompiled, image-only paths),
ClusterPolicy's one OS tag on a mixed fleet, NVIDIADriver selection and its conflicts,
nodes without NFD labels, foreign repositories, and which mode the operator is in.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from releasebot.domain.fleet.nodes import FleetNode, ParsedNode, parse_node
from releasebot.domain.fleet.operator import (
    DriverMode,
    DriverSource,
    NodeImage,
    OperatorView,
    SourceKind,
    parse_cluster_policy,
    parse_nvidia_driver,
    resolve_images,
)

DATA = Path(__file__).parents[1] / "data" / "fleet"
OURS = "registry.example.test/gpu/driver"


def raw_nodes() -> list[dict[str, Any]]:
    return list(json.loads((DATA / "nodes.json").read_text()))


def fleet(names: set[str] | None = None) -> list[ParsedNode]:
    nodes = [parse_node(raw) for raw in raw_nodes()]
    return [node for node in nodes if names is None or node.name in names]


def policy(**driver: Any) -> DriverSource:
    raw = json.loads((DATA / "clusterpolicy.json").read_text())
    raw["spec"]["driver"].update(driver)
    return parse_cluster_policy(raw)


def by_node(images: tuple[NodeImage, ...]) -> dict[str, NodeImage]:
    return {image.node: image for image in images}


def test_a_cluster_policy_is_read_as_the_operator_reads_it() -> None:
    source = policy()
    assert source == DriverSource(
        kind=SourceKind.CLUSTER_POLICY,
        name="cluster-policy",
        repository="registry.example.test/gpu",
        image="driver",
        version="580.95.05",
    )
    assert source.is_ours(OURS)
    assert source.is_ours("Registry.Example.Test/gpu/driver/")
    assert not source.is_ours("registry.example.test/gpu/other")


def test_nvidia_drivers_are_read_with_their_selectors() -> None:
    raws = json.loads((DATA / "nvidiadrivers.json").read_text())
    stable, vendor = (parse_nvidia_driver(raw) for raw in raws)
    assert stable.node_selector == (("example.com/pool", "stable"),)
    assert stable.label == "NVIDIADriver/flatcar-stable"
    assert stable.is_ours(OURS)
    assert not vendor.is_ours(OURS)
    assert vendor.path == "nvcr.io/nvidia/driver:580.95.05"


@pytest.mark.parametrize(
    ("driver", "reference"),
    [
        ({}, "registry.example.test/gpu/driver:580.95.05-flatcar4593.2.5"),
        ({"version": "580"}, "registry.example.test/gpu/driver:580-flatcar4593.2.5"),
        (
            {"version": "sha256:" + "ab" * 32},
            "registry.example.test/gpu/driver@sha256:" + "ab" * 32,
        ),
        (  # tools like kbld put the whole reference into `image`
            {"repository": "", "version": "", "image": "registry.example.test/gpu/driver:580"},
            "registry.example.test/gpu/driver:580-flatcar4593.2.5",
        ),
        (
            {"usePrecompiled": True, "version": "580"},
            "registry.example.test/gpu/driver:580-6.12.102-flatcar-flatcar4593.2.5",
        ),
    ],
)
def test_the_reference_a_node_pulls(driver: dict[str, Any], reference: str) -> None:
    images = resolve_images(fleet({"gpu-a10g-0"}), OperatorView((policy(**driver),), None), OURS)
    assert images.mode is DriverMode.CLUSTER_POLICY
    (image,) = images.images
    assert image.reference == reference
    assert image.problem is None
    assert image.alternatives == ()
    assert image.source == "ClusterPolicy/cluster-policy"


def test_a_precompiled_digest_is_a_problem_not_a_reference() -> None:
    source = DriverSource(
        SourceKind.NVIDIA_DRIVER, "d", "r.test/x", "driver", "sha256:" + "0" * 64, precompiled=True
    )
    assert source.reference("flatcar4593.2.5", "6.12.102-flatcar") == (
        None,
        "NVIDIADriver/d sets usePrecompiled with a digest: the operator refuses it",
    )
    broken = policy(usePrecompiled=True, version="sha256:" + "0" * 64)
    reference, problem = broken.reference("flatcar4593.2.5", "6.12.102-flatcar")
    assert reference is None
    assert problem is not None
    assert "not a valid image reference" in problem


def test_a_cluster_policy_on_one_version_gives_every_node_its_own_tag() -> None:
    nodes = fleet({"gpu-a10g-0", "gpu-gh200-3", "cpu-5"})
    result = resolve_images(nodes, OperatorView((policy(),), None), OURS)
    assert result.warnings == ()
    assert {image.node: image.reference for image in result.images} == {
        "gpu-a10g-0": "registry.example.test/gpu/driver:580.95.05-flatcar4593.2.5",
        "gpu-gh200-3": "registry.example.test/gpu/driver:580.95.05-flatcar4593.2.5",
    }  # the CPU node pulls nothing
    assert all(image.ours for image in result.images)


def test_a_cluster_policy_on_a_mixed_fleet_may_give_any_node_any_tag() -> None:
    result = resolve_images(fleet(), OperatorView((policy(),), None), OURS)
    images = by_node(result.images)
    behind = images["gpu-a10g-1"]
    assert behind.reference == "registry.example.test/gpu/driver:580.95.05-flatcar4593.2.4"
    assert behind.alternatives == (
        "registry.example.test/gpu/driver:580.95.05-flatcar4593.2.5",
        "registry.example.test/gpu/driver:580.95.05-flatcar4628.0.0",
        "registry.example.test/gpu/driver:580.95.05-ubuntu22.04",
    )
    assert result.warnings == (
        "ClusterPolicy/cluster-policy gives all GPU nodes the OS tag of one of them, whichever "
        "the operator lists first, but they have 5 OS tags (<no NFD labels>, flatcar4593.2.4, "
        "flatcar4593.2.5, flatcar4628.0.0, ubuntu22.04): use one NVIDIADriver per Flatcar "
        "version (GPU Operator >= 26.3.0)",
        "a GPU node without NFD os_release labels makes the ClusterPolicy driver fail if picked",
    )
    # The node without NFD labels still needs (and is told) its own tag.
    lts = images["gpu-lts-6"]
    assert lts.reference == "registry.example.test/gpu/driver:580.95.05-flatcar4081.3.6"


def test_nvidia_drivers_select_nodes_and_pool_them_by_version() -> None:
    raws = raw_nodes()
    for raw in raws:
        labels = raw["metadata"]["labels"]
        if raw["metadata"]["name"] in ("gpu-a10g-0", "gpu-a10g-1", "gpu-gh200-3", "gpu-lts-6"):
            labels["example.com/pool"] = "stable"
        if raw["metadata"]["name"] == "gpu-l4-2":
            # The fixture's quoted value could never match a selector (the operator
            # compares label bytes); a real NFD writes it plain.
            labels["feature.node.kubernetes.io/system-os_release.VERSION_ID"] = "4628.0.0"
    nodes = [parse_node(raw) for raw in raws]
    drivers = tuple(
        parse_nvidia_driver(raw) for raw in json.loads((DATA / "nvidiadrivers.json").read_text())
    )
    view = OperatorView((policy(useNvidiaDriverCRD=True),), drivers)
    result = resolve_images(nodes, view, OURS)
    assert result.mode is DriverMode.NVIDIA_DRIVER
    images = by_node(result.images)
    assert (
        images["gpu-a10g-1"].reference
        == "registry.example.test/gpu/driver:580.95.05-flatcar4593.2.4"
    )
    assert images["gpu-a10g-1"].ours
    vendor = images["gpu-l4-2"]
    assert vendor.reference == "nvcr.io/nvidia/driver:580.95.05-flatcar4628.0.0"
    assert vendor.source == "NVIDIADriver/flatcar-alpha-vendor"
    assert not vendor.ours  # reported, never built for
    lts = images["gpu-lts-6"]
    assert lts.reference is None
    assert lts.problem is not None
    assert "no NFD os_release labels" in lts.problem
    assert all(image.alternatives == () for image in result.images)


def test_a_node_no_nvidia_driver_selects_gets_none() -> None:
    drivers = (
        DriverSource(
            SourceKind.NVIDIA_DRIVER,
            "pool-x",
            "r.test/gpu",
            "driver",
            "580",
            node_selector=(("pool", "x"),),
        ),
    )
    result = resolve_images(
        fleet({"gpu-a10g-0"}), OperatorView((policy(useNvidiaDriverCRD=True),), drivers), OURS
    )
    (image,) = result.images
    assert image == NodeImage("gpu-a10g-0", None, None, problem="no NVIDIADriver selects this node")


def test_overlapping_nvidia_drivers_are_a_conflict() -> None:
    everyone = DriverSource(SourceKind.NVIDIA_DRIVER, "all", "r.test/gpu", "driver", "580")
    flatcar = DriverSource(
        SourceKind.NVIDIA_DRIVER, "flatcar", "r.test/gpu", "driver", "580",
        node_selector=(("feature.node.kubernetes.io/system-os_release.ID", "flatcar"),),
    )  # fmt: skip
    view = OperatorView((policy(useNvidiaDriverCRD=True),), (everyone, flatcar))
    (image,) = resolve_images(fleet({"gpu-a10g-0"}), view, OURS).images
    assert image.reference is None
    assert (
        image.problem
        == "selected by several NVIDIADrivers (all, flatcar): the operator rejects them"
    )


@pytest.mark.parametrize(
    ("view", "mode", "warning"),
    [
        (OperatorView(None, None), DriverMode.NONE, None),
        (OperatorView((), ()), DriverMode.NONE, None),
        (
            OperatorView(
                None, (DriverSource(SourceKind.NVIDIA_DRIVER, "d", "r.t/x", "driver", "580"),)
            ),
            DriverMode.NONE,
            "NVIDIADriver objects exist but no ClusterPolicy",
        ),
        (OperatorView((policy(enabled=False),), None), DriverMode.DISABLED, None),
        (
            OperatorView((policy(useNvidiaDriverCRD=True),), None),
            DriverMode.NVIDIA_DRIVER,
            "defers to NVIDIADriver objects, but there are none",
        ),
        (
            OperatorView(
                (policy(),),
                (DriverSource(SourceKind.NVIDIA_DRIVER, "d", "r.t/x", "driver", "580"),),
            ),
            DriverMode.CLUSTER_POLICY,
            "NVIDIADriver objects are ignored",
        ),
    ],
)
def test_which_object_decides(view: OperatorView, mode: DriverMode, warning: str | None) -> None:
    result = resolve_images(fleet({"gpu-a10g-0"}), view, OURS)
    assert result.mode is mode
    assert (warning is None) == (not result.warnings)
    if warning is not None:
        assert any(warning in w for w in result.warnings)
    if mode in (DriverMode.NONE, DriverMode.DISABLED):
        (image,) = result.images
        assert image.reference is None
        assert image.problem


def test_several_cluster_policies_are_warned_about() -> None:
    second = policy()
    second = DriverSource(**{**second.__dict__, "name": "another"})
    result = resolve_images(fleet({"gpu-a10g-0"}), OperatorView((policy(), second), None), OURS)
    assert result.warnings == (
        "several ClusterPolicies (another, cluster-policy): the operator acts on one only",
    )


def test_hostile_operator_objects_never_raise() -> None:
    for raw in (None, [], "x", {"spec": []}, {"spec": {"driver": "x"}}, {"metadata": {"name": 5}}):
        assert parse_cluster_policy(raw).image == ""
        assert parse_nvidia_driver(raw).node_selector == ()
    odd = parse_nvidia_driver(
        {
            "metadata": {"name": "a\x1bb"},
            "spec": {"nodeSelector": {"k": 5, 3: "v"}, "image": "x" * 10_000},
        }
    )
    assert odd.name == "a"  # ESC b is a whole escape sequence: it goes with its final byte
    assert odd.node_selector == (("k", ""),)
    assert len(odd.image) <= 512
    (image,) = resolve_images(
        fleet({"gpu-a10g-0"}), OperatorView((parse_cluster_policy({}),), None), OURS
    ).images
    assert image.reference is None
    assert image.problem == "ClusterPolicy/(unnamed) names no driver image"


def test_an_invalid_tag_is_a_problem() -> None:
    source = DriverSource(SourceKind.CLUSTER_POLICY, "p", "r.test/gpu", "driver", "5" * 120)
    node = fleet({"gpu-a10g-0"})[0]
    assert isinstance(node, FleetNode)
    reference, problem = source.reference("flatcar4593.2.5", node.kernel)
    assert reference is None
    assert problem is not None
    assert problem.endswith("is not a valid image reference")


def test_the_fixture_is_not_changed_by_parsing() -> None:
    raws = raw_nodes()
    before = copy.deepcopy(raws)
    for raw in raws:
        parse_node(raw)
    assert raws == before


def test_a_selector_matches_label_bytes_as_the_operator_does() -> None:
    vendor = parse_nvidia_driver(json.loads((DATA / "nvidiadrivers.json").read_text())[1])
    view = OperatorView((policy(useNvidiaDriverCRD=True),), (vendor,))
    (image,) = resolve_images(fleet({"gpu-l4-2"}), view, OURS).images  # VERSION_ID '"4628.0.0"'
    assert image.problem == "no NVIDIADriver selects this node"
