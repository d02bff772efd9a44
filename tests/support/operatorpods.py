"""The GPU Operator's Pods on a node, shaped as the API server returns them, for proof tests.

``driver_pod`` is a driver DaemonSet Pod (labels ``app: nvidia-driver-daemonset`` and
``app.kubernetes.io/component: nvidia-driver``, init container ``k8s-driver-manager``,
container ``nvidia-driver-ctr``) in one of the states the kubelet reports after a reboot:

- ``ready``: every init container completed, the driver container running and Ready (its
  startup probe passed: module loaded, ``nvidia-smi`` works);
- ``starting``: running, the startup probe not passed yet (not Ready);
- ``crashloop``: ``waiting: CrashLoopBackOff`` with ``restartCount`` and the last run in
  ``lastState.terminated`` (exit 1), as after a module that does not load;
- ``init-error``: ``k8s-driver-manager`` terminated with exit code 1 (``Init:Error``), the
  driver container ``waiting: PodInitializing``; as on a real node, a container that never
  ran reports ``imageID: ""``.

Its ``imageID`` takes every form kubelets write (``image_id_form``): ``docker-pullable``
(``docker-pullable://host/repo@sha256:…``, dockershim and cri-dockerd), ``repo``
(``host/repo@sha256:…``, containerd and CRI-O), ``mirror`` (the name of the mirror it was
pulled through, ``mirror.example/cache/repo@sha256:…``) and ``local`` (a bare
``sha256:<64 hex>``: the runtime's ID of the image config, which names no registry digest).

``validator_pod`` is the ``nvidia-operator-validator`` Pod (init containers
``driver-validation``, ``toolkit-validation``, ``cuda-validation``, ``plugin-validation``,
container ``nvidia-operator-validator``), Ready or still validating; ``plugin_pod`` a
device plugin Pod, which is neither (the proof leaves it out). Every builder returns a
fresh raw dict; names are derived from the node, so the same call gives the same Pod.
"""

from __future__ import annotations

import hashlib
from typing import Any, Literal

NAMESPACE = "gpu-operator"
DRIVER_MANAGER_IMAGE = "nvcr.io/nvidia/cloud-native/k8s-driver-manager:v0.8.1"
VALIDATOR_IMAGE = "nvcr.io/nvidia/cloud-native/gpu-operator-validator:v25.3.2"
PLUGIN_IMAGE = "nvcr.io/nvidia/k8s-device-plugin:v0.17.3"
STARTED_AT = "2026-12-02T10:00:00Z"
VALIDATIONS = ("driver-validation", "toolkit-validation", "cuda-validation", "plugin-validation")

DriverState = Literal["ready", "starting", "crashloop", "init-error"]
ImageIdForm = Literal["docker-pullable", "repo", "mirror", "local"]


def digest_of(text: str) -> str:
    """A registry digest made from ``text`` (stable across runs)."""
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()


def image_id(image: str, digest: str, form: ImageIdForm = "repo") -> str:
    """What the kubelet writes as ``imageID`` for ``image`` pulled at ``digest``."""
    repository = _repository(image)
    if form == "docker-pullable":
        return f"docker-pullable://{repository}@{digest}"
    if form == "repo":
        return f"{repository}@{digest}"
    if form == "mirror":
        return f"mirror.example/cache/{repository.split('/', 1)[-1]}@{digest}"
    return digest_of(f"config of {image}@{digest}")  # local: the config's ID, not the digest


