"""Node objects shaped as the API server returns them, made to order for fleet tests.

``gpu_node`` writes what NFD, the kubelet, the GPU Operator's feature discovery and FLUO's
agent put on a real Flatcar GPU node (the same keys as ``tests/data/fleet/nodes.json``):
the os_release and kernel labels, ``nvidia.com/gpu.present``, FLUO's ``id``/``version``/
``group`` labels and ``status``/``reboot-needed``/``new-version`` annotations, and
``status.nodeInfo``. Options change one fact at a time (a pending version, FLUO's
``before-reboot`` and ``after-reboot`` labels, releasebot's own gate and proof annotations,
the GPUs allocatable, the GPU Operator's upgrade state, the boot ID, no GPU).
"""

from __future__ import annotations

import zlib
from typing import Any

from releasebot.domain.fleet.nodes import (
    DEFAULT_GATE_ANNOTATION,
    DEFAULT_PROOF_ANNOTATION,
    DRIVER_UPGRADE_STATE,
    FLUO_AFTER_REBOOT,
    FLUO_BEFORE_REBOOT,
    FLUO_GROUP,
    FLUO_NEW_VERSION,
    FLUO_PREFIX,
    FLUO_REBOOT_NEEDED,
    FLUO_STATUS,
    GATE_VERSION_ANNOTATION,
    NFD_KERNEL,
    NFD_OS_ID,
    NFD_VERSION_ID,
)

KERNELS = {
    "4459.2.4": "6.12.74",
    "4593.2.3": "6.12.93",
    "4593.2.4": "6.12.95",
    "4593.2.5": "6.12.102",
    "4081.3.10": "6.6.150",
    "4722.1.0": "6.12.95",
    "4757.1.0": "6.12.102",
}


def gpu_node(
    name: str,
    version: str,
    *,
    arch: str = "amd64",
    gpu: bool = True,
    group: str | None = "stable",
    pending: str | None = None,
    before_reboot: bool = False,
    gate: str | None = None,
    gate_version: str | None = None,
    resource_version: str = "1",
    after_reboot: bool = False,
    proof: str | None = None,
    gpus: int | None = 8,
    upgrade_state: str | None = None,
    boot_id: str = "boot-1",
) -> dict[str, Any]:
    kernel = KERNELS.get(version, "6.12.102") + "-flatcar"
    serial = zlib.crc32(name.encode())
    major, minor, _ = version.split(".")
    labels = {
        "beta.kubernetes.io/arch": arch,
        "kubernetes.io/arch": arch,
        "kubernetes.io/hostname": name,
        "kubernetes.io/os": "linux",
        NFD_OS_ID: "flatcar",
        NFD_VERSION_ID: version,
        NFD_VERSION_ID + ".major": major,
        NFD_VERSION_ID + ".minor": minor,
        NFD_KERNEL: kernel,
        FLUO_PREFIX + "id": "flatcar",
        FLUO_PREFIX + "version": version,
    }
    if group is not None:
        labels[FLUO_GROUP] = group
    if gpu:
        labels["nvidia.com/gpu.present"] = "true"
        labels["feature.node.kubernetes.io/pci-10de.present"] = "true"
    if before_reboot:
        labels[FLUO_BEFORE_REBOOT] = "true"
    if after_reboot:
        labels[FLUO_AFTER_REBOOT] = "true"
    if upgrade_state is not None:
        labels[DRIVER_UPGRADE_STATE] = upgrade_state
    annotations = {
        "node.alpha.kubernetes.io/ttl": "0",
        FLUO_NEW_VERSION: pending or "0.0.0",
        FLUO_REBOOT_NEEDED: "true" if pending else "false",
        FLUO_STATUS: "UPDATE_STATUS_UPDATED_NEED_REBOOT" if pending else "UPDATE_STATUS_IDLE",
    }
    if gate is not None:
        annotations[DEFAULT_GATE_ANNOTATION] = gate
    if gate_version is not None:
        annotations[GATE_VERSION_ANNOTATION] = gate_version
    if proof is not None:
        annotations[DEFAULT_PROOF_ANNOTATION] = proof
    status: dict[str, Any] = {}
    if gpus is not None and gpu:
        status["allocatable"] = {"cpu": "32", "nvidia.com/gpu": str(gpus)}
    return {
        "kind": "Node",
        "apiVersion": "v1",
        "metadata": {
            "name": name,
            "uid": f"00000000-0000-4000-8000-{serial:012d}",
            "resourceVersion": resource_version,
            "labels": labels,
            "annotations": annotations,
        },
        "spec": {"providerID": f"aws:///eu-west-1a/i-{serial:08x}"},
        "status": {
            **status,
            "nodeInfo": {
                "bootID": boot_id,
                "architecture": arch,
                "kernelVersion": kernel,
                "osImage": f"Flatcar Container Linux by Kinvolk {version} (Oklo)",
                "operatingSystem": "linux",
                "containerRuntimeVersion": "containerd://1.7.23",
                "kubeletVersion": "v1.33.4",
            },
        },
    }


def ubuntu_gpu_node(name: str) -> dict[str, Any]:
    """A GPU node on Ubuntu: the fleet lists it as ignored, with its reason."""
    node = gpu_node(name, "4593.2.5", group=None)
    labels = node["metadata"]["labels"]
    labels[NFD_OS_ID], labels[NFD_VERSION_ID] = "ubuntu", "22.04"
    node["status"]["nodeInfo"]["osImage"] = "Ubuntu 22.04.5 LTS"
    return node
