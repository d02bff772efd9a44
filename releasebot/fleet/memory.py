"""``MemoryFleetSource``: a ``FleetSource`` over Node and GPU Operator objects held in memory.

For the demo's simulated fleet, dry runs and tests. It behaves as ``KubernetesFleetSource``
does against a real API server, and the same contract suite checks both: Nodes come in
name order (etcd's key order), filtered by the same ``LabelSelector``, each parsed by
``parse_nodes``; a GPU Operator kind given as ``None`` is a CRD that is not installed.
The objects are kept as the JSON-shaped dicts an API server would send. It is also a
``NodeAnnotator`` over those objects (``resourceVersion`` checked and bumped as an API
server does), so a simulated fleet shows the reboot gate opening and the after-reboot
proof being set; and a ``PodSource`` over the GPU Operator's Pods (``set_pods``) and their
logs (``set_log``), selected by namespace and ``spec.nodeName`` in the API server's order,
each parsed by ``proof.parse_pod``, logs cut and cleaned as ``KubernetesPodSource`` does
(``tailLines`` first, then ``limitBytes``, then ``pods.shown_tail``), of the run the
kubelet would show (the last terminated one for ``previous`` or a crash loop). ``fail_pods`` and
``fail_logs`` make those calls raise what a cluster could (forbidden, unavailable).
"""

from __future__ import annotations

import copy
import threading
from collections.abc import Mapping, Sequence
from typing import Any

from releasebot.domain.fleet.nodes import (
    DEFAULT_GATE_ANNOTATION,
    DEFAULT_PROOF_ANNOTATION,
    GATE_VERSION_ANNOTATION,
    is_node_name,
    parse_nodes,
)
from releasebot.domain.fleet.operator import (
    CrdAbsent,
    DriverSource,
    parse_cluster_policy,
    parse_nvidia_driver,
)
from releasebot.domain.fleet.proof import LOG_TAIL_LINES, OperatorPod, parse_pod
from releasebot.domain.fleet.selectors import LabelSelector
from releasebot.domain.ports import NodeListing
from releasebot.domain.shared.errors import ClusterRejectedError
from releasebot.domain.shared.untrusted import escaped
from releasebot.fleet.pods import (
    DEFAULT_MAX_LOG_BYTES,
    DEFAULT_MAX_PODS,
    DEFAULT_NAMESPACE,
    shown_tail,
)

RawObject = Mapping[str, object]


