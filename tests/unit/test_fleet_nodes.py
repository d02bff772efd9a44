"""``parse_node`` and ``channel_for_version``: what a Kubernetes Node says about itself.

Runs the parser over the realistic fixture set in ``tests/data/fleet/nodes.json`` (GPU and
CPU nodes, two stable releases and an alpha, arm64, quoted and CRLF ``VERSION_ID``s, a FLUO
pending version, a non-Flatcar GPU node, a node without NFD, a garbage ``osImage``), then
over hand-made hostile variants of one node, and finally over random garbage, which must
never raise.
"""

from __future__ import annotations

import copy
import json
import random
from pathlib import Path
from typing import Any

import pytest

from releasebot.domain.fleet.nodes import (
    DEFAULT_GATE_ANNOTATION,
    FLUO_BEFORE_REBOOT,
    FLUO_GROUP,
    FLUO_NEW_VERSION,
    FLUO_REBOOT_PAUSED,
    NFD_OS_ID,
    NFD_VERSION_ID,
    FleetNode,
    IgnoredNode,
    channel_for_version,
    parse_node,
)
from releasebot.domain.shared.versions import Arch, FlatcarVersion

NODES = Path(__file__).parents[1] / "data" / "fleet" / "nodes.json"


def fixture_nodes() -> dict[str, dict[str, Any]]:
    return {raw["metadata"]["name"]: raw for raw in json.loads(NODES.read_text())}


def flatcar(raw: object, **kwargs: Any) -> FleetNode:
    node = parse_node(raw, **kwargs)
    assert isinstance(node, FleetNode), node
    return node


def ignored(raw: object) -> IgnoredNode:
    node = parse_node(raw)
    assert isinstance(node, IgnoredNode), node
    return node


@pytest.fixture
def base() -> dict[str, Any]:
    """A fresh copy of the plain GPU node of the fixture set, to mutate."""
    return copy.deepcopy(fixture_nodes()["gpu-a10g-0"])


def test_the_fixture_set_parses_as_each_node_says() -> None:
    parsed = {name: parse_node(raw) for name, raw in fixture_nodes().items()}
    summary = {
        name: (node.version.text, node.arch.value, node.kernel, node.is_gpu, node.version_source)
        for name, node in parsed.items()
        if isinstance(node, FleetNode)
    }
    assert summary == {
        "gpu-a10g-0": ("4593.2.5", "amd64", "6.12.102-flatcar", True, "nfd"),
        "gpu-a10g-1": ("4593.2.4", "amd64", "6.12.97-flatcar", True, "nfd"),
        "gpu-l4-2": ("4628.0.0", "amd64", "6.12.106-flatcar", True, "nfd"),
        "gpu-gh200-3": ("4593.2.5", "arm64", "6.12.102-flatcar", True, "nfd"),
        "cpu-5": ("4593.2.5", "amd64", "6.12.102-flatcar", False, "nfd"),
        "gpu-lts-6": ("4081.3.6", "amd64", "6.6.95-flatcar", True, "osImage"),
    }
    reasons = {name: n.reason for name, n in parsed.items() if isinstance(n, IgnoredNode)}
    assert set(reasons) == {"gpu-ubuntu-4", "gpu-broken-7"}
    assert "'ubuntu22.04'" in reasons["gpu-ubuntu-4"]
    assert "not Flatcar" in reasons["gpu-ubuntu-4"]
    assert reasons["gpu-broken-7"].startswith("no Flatcar version")
    assert "\x1b" not in reasons["gpu-broken-7"]


def test_gpu_evidence_names_the_label_that_says_so() -> None:
    nodes = fixture_nodes()
    assert flatcar(nodes["gpu-a10g-0"]).gpu == "nvidia.com/gpu.present=true"
    # Before the GPU Operator ran, NFD's PCI vendor label is all there is.
    assert flatcar(nodes["gpu-l4-2"]).gpu == "feature.node.kubernetes.io/pci-10de.present=true"
    assert flatcar(nodes["cpu-5"]).gpu is None
    ubuntu = ignored(nodes["gpu-ubuntu-4"])
    assert ubuntu.is_gpu
    assert ubuntu.os_tag == "ubuntu22.04"


def test_the_class_qualified_pci_labels_count_as_the_operator_counts_them(
    base: dict[str, Any],
) -> None:
    labels = base["metadata"]["labels"]
    for key in [k for k in labels if k.startswith("nvidia.com/") or "pci-10de" in k]:
        del labels[key]
    assert flatcar(base).gpu is None
    labels["feature.node.kubernetes.io/pci-0302_10de.present"] = "true"
    assert flatcar(base).gpu == "feature.node.kubernetes.io/pci-0302_10de.present=true"
    labels["nvidia.com/gpu.present"] = "false"  # the operator's "no longer has GPUs"
    assert flatcar(base).gpu == "feature.node.kubernetes.io/pci-0302_10de.present=true"


