"""The ``NodeAnnotator`` contract: ``MemoryFleetSource`` and ``KubernetesNodeAnnotator``
(JSON merge patches to the fake API server over real HTTP) open and close the reboot gate
alike, and a ``FleetSource`` reading the same Nodes sees it.

Covers: opening sets the gate annotation to ``"true"`` and the version annotation, on the
condition that the Node is unchanged since it was read (a stale ``resourceVersion`` is
refused and changes nothing); closing removes both and leaves every other annotation;
a Node that is gone is neither an error nor created. The after-reboot proof sets its
annotation to ``"true"`` (the configured name on both), whatever changed on the Node since
it was read, and leaves FLUO's and the gate's alone; a Node that is gone is ``False``. The
Kubernetes annotator alone: RBAC refusing ``patch`` names what to grant, for the proof too;
the API server down is a temporary error. A name no Node can have (control characters,
a path, a query, capitals, empty) is never written to, on both, for the gate and the proof:
``ClusterRejectedError`` before any request, and the node it reads like is untouched.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import pytest

from releasebot.domain.fleet.nodes import (
    DEFAULT_GATE_ANNOTATION,
    DEFAULT_PROOF_ANNOTATION,
    FLUO_AFTER_REBOOT,
    FLUO_NEW_VERSION,
    GATE_VERSION_ANNOTATION,
    FleetNode,
)
from releasebot.domain.ports import FleetSource, NodeAnnotator
from releasebot.domain.shared.errors import (
    ClusterForbiddenError,
    ClusterRejectedError,
    ClusterUnavailableError,
)
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


@pytest.mark.parametrize("name", ["gpu-\x1b[0m0", "gpu-0/..", "../gpu-0", "GPU-0", "", "gpu-0 "])
def test_a_name_no_node_can_have_is_never_written_to(cluster: Cluster, name: str) -> None:
    seen = cluster.node("gpu-0")
    with pytest.raises(ClusterRejectedError, match="not a valid Node name") as caught:
        cluster.annotator.open_gate(name, "4593.2.5", None)
    assert "\x1b" not in str(caught.value)
    with pytest.raises(ClusterRejectedError, match="not a valid Node name"):
        cluster.annotator.close_gate(name)
    with pytest.raises(ClusterRejectedError, match="not a valid Node name"):
        cluster.annotator.set_proof(name)
    after = cluster.node("gpu-0")  # the node the name reads like is untouched
    assert (after.gate, after.gate_version, after.proof) == (None, None, None)
    assert after.resource_version == seen.resource_version


def test_the_proof_is_set_on_the_node_as_it_is_now(cluster: Cluster) -> None:
    back = gpu_node("gpu-0", "4593.2.5", after_reboot=True, gate="true", gate_version="4593.2.5")
    cluster.replace_node(back)
    seen = cluster.node("gpu-0")
    assert seen.proof is None
    cluster.replace_node(back)  # another writer since it was read: the proof does not care
    assert cluster.annotator.set_proof("gpu-0") is True
    proven = cluster.node("gpu-0")
    assert proven.proof == "true"
    assert (proven.gate, proven.gate_version) == ("true", "4593.2.5")
    assert proven.fluo.after_reboot is True
    assert proven.resource_version != seen.resource_version
    assert cluster.annotator.set_proof("gpu-0") is True  # again: the same answer
    assert cluster.node("gpu-0").proof == "true"


def test_the_proof_of_a_node_that_is_gone_is_false_and_creates_nothing(cluster: Cluster) -> None:
    assert cluster.annotator.set_proof("gone") is False
    assert [node.name for node in cluster.source.nodes().nodes] == ["gpu-0"]


@pytest.mark.parametrize("kind", ["memory", "kubernetes"])
def test_the_proof_annotation_is_the_configured_one(kind: str) -> None:
    name = "example.com/gpu-proven"
    node = gpu_node("gpu-0", "4593.2.5", after_reboot=True)
    if kind == "memory":
        memory = MemoryFleetSource([node], proof_annotation=name)
        assert memory.set_proof("gpu-0") is True
        raw = memory.node("gpu-0")
        assert raw is not None
        proven = memory.nodes().nodes[0]
    else:
        with FakeKubeApi() as api:
            api.fleet.add_nodes(node)
            annotator = KubernetesNodeAnnotator(
                api.client(), proof_annotation=name, sleep=lambda _: None
            )
            source = KubernetesFleetSource(api.client(), proof_annotation=name)
            try:
                assert annotator.set_proof("gpu-0") is True
                proven = source.nodes().nodes[0]
            finally:
                annotator.close()
                source.close()
            raw = api.fleet.node("gpu-0")
    annotations = raw["metadata"]["annotations"]
    assert annotations[name] == "true"
    assert DEFAULT_PROOF_ANNOTATION not in annotations
    assert raw["metadata"]["labels"][FLUO_AFTER_REBOOT] == "true"
    assert isinstance(proven, FleetNode)
    assert proven.proof == "true"


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


def test_rbac_refusing_the_proof_names_patch_on_nodes(kube_api: FakeKubeApi) -> None:
    kube_api.fleet.add_nodes(gpu_node("gpu-0", "4593.2.5", after_reboot=True))
    kube_api.fleet.forbid("patch", "nodes")
    annotator = KubernetesNodeAnnotator(kube_api.client(), sleep=lambda _: None)
    try:
        with pytest.raises(ClusterForbiddenError, match="'patch' on 'nodes'"):
            annotator.set_proof("gpu-0")
    finally:
        annotator.close()
    assert DEFAULT_PROOF_ANNOTATION not in kube_api.fleet.node("gpu-0")["metadata"]["annotations"]
    (patch,) = kube_api.requests_to("PATCH", "nodes")
    assert patch.headers["content-type"] == "application/merge-patch+json"


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
        with pytest.raises(ClusterRejectedError, match="not a valid Node name") as caught:
            annotator.open_gate(name, "4593.2.5", None)
        with pytest.raises(ClusterRejectedError):
            annotator.close_gate(name)
        with pytest.raises(ClusterRejectedError):
            annotator.set_proof(name)
    finally:
        annotator.close()
    assert len(kube_api.requests) == before
    assert "\n" not in str(caught.value)
    assert len(str(caught.value)) < 200