def driver_pod(
    node: str,
    *,
    image: str,
    digest: str,
    state: DriverState = "ready",
    image_id_form: ImageIdForm = "repo",
    restarts: int = 7,
    namespace: str = NAMESPACE,
    name: str | None = None,
    deleting: bool = False,
) -> dict[str, Any]:
    """A driver DaemonSet Pod on ``node`` running ``image`` pulled at ``digest``;
    ``restarts`` counts the crash loop's restarts (``crashloop`` only)."""
    name = name or f"nvidia-driver-daemonset-{_suffix(node)}"
    ran = image_id(image, digest, image_id_form)
    manager = _status("k8s-driver-manager", DRIVER_MANAGER_IMAGE, _completed())
    driver: dict[str, Any]
    if state == "ready":
        driver = _status("nvidia-driver-ctr", image, _running(), image_id=ran, ready=True)
    elif state == "starting":
        driver = _status("nvidia-driver-ctr", image, _running(), image_id=ran, started=False)
    elif state == "crashloop":
        back_off = f"back-off 5m0s restarting failed container=nvidia-driver-ctr pod={name}"
        driver = _status(
            "nvidia-driver-ctr",
            image,
            {"waiting": {"reason": "CrashLoopBackOff", "message": back_off}},
            image_id=ran,
            restarts=restarts,
            last=_terminated(1, "Error"),
        )
    else:
        manager = _status(
            "k8s-driver-manager",
            DRIVER_MANAGER_IMAGE,
            _terminated(1, "Error"),
            image_id=image_id(DRIVER_MANAGER_IMAGE, digest_of(DRIVER_MANAGER_IMAGE)),
        )
        driver = _status("nvidia-driver-ctr", image, {"waiting": {"reason": "PodInitializing"}})
    ready = state == "ready"
    phase = "Pending" if state == "init-error" else "Running"
    labels = {
        "app": "nvidia-driver-daemonset",
        "app.kubernetes.io/component": "nvidia-driver",
        "app.kubernetes.io/managed-by": "gpu-operator",
        "controller-revision-hash": "6c9b5f8d7f",
        "pod-template-generation": "3",
    }
    return _pod(
        name,
        namespace,
        node,
        labels,
        "nvidia-driver-daemonset",
        init=[("k8s-driver-manager", DRIVER_MANAGER_IMAGE)],
        main=[("nvidia-driver-ctr", image)],
        status={
            "phase": phase,
            "conditions": _conditions(ready, initialized=state != "init-error"),
            "initContainerStatuses": [manager],
            "containerStatuses": [driver],
        },
        deleting=deleting,
    )


def validator_pod(
    node: str, *, ready: bool = True, namespace: str = NAMESPACE, name: str | None = None
) -> dict[str, Any]:
    """The ``nvidia-operator-validator`` Pod on ``node``: Ready once every validation passed;
    otherwise ``toolkit-validation`` is still running and the rest wait."""
    name = name or f"nvidia-operator-validator-{_suffix(node)}"
    validator_id = image_id(VALIDATOR_IMAGE, digest_of(VALIDATOR_IMAGE))
    inits: list[dict[str, Any]] = []
    for number, validation in enumerate(VALIDATIONS):
        if ready or number == 0:
            inits.append(_status(validation, VALIDATOR_IMAGE, _completed(), image_id=validator_id))
        elif number == 1:
            inits.append(_status(validation, VALIDATOR_IMAGE, _running(), image_id=validator_id))
        else:
            inits.append(
                _status(validation, VALIDATOR_IMAGE, {"waiting": {"reason": "PodInitializing"}})
            )
    if ready:
        main = _status(
            "nvidia-operator-validator",
            VALIDATOR_IMAGE,
            _running(),
            image_id=validator_id,
            ready=True,
        )
    else:
        main = _status(
            "nvidia-operator-validator", VALIDATOR_IMAGE, {"waiting": {"reason": "PodInitializing"}}
        )
    labels = {
        "app": "nvidia-operator-validator",
        "app.kubernetes.io/managed-by": "gpu-operator",
        "app.kubernetes.io/part-of": "gpu-operator",
    }
    return _pod(
        name,
        namespace,
        node,
        labels,
        "nvidia-operator-validator",
        init=[(validation, VALIDATOR_IMAGE) for validation in VALIDATIONS],
        main=[("nvidia-operator-validator", VALIDATOR_IMAGE)],
        status={
            "phase": "Running" if ready else "Pending",
            "conditions": _conditions(ready, initialized=ready),
            "initContainerStatuses": inits,
            "containerStatuses": [main],
        },
    )


