"""The ``FleetSource`` contract: one suite that ``MemoryFleetSource`` and
``KubernetesFleetSource`` (over the fake API server, real HTTP, small pages) both pass.

Every fixture Node comes back parsed exactly as ``parse_node`` parses it, in name order;
the label selector selects the same nodes on both (the Kubernetes one sends it to the API
server); a few hundred nodes in pages of seven come back complete; the GPU Operator's
CRDs absent are ``CrdAbsent``, present but empty are ``()``, present with objects are
parsed as ``parse_cluster_policy``/``parse_nvidia_driver`` parse them.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from releasebot.domain.fleet.nodes import parse_node
from releasebot.domain.fleet.operator import (
    CrdAbsent,
    DriverMode,
    OperatorView,
    parse_cluster_policy,
    parse_nvidia_driver,
    resolve_images,
)
from releasebot.domain.fleet.selectors import LabelSelector
from releasebot.domain.ports import FleetSource
from releasebot.fleet.kubernetes import KubernetesFleetSource
from releasebot.fleet.memory import MemoryFleetSource
from tests.support.kubeapi import FakeKubeApi

DATA = Path(__file__).parents[1] / "data" / "fleet"
Raw = dict[str, Any]
Make = Callable[..., FleetSource]


def raw_nodes() -> list[Raw]:
    return list(json.loads((DATA / "nodes.json").read_text()))


def raw_policy() -> Raw:
    return dict(json.loads((DATA / "clusterpolicy.json").read_text()))


def raw_drivers() -> list[Raw]:
    return list(json.loads((DATA / "nvidiadrivers.json").read_text()))


@pytest.fixture(params=["memory", "kubernetes"])
def make(request: pytest.FixtureRequest) -> Iterator[Make]:
    """``make(nodes, policies=None, drivers=None, selector="")``: a source over those
    objects (``None``: that CRD is not installed)."""
    sources: list[FleetSource] = []
    api: FakeKubeApi | None = None
    if request.param == "kubernetes":
        api = FakeKubeApi().start()

    def build(
        nodes: Sequence[Raw],
        policies: Sequence[Raw] | None = None,
        drivers: Sequence[Raw] | None = None,
        selector: str = "",
    ) -> FleetSource:
        parsed = LabelSelector.parse(selector)
        source: FleetSource
        if api is None:
            source = MemoryFleetSource(
                nodes, cluster_policies=policies, nvidia_drivers=drivers, selector=parsed
            )
        else:
            api.fleet.add_nodes(*nodes)
            if policies is not None or drivers is not None:
                api.fleet.install_gpu_operator_crds(policies or (), drivers or ())
            source = KubernetesFleetSource(
                api.client(), selector=parsed, page_size=7, sleep=lambda _: None
            )
        sources.append(source)
        return source

    try:
        yield build
    finally:
        for source in sources:
            source.close()
        if api is not None:
            api.stop()
            assert not api.server_errors, api.server_errors


def test_every_node_comes_back_parsed_in_name_order(make: Make) -> None:
    raws = raw_nodes()
    listing = make(raws).nodes()
    expected = sorted((parse_node(raw) for raw in raws), key=lambda node: node.name)
    assert list(listing.nodes) == expected
    assert listing.restarts == 0
    assert [node.name for node in listing.nodes][:3] == ["cpu-5", "gpu-a10g-0", "gpu-a10g-1"]


GPU_PRESENT = {
    "gpu-a10g-0",
    "gpu-a10g-1",
    "gpu-gh200-3",
    "gpu-ubuntu-4",
    "gpu-lts-6",
    "gpu-broken-7",
}


@pytest.mark.parametrize(
    ("selector", "names"),
    [
        ("nvidia.com/gpu.present=true", GPU_PRESENT),
        ("kubernetes.io/arch in (arm64)", {"gpu-gh200-3"}),
        ("!nvidia.com/gpu.present", {"gpu-l4-2", "cpu-5"}),
        (
            "node.kubernetes.io/instance-type notin (g5.2xlarge),!nvidia.com/gpu.present",
            {"gpu-l4-2", "cpu-5"},
        ),
        ("topology.kubernetes.io/zone=eu-central-1b", {"gpu-l4-2"}),
        ("example.com/nothing", set()),
    ],
)
def test_the_selector_selects_the_same_nodes(make: Make, selector: str, names: set[str]) -> None:
    listing = make(raw_nodes(), selector=selector).nodes()
    assert {node.name for node in listing.nodes} == names


def test_a_large_fleet_comes_back_complete(make: Make) -> None:
    template = raw_nodes()[0]
    raws = []
    for number in range(250):
        raw = copy.deepcopy(template)
        raw["metadata"]["name"] = f"gpu-{number:04d}"
        raws.append(raw)
    names = [node.name for node in make(raws).nodes().nodes]
    assert names == [f"gpu-{number:04d}" for number in range(250)]


def test_an_empty_cluster_has_no_nodes(make: Make) -> None:
    assert make([]).nodes().nodes == ()


def test_absent_crds_are_an_answer_not_an_error(make: Make) -> None:
    source = make(raw_nodes())
    assert source.cluster_policies() == CrdAbsent("clusterpolicies.nvidia.com")
    assert source.nvidia_drivers() == CrdAbsent("nvidiadrivers.nvidia.com")
    view = OperatorView.of(source.cluster_policies(), source.nvidia_drivers())
    assert view == OperatorView(None, None)
    assert resolve_images(source.nodes().nodes, view, "r.test/x/driver").mode is DriverMode.NONE


def test_installed_crds_without_objects_are_empty(make: Make) -> None:
    source = make(raw_nodes(), policies=[], drivers=[])
    assert source.cluster_policies() == ()
    assert source.nvidia_drivers() == ()


def test_operator_objects_come_back_parsed(make: Make) -> None:
    source = make(raw_nodes(), policies=[raw_policy()], drivers=raw_drivers())
    assert source.cluster_policies() == (parse_cluster_policy(raw_policy()),)
    drivers = source.nvidia_drivers()
    assert isinstance(drivers, tuple)
    assert {driver.name for driver in drivers} == {"flatcar-stable", "flatcar-alpha-vendor"}
    assert set(drivers) == {parse_nvidia_driver(raw) for raw in raw_drivers()}


def test_what_a_source_reads_feeds_the_operator_rules(make: Make) -> None:
    source = make(raw_nodes(), policies=[raw_policy()], drivers=[])
    view = OperatorView.of(source.cluster_policies(), source.nvidia_drivers())
    assert view == OperatorView((parse_cluster_policy(raw_policy()),), ())
    result = resolve_images(source.nodes().nodes, view, "registry.example.test/gpu/driver")
    assert result.mode is DriverMode.CLUSTER_POLICY
    assert {image.node for image in result.images} == {
        "gpu-a10g-0",
        "gpu-a10g-1",
        "gpu-l4-2",
        "gpu-gh200-3",
        "gpu-lts-6",
    }
