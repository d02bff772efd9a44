"""``MemoryFleetSource``: a ``FleetSource`` over Node and GPU Operator objects held in memory.

For the demo's simulated fleet, dry runs and tests. It behaves as ``KubernetesFleetSource``
does against a real API server, and the same contract suite checks both: Nodes come in
name order (etcd's key order), filtered by the same ``LabelSelector``, each parsed by
``parse_node``; a GPU Operator kind given as ``None`` is a CRD that is not installed.
The objects are kept as the JSON-shaped dicts an API server would send. It is also a
``NodeAnnotator`` over those objects (``resourceVersion`` checked and bumped as an API
server does), so a simulated fleet shows the reboot gate opening.
"""

from __future__ import annotations

import copy
import threading
from collections.abc import Mapping, Sequence
from typing import Any

from releasebot.domain.fleet import (
    DEFAULT_GATE_ANNOTATION,
    GATE_VERSION_ANNOTATION,
    parse_node,
)
from releasebot.domain.operator import (
    CrdAbsent,
    DriverSource,
    parse_cluster_policy,
    parse_nvidia_driver,
)
from releasebot.domain.ports import NodeListing
from releasebot.domain.selectors import LabelSelector

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
    ) -> None:
        self._lock = threading.Lock()
        self._selector = selector or LabelSelector()
        self._gate_annotation = gate_annotation
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
        gate = self._gate_annotation
        return NodeListing(tuple(parse_node(node, gate_annotation=gate) for node in selected))

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
        with self._lock:
            found = self._node(node)
            if found is None:
                return False
            metadata = found.setdefault("metadata", {})
            if resource_version is not None and metadata.get("resourceVersion") != resource_version:
                return False
            annotations = metadata.setdefault("annotations", {})
            annotations[self._gate_annotation] = "true"
            annotations[GATE_VERSION_ANNOTATION] = version
            self._bump(metadata)
            return True

    def close_gate(self, node: str) -> None:
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