def test_quoted_and_crlf_version_ids_are_cleaned_and_noted() -> None:
    nodes = fixture_nodes()
    alpha = flatcar(nodes["gpu-l4-2"])
    assert alpha.version == FlatcarVersion.parse("4628.0.0")
    assert alpha.os_tag == "flatcar4628.0.0"
    assert alpha.notes == ("VERSION_ID label '\"4628.0.0\"' read as 4628.0.0",)
    arm = flatcar(nodes["gpu-gh200-3"])
    assert arm.version.text == "4593.2.5"
    assert arm.arch is Arch.ARM64
    assert arm.notes == ("VERSION_ID label '4593.2.5\\r\\n' read as 4593.2.5",)


def test_fluo_state_and_the_pending_version() -> None:
    nodes = fixture_nodes()
    behind = flatcar(nodes["gpu-a10g-1"])
    assert behind.pending_version == FlatcarVersion.parse("4593.2.5")
    assert behind.fluo.reboot_needed
    assert behind.fluo.before_reboot
    assert behind.fluo.status == "UPDATE_STATUS_UPDATED_NEED_REBOOT"
    assert behind.fluo.group == "stable"
    idle = flatcar(nodes["gpu-a10g-0"])  # new-version 0.0.0: update_engine has nothing
    assert idle.pending_version is None
    assert not idle.fluo.reboot_needed
    assert not idle.fluo.before_reboot


def test_a_new_version_equal_to_the_running_one_is_not_pending(base: dict[str, Any]) -> None:
    base["metadata"]["annotations"][FLUO_NEW_VERSION] = "4593.2.5"
    assert flatcar(base).pending_version is None


def test_a_garbage_new_version_is_noted_not_pending(base: dict[str, Any]) -> None:
    base["metadata"]["annotations"][FLUO_NEW_VERSION] = "4593.2.x\x07"
    node = flatcar(base)
    assert node.pending_version is None
    assert node.notes == ("FLUO new-version '4593.2.x' is not a Flatcar version",)


def test_the_gate_annotation_and_reboot_paused_are_read(base: dict[str, Any]) -> None:
    annotations = base["metadata"]["annotations"]
    assert flatcar(base).gate is None
    annotations[DEFAULT_GATE_ANNOTATION] = "true"
    annotations[FLUO_REBOOT_PAUSED] = "true"
    base["metadata"]["labels"][FLUO_BEFORE_REBOOT] = "true"
    node = flatcar(base)
    assert node.gate == "true"
    assert node.fluo.reboot_paused
    assert node.fluo.before_reboot
    annotations["example.com/ready"] = "no"
    assert flatcar(base, gate_annotation="example.com/ready").gate == "no"


def test_without_nfd_the_version_and_kernel_come_from_the_kubelet() -> None:
    node = flatcar(fixture_nodes()["gpu-lts-6"])
    assert node.version_source == "osImage"
    assert not node.has_os_labels
    assert node.os_tag is None  # the GPU Operator computes no tag for it
    assert node.kernel == "6.6.95-flatcar"


def test_a_garbage_nfd_version_falls_back_to_the_os_image(base: dict[str, Any]) -> None:
    base["metadata"]["labels"][NFD_VERSION_ID] = "rolling"
    node = flatcar(base)
    assert node.version.text == "4593.2.5"
    assert node.version_source == "osImage"
    assert node.notes == ("NFD VERSION_ID 'rolling' is not a Flatcar version",)


def test_nfd_and_os_image_disagreeing_is_noted(base: dict[str, Any]) -> None:
    base["status"]["nodeInfo"]["osImage"] = "Flatcar Container Linux by Kinvolk 4593.2.6 (Oklo)"
    node = flatcar(base)
    assert node.version.text == "4593.2.5"  # what the GPU Operator tags from
    assert node.notes == (
        "osImage says 4593.2.6: NFD has not relabelled the node since its reboot",
    )


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        (lambda n: n["metadata"]["labels"].update({NFD_OS_ID: "rhcos"}), "runs 'rhcos4593.2.5'"),
        (
            lambda n: (
                n["metadata"]["labels"].pop(NFD_OS_ID)
                and n["status"]["nodeInfo"].update(osImage="Bottlerocket OS 1.20.3 (aws-k8s-1.29)")
            ),
            "osImage 'Bottlerocket OS 1.20.3 (aws-k8s-1.29)' is not Flatcar",
        ),
        (
            lambda n: n["metadata"].update(labels={}) or n["status"].update(nodeInfo={}),
            "no OS information",
        ),
        (
            lambda n: n["metadata"]["labels"].update({"kubernetes.io/arch": "ppc64le"}),
            "architecture 'ppc64le': Flatcar ships amd64 and arm64 only",
        ),
        (
            lambda n: (
                n["metadata"]["labels"].pop("kubernetes.io/arch")
                and n["status"]["nodeInfo"].pop("architecture")
            ),
            "no architecture",
        ),
        (
            lambda n: (
                n["metadata"]["labels"].update({NFD_VERSION_ID: "4593.2\u202e"})
                or n["status"]["nodeInfo"].update(osImage="Flatcar Container Linux by Kinvolk")
            ),
            "no Flatcar version: VERSION_ID label '4593.2', osImage 'Flatcar Container",
        ),
    ],
)
def test_nodes_releasebot_cannot_build_for_are_ignored_with_a_reason(
    base: dict[str, Any], change: Any, reason: str
) -> None:
    change(base)
    node = ignored(base)
    assert reason in node.reason
    assert node.name == "gpu-a10g-0"
    assert node.reason.isprintable()