class MemoryFleetSource:
    """Nodes and operator objects in memory; ``set_*`` replaces them (thread-safe)."""

    def __init__(
        self,
        nodes: Sequence[RawObject] = (),
        *,
        cluster_policies: Sequence[RawObject] | None = None,
        nvidia_drivers: Sequence[RawObject] | None = None,
        selector: LabelSelector | None = None,
        gate_annotation: str = DEFAULT_GATE_ANNOTATION,
        proof_annotation: str = DEFAULT_PROOF_ANNOTATION,
        pod_namespace: str = DEFAULT_NAMESPACE,
        max_pods: int = DEFAULT_MAX_PODS,
        max_log_bytes: int = DEFAULT_MAX_LOG_BYTES,
    ) -> None:
        self._lock = threading.Lock()
        self._selector = selector or LabelSelector()
        self._gate_annotation = gate_annotation
        self._proof_annotation = proof_annotation
        self._pod_namespace = pod_namespace
        self._max_pods = max_pods
        self._max_log_bytes = max_log_bytes
        self._pods: dict[tuple[str, str], dict[str, Any]] = {}
        self._logs: dict[tuple[str, str, str, bool], bytes] = {}
        self._pods_error: Exception | None = None
        self._logs_error: Exception | None = None
        self._nodes: list[dict[str, Any]] = []
        self._revision = 1
        self._policies: list[RawObject] | None = None
        self._drivers: list[RawObject] | None = None
        self.set_nodes(nodes)
        self.set_operator(cluster_policies, nvidia_drivers)

    def set_nodes(self, nodes: Sequence[RawObject]) -> None:
        """Replace the Nodes; each gets a new ``resourceVersion``, as a write to the API
        server gives it."""
        with self._lock:
            self._nodes = [copy.deepcopy(dict(node)) for node in nodes]
            for node in self._nodes:
                metadata = node.setdefault("metadata", {})
                if isinstance(metadata, dict):
                    self._bump(metadata)

    def set_operator(
        self,
        cluster_policies: Sequence[RawObject] | None,
        nvidia_drivers: Sequence[RawObject] | None,
    ) -> None:
        """The GPU Operator's objects; ``None`` for a kind whose CRD is not installed."""
        with self._lock:
            self._policies = (
                None
                if cluster_policies is None
                else [copy.deepcopy(dict(p)) for p in cluster_policies]
            )
            self._drivers = (
                None if nvidia_drivers is None else [copy.deepcopy(dict(d)) for d in nvidia_drivers]
            )

    def nodes(self) -> NodeListing:
        with self._lock:
            nodes = sorted(self._nodes, key=_name)
        selected = [node for node in nodes if self._selector.matches(_labels(node))]
        parsed, problems = parse_nodes(
            list(enumerate(selected, start=1)),
            gate_annotation=self._gate_annotation,
            proof_annotation=self._proof_annotation,
        )
        return NodeListing(parsed, problems=problems)

    def cluster_policies(self) -> tuple[DriverSource, ...] | CrdAbsent:
        with self._lock:
            policies = self._policies
        if policies is None:
            return CrdAbsent("clusterpolicies.nvidia.com")
        return tuple(parse_cluster_policy(policy) for policy in sorted(policies, key=_name))

    def nvidia_drivers(self) -> tuple[DriverSource, ...] | CrdAbsent:
        with self._lock:
            drivers = self._drivers
        if drivers is None:
            return CrdAbsent("nvidiadrivers.nvidia.com")
        return tuple(parse_nvidia_driver(driver) for driver in sorted(drivers, key=_name))

    def open_gate(self, node: str, version: str, resource_version: str | None) -> bool:
        _addressable("open the reboot gate of", node)
        with self._lock:
            found = self._node(node)
            if found is None:
                return False
            metadata = found.setdefault("metadata", {})
            if _changed(metadata, resource_version):
                return False
            annotations = metadata.setdefault("annotations", {})
            annotations[self._gate_annotation] = "true"
            annotations[GATE_VERSION_ANNOTATION] = version
            self._bump(metadata)
            return True

    def close_gate(self, node: str) -> None:
        _addressable("close the reboot gate of", node)
        with self._lock:
            found = self._node(node)
            if found is None:
                return
            metadata = found.setdefault("metadata", {})
            annotations = metadata.get("annotations")
            if isinstance(annotations, dict):
                annotations.pop(self._gate_annotation, None)
                annotations.pop(GATE_VERSION_ANNOTATION, None)
            self._bump(metadata)

    def set_proof(self, node: str, resource_version: str | None = None) -> bool:
        _addressable("set the driver proof of", node)
        with self._lock:
            found = self._node(node)
            if found is None:
                return False
            metadata = found.setdefault("metadata", {})
            if _changed(metadata, resource_version):
                return False
            metadata.setdefault("annotations", {})[self._proof_annotation] = "true"
            self._bump(metadata)
            return True

    # -- the GPU Operator's pods ---------------------------------------------------------

    def set_pods(self, node: str, raw_pods: Sequence[RawObject]) -> None:
        """Replace the Pods scheduled on ``node`` (by ``spec.nodeName``) with ``raw_pods``,
        each kept by its namespace and name (a Pod without a namespace is the operator's)."""
        with self._lock:
            for key in [k for k, pod in self._pods.items() if _node_name(pod) == node]:
                del self._pods[key]
            for raw in raw_pods:
                pod = copy.deepcopy(dict(raw))
                metadata = pod.setdefault("metadata", {})
                namespace = metadata.get("namespace") if isinstance(metadata, dict) else None
                key = (namespace if isinstance(namespace, str) else self._pod_namespace, _name(pod))
                self._pods[key] = pod

    def set_log(
        self,
        namespace: str,
        pod: str,
        container: str,
        text: str | bytes,
        *,
        previous: bool = False,
    ) -> None:
        """The log of ``container`` (of its last terminated run with ``previous``)."""
        data = text.encode() if isinstance(text, str) else text
        with self._lock:
            self._logs[(namespace, pod, container, previous)] = data

    def fail_pods(self, error: Exception | None) -> None:
        """``pods_on`` raises ``error`` until called with ``None``."""
        with self._lock:
            self._pods_error = error

    def fail_logs(self, error: Exception | None) -> None:
        """``log_tail`` raises ``error`` until called with ``None``."""
        with self._lock:
            self._logs_error = error

    def pods_on(self, node: str) -> tuple[OperatorPod, ...]:
        if not node:
            return ()
        with self._lock:
            if self._pods_error is not None:
                raise self._pods_error
            found = [
                copy.deepcopy(pod)
                for key, pod in sorted(self._pods.items())
                if key[0] == self._pod_namespace and _node_name(pod) == node
            ]
        if len(found) > self._max_pods:
            raise ClusterRejectedError(
                f"kubernetes list pods in namespace {self._pod_namespace} on node {node}: "
                f"more than {self._max_pods} pods, a runaway answer; the listing is refused"
            )
        parsed = (parse_pod(pod) for pod in found)
        return tuple(pod for pod in parsed if pod is not None)

    def log_tail(self, namespace: str, pod: str, container: str | None, *, previous: bool) -> str:
        with self._lock:
            if self._logs_error is not None:
                raise self._logs_error
            raw = self._pods.get((namespace, pod))
            if raw is None:
                return ""
            if container is None:
                names = _container_names(raw)
                if len(names) != 1:
                    return ""  # the API server asks which one
                container = names[0]
            run = _run(raw, container, previous=previous)
            if run is None:
                return ""  # not started, never terminated: the kubelet has no such log
            data = self._logs.get((namespace, pod, container, run), b"")
        tail = b"".join(data.splitlines(keepends=True)[-LOG_TAIL_LINES:])
        return shown_tail(tail[: self._max_log_bytes])

    def node(self, name: str) -> dict[str, Any] | None:
        """A copy of the Node object named ``name``, as it stands now."""
        with self._lock:
            found = self._node(name)
            return None if found is None else copy.deepcopy(found)

    def close(self) -> None:
        """Nothing to release."""

    def _node(self, name: str) -> dict[str, Any] | None:
        return next((n for n in self._nodes if _name(n) == name), None)

    def _bump(self, metadata: dict[str, Any]) -> None:
        self._revision += 1
        metadata["resourceVersion"] = str(self._revision)


