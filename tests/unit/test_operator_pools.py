"""``operator_pools``: which driver each pool of ``operator-values`` gets, and who keeps theirs.

``choose_drivers``: a driver named by hand wins (a branch or garbage is a config error);
else what the GPU Operator runs from releasebot's repository, per pool when it runs
several (a pool nodes only reboot into takes what those nodes run), and only driver
releases (a branch, a digest, a foreign repository do not count); else the newest planned;
else a config error. ``keep_pools``: a non-Flatcar GPU node keeps the object that serves it
today (ClusterPolicy, the NVIDIADriver selecting it, else the one without a selector), with
a DNS-safe name built from hostile label values (numbered when two collide), and is named
when nothing serves it. ``superseded`` names the cluster's NVIDIADrivers that would select
the same nodes as the proposed pools.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from releasebot.domain.fleet.nodes import NFD_OS_ID, NFD_VERSION_ID, parse_node
from releasebot.domain.fleet.operator import (
    DriverMode,
    OperatorView,
    parse_cluster_policy,
    parse_nvidia_driver,
)
from releasebot.domain.fleet.operator_pools import choose_drivers, keep_pools, superseded
from releasebot.domain.shared.errors import ConfigError
from releasebot.domain.shared.versions import DriverVersion, FlatcarVersion
from tests.support.fleetnodes import gpu_node, ubuntu_gpu_node

REPOSITORY = "registry.example.test/gpu/driver"
PLANNED = [DriverVersion.parse("580.178.04"), DriverVersion.parse("570.195.03")]
CRD_MODE = parse_cluster_policy(
    {"metadata": {"name": "cluster-policy"}, "spec": {"driver": {"useNvidiaDriverCRD": True}}}
)


def policy(version: str, repository: str = "registry.example.test/gpu") -> OperatorView:
    raw = json.loads((Path(__file__).parents[1] / "data/fleet/clusterpolicy.json").read_text())
    raw["spec"]["driver"].update(repository=repository, version=version)
    return OperatorView((parse_cluster_policy(raw),), ())


def nvidia_driver(name: str, version: str, selector: dict[str, str], **spec: Any) -> Any:
    return parse_nvidia_driver(
        {
            "metadata": {"name": name},
            "spec": {
                "repository": "registry.example.test/gpu",
                "image": "driver",
                "version": version,
                "nodeSelector": selector,
                **spec,
            },
        }
    )


def by_version(selector_version: str, version: str) -> Any:
    return nvidia_driver(
        f"fc-{selector_version}", version, {NFD_VERSION_ID: selector_version, NFD_OS_ID: "flatcar"}
    )


FLEET = [
    parse_node(gpu_node("gpu-0", "4593.2.5")),
    parse_node(gpu_node("gpu-1", "4593.2.4", pending="4593.2.5")),
    parse_node(gpu_node("gpu-2", "4459.2.4", pending="4593.2.3")),
    parse_node(ubuntu_gpu_node("gpu-ubuntu-4")),
]


def test_a_driver_named_by_hand_wins() -> None:
    choice = choose_drivers(FLEET, policy("580.95.05"), REPOSITORY, asked="570.195.03")
    assert (choice.default, dict(choice.by_version), choice.origin) == (
        "570.195.03",
        {},
        "--driver",
    )
    assert choice.why == "driver 570.195.03: named with --driver"


@pytest.mark.parametrize("asked", ["580", "sha256:" + "a" * 64, "580.95.05\x1b[31m", ""])
def test_a_driver_by_hand_must_be_a_release(asked: str) -> None:
    with pytest.raises(
        ConfigError, match=r"--driver: .* is not a driver release like 580\.178\.04"
    ):
        choose_drivers(FLEET, None, REPOSITORY, asked=asked)


def test_the_driver_the_cluster_runs_from_releasebots_repository() -> None:
    choice = choose_drivers(FLEET, policy("580.95.05"), REPOSITORY, planned=PLANNED)
    assert (choice.default, choice.origin, choice.warnings) == ("580.95.05", "cluster", ())
    assert choice.by_version[FlatcarVersion.parse("4593.2.3")] == "580.95.05"
    assert "what the GPU Operator runs from releasebot's repository" in choice.why


@pytest.mark.parametrize(
    "view",
    [
        policy("580.95.05", repository="nvcr.io/nvidia"),  # not releasebot's repository
        policy("580"),  # a branch, not a release
        policy("sha256:" + "b" * 64),  # a digest
        OperatorView(None, None),  # no operator
        None,  # objects unreadable
    ],
)
def test_else_the_newest_driver_planned(view: OperatorView | None) -> None:
    choice = choose_drivers(FLEET, view, REPOSITORY, planned=PLANNED)
    assert (choice.default, dict(choice.by_version), choice.origin) == ("580.178.04", {}, "plan")


def test_nothing_to_go_by_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="no driver is planned yet: name one"):
        choose_drivers(FLEET, policy("580", repository="nvcr.io/nvidia"), REPOSITORY)


def test_several_drivers_in_use_each_pool_keeps_its_own() -> None:
    view = OperatorView(
        (CRD_MODE,),
        (
            by_version("4593.2.5", "570.195.03"),
            by_version("4593.2.4", "580.95.05"),
            by_version("4459.2.4", "580.65.06"),
        ),
    )
    choice = choose_drivers(FLEET, view, REPOSITORY, planned=PLANNED)
    assert choice.default == "580.95.05"  # the newest in use, not the newest planned
    assert {v.text: d for v, d in choice.by_version.items()} == {
        "4593.2.5": "570.195.03",  # what gpu-0 runs there, though gpu-1 reboots into it
        "4593.2.4": "580.95.05",
        "4459.2.4": "580.65.06",
        "4593.2.3": "580.65.06",  # no node runs it yet: what gpu-2, rebooting into it, runs
    }
    (warning,) = choice.warnings
    assert warning == (
        "the cluster runs 3 drivers from releasebot's repository (570.195.03 on gpu-0; "
        "580.65.06 on gpu-2; 580.95.05 on gpu-1): each Flatcar pool keeps what its nodes run, "
        "a pool no node runs yet gets the newest, 580.95.05"
    )


def test_a_non_flatcar_node_keeps_what_the_cluster_policy_gives_it() -> None:
    pools, warnings = keep_pools(FLEET, policy("580.95.05"), DriverMode.CLUSTER_POLICY)
    (pool,) = pools
    assert (pool.name, pool.nodes, pool.source.label) == (
        "releasebot-keep-ubuntu22-04",
        ("gpu-ubuntu-4",),
        "ClusterPolicy/cluster-policy",
    )
    assert pool.node_selector == {NFD_OS_ID: "ubuntu", NFD_VERSION_ID: "22.04"}
    assert warnings == ()


def test_a_selecting_nvidia_driver_wins_over_one_without_a_selector() -> None:
    fallback = nvidia_driver("default", "580.95.05", {})
    ubuntu = nvidia_driver(
        "ubuntu", "570.195.03", {NFD_OS_ID: "ubuntu"}, repository="nvcr.io/nvidia"
    )
    other = nvidia_driver("rhel", "570.195.03", {NFD_OS_ID: "rhel"})
    for drivers, expected in (
        ((fallback, ubuntu, other), "ubuntu"),
        ((other, fallback), "default"),
    ):
        view = OperatorView((CRD_MODE,), drivers)
        (pool,), warnings = keep_pools(FLEET, view, DriverMode.NVIDIA_DRIVER)
        assert (pool.source.name, warnings) == (expected, ())


def test_a_non_flatcar_node_nothing_serves_is_named() -> None:
    view = OperatorView((CRD_MODE,), (nvidia_driver("rhel", "570.195.03", {NFD_OS_ID: "rhel"}),))
    cases = [
        (view, DriverMode.NVIDIA_DRIVER, "none selects it"),
        (policy("580.95.05"), DriverMode.DISABLED, "no ClusterPolicy deploys drivers"),
        (None, None, "the GPU Operator's objects could not be read"),
    ]
    for operator, mode, why in cases:
        pools, (warning,) = keep_pools(FLEET, operator, mode)
        assert pools == ()
        assert warning == (
            f"GPU node(s) on ubuntu22.04 (gpu-ubuntu-4) get no driver from the GPU Operator "
            f"today ({why}): no NVIDIADriver is written for them"
        )


def test_hostile_labels_make_a_dns_name_and_an_exact_selector() -> None:
    raw = ubuntu_gpu_node("gpu-odd-9")
    labels = raw["metadata"]["labels"]
    labels[NFD_OS_ID], labels[NFD_VERSION_ID] = "Rocky_Linux", "9.4" + "-x" * 29
    (pool,), _ = keep_pools([parse_node(raw)], policy("580.95.05"), DriverMode.CLUSTER_POLICY)
    assert pool.name == "releasebot-keep-rocky-linux9-4-x-x-x-x-x-x-x-x-x-x-x-x-x-x-x"
    assert len(pool.name) <= 60  # room for a number when two names collide
    assert pool.node_selector[NFD_VERSION_ID] == labels[NFD_VERSION_ID]
    labels[NFD_VERSION_ID] = "22.04\x1b[2J"  # not a label value: dropped, so no pool
    pools, (warning,) = keep_pools([parse_node(raw)], policy("1.2.3"), DriverMode.CLUSTER_POLICY)
    assert pools == ()
    assert "lack NFD os_release labels (gpu-odd-9)" in warning


def test_names_that_collide_get_a_number() -> None:
    nodes = []
    for name, os_id in (("gpu-a", "ubuntu"), ("gpu-b", "Ubuntu"), ("gpu-c", "ubu_ntu")):
        raw = ubuntu_gpu_node(name)
        raw["metadata"]["labels"][NFD_OS_ID] = os_id
        nodes.append(parse_node(raw))
    pools, _ = keep_pools(nodes, policy("580.95.05"), DriverMode.CLUSTER_POLICY)
    assert [(pool.name, pool.os_id) for pool in pools] == [
        ("releasebot-keep-ubuntu22-04", "Ubuntu"),
        ("releasebot-keep-ubu-ntu22-04", "ubu_ntu"),
        ("releasebot-keep-ubuntu22-04-2", "ubuntu"),
    ]


def test_objects_the_pools_replace_are_named() -> None:
    view = OperatorView(
        (CRD_MODE,),
        (
            by_version("4593.2.5", "580.95.05"),
            by_version("4081.3.9", "580.95.05"),  # selects no node: harmless
            nvidia_driver("releasebot-flatcar-4593-2-4", "580.95.05", {NFD_VERSION_ID: "4593.2.4"}),
            nvidia_driver("vgpu", "580.95.05", {}, driverType="vgpu"),  # not a gpu driver
        ),
    )
    proposed = {"releasebot-flatcar-4593-2-4", "releasebot-flatcar-4593-2-5"}
    assert superseded(FLEET, view, proposed) == (
        "NVIDIADriver(s) fc-4593.2.5 select GPU nodes these pools select too: delete them "
        "right after applying these; the operator reconciles no NVIDIADriver while two "
        "select one node"
    )
    assert superseded(FLEET, OperatorView((CRD_MODE,), ()), proposed) is None
    assert superseded(FLEET, None, proposed) is None