def test_hostile_values_are_bounded_and_printable(base: dict[str, Any]) -> None:
    meta = base["metadata"]
    meta["name"] = "gpu-\x1b]0;pwned\x07" + "x" * 10_000
    meta["labels"][FLUO_GROUP] = ["stable"]  # not a string
    meta["labels"]["feature.node.kubernetes.io/kernel-version.full"] = "6.12.102-flatcar\n rm -rf"
    meta["labels"]["bad key!"] = "x"
    meta["labels"]["example.com/long"] = "v" * 64
    base["status"]["nodeInfo"]["kernelVersion"] = 6
    node = flatcar(base)
    assert len(node.name) <= 253
    assert node.name.isprintable()
    assert node.fluo.group is None
    assert node.kernel is None  # neither source holds a kernel version
    assert "bad key!" not in node.labels
    assert "example.com/long" not in node.labels
    assert node.labels["kubernetes.io/hostname"] == "gpu-a10g-0"


def test_a_node_without_a_name_is_still_parsed(base: dict[str, Any]) -> None:
    del base["metadata"]["name"]
    assert flatcar(base).name == "(unnamed)"


def _garbage(rng: random.Random, depth: int = 0) -> object:
    choice = rng.randrange(9 if depth < 4 else 5)
    if choice == 0:
        return None
    if choice == 1:
        return rng.choice([True, False, 0, -1, 3.5, 10**30])
    if choice == 2:
        return "".join(chr(rng.randrange(0, 0x3000)) for _ in range(rng.randrange(0, 40)))
    if choice == 3:
        return rng.choice(["flatcar", "4593.2.5", "true", "amd64", "0.0.0", '"4628.0.0"\r\n'])
    if choice == 4:
        return "Flatcar Container Linux by Kinvolk " + str(rng.random())
    if choice in (5, 6):
        keys = [
            "metadata", "status", "nodeInfo", "labels", "annotations", "name", "osImage",
            "kernelVersion", "architecture", NFD_OS_ID, NFD_VERSION_ID, FLUO_NEW_VERSION,
            "kubernetes.io/arch", "nvidia.com/gpu.present", FLUO_GROUP,
        ]  # fmt: skip
        return {rng.choice(keys): _garbage(rng, depth + 1) for _ in range(rng.randrange(6))}
    return [_garbage(rng, depth + 1) for _ in range(rng.randrange(4))]


def test_random_garbage_never_raises() -> None:
    rng = random.Random(20261201)
    results = [parse_node(_garbage(rng)) for _ in range(5000)]
    assert all(isinstance(node, FleetNode | IgnoredNode) for node in results)
    for node in results:
        assert node.name.isprintable()
        if isinstance(node, IgnoredNode):
            assert node.reason.isprintable()


def test_garbage_inside_a_real_node_never_raises(base: dict[str, Any]) -> None:
    rng = random.Random(7)
    paths = [
        ("metadata",), ("metadata", "labels"), ("metadata", "annotations"), ("status",),
        ("status", "nodeInfo"), ("metadata", "labels", NFD_VERSION_ID),
        ("metadata", "labels", "kubernetes.io/arch"), ("metadata", "annotations", FLUO_NEW_VERSION),
    ]  # fmt: skip
    for _ in range(2000):
        node = copy.deepcopy(base)
        path = rng.choice(paths)
        target = node
        for key in path[:-1]:
            target = target[key]
        target[path[-1]] = _garbage(rng)
        assert isinstance(parse_node(node), FleetNode | IgnoredNode)


@pytest.mark.parametrize(
    ("version", "group", "channel"),
    [
        ("4593.2.5", None, "stable"),
        ("4628.0.0", None, "alpha"),
        ("4593.1.0", None, "beta"),
        ("4081.3.6", None, "lts"),
        ("4593.2.5", "beta", "beta"),  # FLUO's group wins when it is a known channel
        ("4593.2.5", "STABLE", "stable"),
        ("4593.2.5", "my-nebraska-group", "stable"),
        ("2605.22.1", None, "lts"),  # LTS-2021
        ("2605.12.0", None, None),  # the minor counted point releases then
        ("2765.2.0", None, "stable"),
        ("3033.99.0", None, None),  # the dead edge channel
        ("4593.7.0", None, None),
    ],
)
def test_channel_for_version(version: str, group: str | None, channel: str | None) -> None:
    assert channel_for_version(FlatcarVersion.parse(version), group) == channel


def test_known_channels_include_lts_streams() -> None:
    known = ("alpha", "beta", "stable", "lts", "lts-2024")
    assert channel_for_version(FlatcarVersion.parse("4081.3.6"), "lts-2024", known) == "lts-2024"