def plugin_pod(node: str, *, namespace: str = NAMESPACE) -> dict[str, Any]:
    """A device plugin Pod on ``node``: the GPU Operator's, but neither driver nor validator."""
    running = _status(
        "nvidia-device-plugin",
        PLUGIN_IMAGE,
        _running(),
        image_id=image_id(PLUGIN_IMAGE, digest_of(PLUGIN_IMAGE)),
        ready=True,
    )
    return _pod(
        f"nvidia-device-plugin-daemonset-{_suffix(node)}",
        namespace,
        node,
        {"app": "nvidia-device-plugin-daemonset", "app.kubernetes.io/managed-by": "gpu-operator"},
        "nvidia-device-plugin-daemonset",
        init=[],
        main=[("nvidia-device-plugin", PLUGIN_IMAGE)],
        status={
            "phase": "Running",
            "conditions": _conditions(True, initialized=True),
            "containerStatuses": [running],
        },
    )


# -- the parts ------------------------------------------------------------------------------


def _pod(
    name: str,
    namespace: str,
    node: str,
    labels: dict[str, str],
    daemonset: str,
    *,
    init: list[tuple[str, str]],
    main: list[tuple[str, str]],
    status: dict[str, Any],
    deleting: bool = False,
) -> dict[str, Any]:
    metadata: dict[str, Any] = {
        "name": name,
        "namespace": namespace,
        "labels": labels,
        "ownerReferences": [
            {
                "apiVersion": "apps/v1",
                "kind": "DaemonSet",
                "name": daemonset,
                "uid": "7f1c9a52-2b43-4d6e-9a77-" + _suffix(daemonset, 12),
                "controller": True,
                "blockOwnerDeletion": True,
            }
        ],
    }
    if deleting:
        metadata["deletionTimestamp"] = "2026-12-02T10:05:00Z"
        metadata["deletionGracePeriodSeconds"] = 30
    spec: dict[str, Any] = {
        "nodeName": node,
        "serviceAccountName": daemonset.removesuffix("-daemonset"),
        "restartPolicy": "Always",
        "containers": [{"name": n, "image": i, "imagePullPolicy": "IfNotPresent"} for n, i in main],
    }
    if init:
        spec["initContainers"] = [
            {"name": n, "image": i, "imagePullPolicy": "IfNotPresent"} for n, i in init
        ]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": metadata,
        "spec": spec,
        "status": {
            "hostIP": "10.0.0.10",
            "startTime": STARTED_AT,
            "qosClass": "Burstable",
            **status,
        },
    }


def _status(
    name: str,
    image: str,
    state: dict[str, Any],
    *,
    image_id: str = "",
    ready: bool = False,
    started: bool | None = None,
    restarts: int = 0,
    last: dict[str, Any] | None = None,
) -> dict[str, Any]:
    status: dict[str, Any] = {
        "name": name,
        "image": image,
        "imageID": image_id,
        "ready": ready,
        "restartCount": restarts,
        "state": state,
        "lastState": last or {},
    }
    if "running" in state:
        status["started"] = ready if started is None else started
        status["containerID"] = "containerd://" + _suffix(name + image, 64)
    elif "terminated" in state:
        status["started"] = False
        status["containerID"] = state["terminated"]["containerID"]
    else:
        status["started"] = False
    return status


def _running() -> dict[str, Any]:
    return {"running": {"startedAt": STARTED_AT}}


def _completed() -> dict[str, Any]:
    return _terminated(0, "Completed")


def _terminated(code: int, reason: str) -> dict[str, Any]:
    return {
        "terminated": {
            "exitCode": code,
            "reason": reason,
            "startedAt": STARTED_AT,
            "finishedAt": STARTED_AT,
            "containerID": "containerd://" + _suffix(f"{reason}{code}", 64),
        }
    }


def _conditions(ready: bool, *, initialized: bool) -> list[dict[str, Any]]:
    def condition(kind: str, value: bool) -> dict[str, Any]:
        return {
            "type": kind,
            "status": "True" if value else "False",
            "lastProbeTime": None,
            "lastTransitionTime": STARTED_AT,
        }

    return [
        condition("PodReadyToStartContainers", True),
        condition("Initialized", initialized),
        condition("Ready", ready),
        condition("ContainersReady", ready),
        condition("PodScheduled", True),
    ]


def _repository(image: str) -> str:
    without_digest = image.split("@", 1)[0]
    head, _, last = without_digest.rpartition("/")
    return f"{head}/{last.split(':', 1)[0]}" if head else last.split(":", 1)[0]


def _suffix(text: str, length: int = 5) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:length]
