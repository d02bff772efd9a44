"""The ``NodeAnnotator`` contract: ``MemoryFleetSource`` and ``KubernetesNodeAnnotator``
(JSON merge patches to the fake API server over real HTTP) open and close the reboot gate
alike, and a ``FleetSource`` reading the same Nodes sees it.

Covers: opening sets the gate annotation to ``"true"`` and the version annotation, on the
condition that the Node is unchanged since it was read (a stale ``resourceVersion`` is
refused and changes nothing); closing removes both and leaves every other annotation;
a Node that is gone is neither an error nor created. The Kubernetes annotator alone: RBAC
refusing ``patch`` names what to grant; the API server down is a temporary error; a name
that is no Kubernetes node name (one that would change the request's path or query) is
refused before any request.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import pytest

from releasebot.domain.errors import (
    ClusterForbiddenError,
    ClusterRejectedError,
    ClusterUnavailableError,
)
from releasebot.domain.fleet import (
    DEFAULT_GATE_ANNOTATION,
    FLUO_NEW_VERSION,
    GATE_VERSION_ANNOTATION,
    FleetNode,
)
from releasebot.domain.ports import FleetSource, NodeAnnotator
from releasebot.edge.retry import RetryPolicy
from releasebot.fleet.gate import KubernetesNodeAnnotator
from releasebot.fleet.kubernetes import KubernetesFleetSource
from releasebot.fleet.memory import MemoryFleetSource
from tests.support.fleetnodes import gpu_node
from tests.support.kubeapi import FakeKubeApi


@dataclass
class Cluster:
    source: FleetSource
    annotator: NodeAnnotator
    replace_node: Callable[[dict[str, Any]], None]
    """Stands for another writer (FLUO's agent) changing the Node."""

    def node(self, name: str) -> FleetNode:
        found = {node.name: node for node in self.source.nodes().nodes}[name]
        assert isinstance(found, FleetNode)
        return found


@pytest.fixture(params=["memory", "kubernetes"])
def cluster(request: pytest.FixtureRequest) -> Iterator[Cluster]:
    nodes = [gpu_node("gpu-0", "4593.2.4", pending="4593.2.5", before_reboot=True)]
    if request.param == "memory":
        memory = MemoryFleetSource(nodes)
        yield Cluster(memory, memory, lambda raw: memory.set_nodes([raw]))
        return
    with FakeKubeApi() as api:
        api.fleet.add_nodes(*nodes)
        source = KubernetesFleetSource(api.client(), sleep=lambda _: None)
        annotator = KubernetesNodeAnnotator(api.client(), sleep=lambda _: None)
        try:
            yield Cluster(source, annotator, lambda raw: api.fleet.add_nodes(raw))
        finally:
            source.close()
            annotator.close()
        assert not api.server_errors, api.server_errors


def test_opening_sets_both_annotations_and_closing_removes_them(cluster: Cluster) -> None:
    node = cluster.node("gpu-0")
    assert (node.gate, node.gate_version) == (None, None)
    assert cluster.annotator.open_gate("gpu-0", "4593.2.5", node.resource_version) is True
    opened = cluster.node("gpu-0")
    assert (opened.gate, opened.gate_version) == ("true", "4593.2.5")
    assert opened.pending_version == node.pending_version  # nothing else changed
    cluster.annotator.close_gate("gpu-0")
    closed = cluster.node("gpu-0")
    assert (closed.gate, closed.gate_version) == (None, None)
    assert closed.pending_version is not None
    assert closed.pending_version.text == "4593.2.5"


def test_a_node_changed_since_it_was_read_is_not_opened(cluster: Cluster) -> None:
    seen = cluster.node("gpu-0")
    newer = gpu_node("gpu-0", "4593.2.4", pending="4628.0.0", before_reboot=True)
    cluster.replace_node(newer)  # the agent installed a newer release meanwhile
    assert cluster.annotator.open_gate("gpu-0", "4593.2.5", seen.resource_version) is False
    now = cluster.node("gpu-0")
    assert now.gate is None
    assert now.pending_version is not None
    assert now.pending_version.text == "4628.0.0"


def test_a_node_that_is_gone_is_neither_an_error_nor_created(cluster: Cluster) -> None:
    assert cluster.annotator.open_gate("gone", "4593.2.5", None) is False
    cluster.annotator.close_gate("gone")
    assert [node.name for node in cluster.source.nodes().nodes] == ["gpu-0"]


def test_rbac_refusing_patch_names_it(kube_api: FakeKubeApi) -> None:
    kube_api.fleet.add_nodes(gpu_node("gpu-0", "4593.2.4"))
    kube_api.fleet.forbid("patch", "nodes")
    annotator = KubernetesNodeAnnotator(kube_api.client(), sleep=lambda _: None)
    try:
        with pytest.raises(ClusterForbiddenError) as caught:
            annotator.open_gate("gpu-0", "4593.2.5", None)
    finally:
        annotator.close()
    assert (caught.value.verb, caught.value.resource) == ("patch", "nodes")
    assert "grant releasebot's ServiceAccount 'patch' on 'nodes'" in str(caught.value)
    annotations = kube_api.fleet.node("gpu-0")["metadata"]["annotations"]
    assert DEFAULT_GATE_ANNOTATION not in annotations
    assert GATE_VERSION_ANNOTATION not in annotations
    assert FLUO_NEW_VERSION in annotations


def test_an_api_server_down_is_temporary(kube_api: FakeKubeApi) -> None:
    kube_api.fleet.add_nodes(gpu_node("gpu-0", "4593.2.4"))
    kube_api.fail_requests(None, status=503, plural="nodes")
    sleeps: list[timedelta] = []
    annotator = KubernetesNodeAnnotator(
        kube_api.client(), policy=RetryPolicy(retries=1), sleep=sleeps.append
    )
    try:
        with pytest.raises(ClusterUnavailableError, match="reboot gate of node gpu-0"):
            annotator.close_gate("gpu-0")
    finally:
        annotator.close()
    assert sleeps == [timedelta(seconds=1)]


@pytest.mark.parametrize(
    "name",
    [
        "../../api/v1/namespaces/kube-system/secrets/x",
        "gpu-0?dryRun=All",
        "gpu-0/status",
        "gpu-0#x",
        "GPU-0",
        "gpu-0.",
        "(unnamed)",
        "",
        "a" * 254,
    ],
)
def test_a_name_that_is_no_node_name_is_never_sent(kube_api: FakeKubeApi, name: str) -> None:
    kube_api.fleet.add_nodes(gpu_node("gpu-0", "4593.2.4"))
    annotator = KubernetesNodeAnnotator(kube_api.client(), sleep=lambda _: None)
    before = len(kube_api.requests)
    try:
        with pytest.raises(ClusterRejectedError, match="not a Kubernetes node name") as caught:
            annotator.open_gate(name, "4593.2.5", None)
        with pytest.raises(ClusterRejectedError):
            annotator.close_gate(name)
    finally:
        annotator.close()
    assert len(kube_api.requests) == before
    assert "\n" not in str(caught.value)
    assert len(str(caught.value)) < 200