def _changed(metadata: Mapping[str, object], resource_version: str | None) -> bool:
    """The Node is no longer at ``resource_version`` (a conditional write is refused)."""
    return resource_version is not None and metadata.get("resourceVersion") != resource_version


def _metadata(obj: RawObject) -> Mapping[str, object]:
    metadata = obj.get("metadata")
    return metadata if isinstance(metadata, Mapping) else {}


def _name(obj: RawObject) -> str:
    name = _metadata(obj).get("name")
    return name if isinstance(name, str) else ""


def _labels(obj: RawObject) -> dict[str, str]:
    labels = _metadata(obj).get("labels")
    if not isinstance(labels, Mapping):
        return {}
    return {k: v for k, v in labels.items() if isinstance(k, str) and isinstance(v, str)}


def _node_name(pod: RawObject) -> str | None:
    spec = pod.get("spec")
    name = spec.get("nodeName") if isinstance(spec, Mapping) else None
    return name if isinstance(name, str) else None


def _run(pod: RawObject, container: str, *, previous: bool) -> bool | None:
    """Which run's log the kubelet serves for ``container`` (``True``: the last terminated
    one), or ``None`` when it has none: ``previous`` needs a terminated run; otherwise a
    running or terminated container shows its own, one waiting after a crash its last run."""
    status = pod.get("status")
    found: Mapping[str, Any] = {}
    if isinstance(status, Mapping):
        for key in ("containerStatuses", "initContainerStatuses"):
            for item in status.get(key) or ():
                if isinstance(item, Mapping) and item.get("name") == container:
                    found = item
    state = found.get("state") if isinstance(found.get("state"), Mapping) else {}
    last = found.get("lastState") if isinstance(found.get("lastState"), Mapping) else {}
    terminated_before = isinstance(last, Mapping) and bool(last.get("terminated"))
    if previous:
        return True if terminated_before else None
    if isinstance(state, Mapping) and ("running" in state or "terminated" in state):
        return False
    return True if terminated_before else None


def _container_names(pod: RawObject) -> list[str]:
    spec = pod.get("spec")
    containers = spec.get("containers") if isinstance(spec, Mapping) else None
    if not isinstance(containers, list):
        return []
    return [
        c["name"] for c in containers if isinstance(c, Mapping) and isinstance(c.get("name"), str)
    ]


def _addressable(action: str, node: str) -> None:
    """As the Kubernetes annotator: a name no Node can have is never written to."""
    if not is_node_name(node):
        raise ClusterRejectedError(
            f"{action} node {escaped(node)}: not a valid Node name; nothing is written to it"
        )
