"""``KubernetesFleetSource`` against the fake API server over real HTTP: what only the real
adapter does.

Pagination as sent (``limit``, ``continue`` followed, one request per page, the selector
in ``labelSelector``); a continue token expiring mid-listing (410) restarts the listing
once, twice is a temporary error; RBAC refusals (403) name the verb and resource to grant;
401, 5xx, 429 with ``Retry-After``, HTML and empty error bodies, an API server that is
gone; a plain-text 404 from an older API server still means "CRD absent"; a runaway
listing is cut; and no lightkube or httpx2 exception escapes. Last, the fake's own node
PATCH semantics that the reboot gate will rely on.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx2
import pytest

from releasebot.domain.fleet.nodes import FleetNode, IgnoredNode
from releasebot.domain.fleet.operator import CrdAbsent
from releasebot.domain.fleet.selectors import LabelSelector
from releasebot.domain.shared.errors import (
    ClusterForbiddenError,
    ClusterRejectedError,
    ClusterUnavailableError,
)
from releasebot.fleet.kubernetes import KubernetesFleetSource
from tests.support.kubeapi import FakeKubeApi

NODES = Path(__file__).parents[1] / "data" / "fleet" / "nodes.json"


def many_nodes(count: int) -> list[dict[str, Any]]:
    template = json.loads(NODES.read_text())[0]
    nodes = []
    for number in range(count):
        raw = copy.deepcopy(template)
        raw["metadata"]["name"] = f"gpu-{number:04d}"
        nodes.append(raw)
    return nodes


@pytest.fixture
def sleeps() -> list[timedelta]:
    return []


@pytest.fixture
def source(kube_api: FakeKubeApi, sleeps: list[timedelta]) -> Iterator[KubernetesFleetSource]:
    fleet = KubernetesFleetSource(kube_api.client(), page_size=10, sleep=sleeps.append)
    yield fleet
    fleet.close()


def node_lists(api: FakeKubeApi) -> list[dict[str, str]]:
    return [request.query for request in api.requests_to("GET", "nodes")]


def test_pages_are_requested_with_limit_and_continue(
    kube_api: FakeKubeApi, source: KubernetesFleetSource
) -> None:
    kube_api.fleet.add_nodes(*many_nodes(35))
    listing = source.nodes()
    assert len(listing.nodes) == 35
    queries = node_lists(kube_api)
    assert len(queries) == 4  # 10 + 10 + 10 + 5
    assert all(query["limit"] == "10" for query in queries)
    assert "continue" not in queries[0]
    assert all(query["continue"] for query in queries[1:])
    assert len({query["continue"] for query in queries[1:]}) == 3


def test_the_selector_is_sent_to_the_api_server(kube_api: FakeKubeApi) -> None:
    kube_api.fleet.add_nodes(*json.loads(NODES.read_text()))
    selector = LabelSelector.parse("nvidia.com/gpu.present=true,kubernetes.io/arch in (arm64)")
    source = KubernetesFleetSource(kube_api.client(), selector=selector, sleep=lambda _: None)
    try:
        assert [node.name for node in source.nodes().nodes] == ["gpu-gh200-3"]
    finally:
        source.close()
    (query,) = node_lists(kube_api)
    assert query["labelSelector"] == "nvidia.com/gpu.present=true,kubernetes.io/arch in (arm64)"


def test_an_expired_continue_token_restarts_the_listing_once(
    kube_api: FakeKubeApi, source: KubernetesFleetSource
) -> None:
    kube_api.fleet.add_nodes(*many_nodes(25))
    kube_api.fleet.expire_continue_tokens(after_pages=2)  # compaction after the 2nd page
    listing = source.nodes()
    assert [node.name for node in listing.nodes] == [f"gpu-{n:04d}" for n in range(25)]
    assert listing.restarts == 1
    assert len(node_lists(kube_api)) == 3 + 3  # two pages, the 410, then a full listing


def test_tokens_expiring_again_and_again_are_a_temporary_error(
    kube_api: FakeKubeApi, source: KubernetesFleetSource
) -> None:
    kube_api.fleet.add_nodes(*many_nodes(25))
    kube_api.fail_requests(
        None, status=410, reason="Expired", message="too old", path_contains="/nodes"
    )
    with pytest.raises(ClusterUnavailableError, match="continue token expired twice"):
        source.nodes()


def test_rbac_refusing_nodes_names_what_to_grant(
    kube_api: FakeKubeApi, source: KubernetesFleetSource
) -> None:
    kube_api.fleet.forbid("list", "nodes")
    with pytest.raises(ClusterForbiddenError) as caught:
        source.nodes()
    error = caught.value
    assert (error.verb, error.resource, error.group) == ("list", "nodes", "")
    message = str(error)
    assert message.startswith(
        "kubernetes: forbidden to list nodes (core API group): grant releasebot's "
        "ServiceAccount 'list' on 'nodes'"
    )
    assert 'cannot list resource "nodes"' in message
    assert "\n" not in message
    assert not isinstance(error.__cause__, ClusterForbiddenError)


def test_rbac_refusing_the_operator_objects_names_them(
    kube_api: FakeKubeApi, source: KubernetesFleetSource
) -> None:
    kube_api.fleet.install_gpu_operator_crds()
    kube_api.fleet.forbid("list", "clusterpolicies", "nvidia.com")
    with pytest.raises(
        ClusterForbiddenError, match=r"list clusterpolicies \(nvidia.com API group\)"
    ):
        source.cluster_policies()
    assert source.nvidia_drivers() == ()  # only what was refused fails


def test_a_plain_text_404_still_means_the_crd_is_absent(
    kube_api: FakeKubeApi, source: KubernetesFleetSource
) -> None:
    # API servers before the Status-writing not-found handler answered "404 page not found".
    kube_api.fail_requests(
        None, status=404, message="404 page not found", body="text", plural="nvidiadrivers"
    )
    assert source.nvidia_drivers() == CrdAbsent("nvidiadrivers.nvidia.com")


def test_nodes_not_found_is_not_a_missing_crd(
    kube_api: FakeKubeApi, source: KubernetesFleetSource
) -> None:
    kube_api.fail_requests(None, status=404, reason="NotFound", message="gone", plural="nodes")
    with pytest.raises(ClusterRejectedError, match="does not serve nodes"):
        source.nodes()


def test_unauthorized_is_permanent(
    kube_api: FakeKubeApi, source: KubernetesFleetSource, sleeps: list[timedelta]
) -> None:
    kube_api.fail_requests(None, status=401, reason="Unauthorized", message="Unauthorized")
    with pytest.raises(ClusterRejectedError, match="refused releasebot's credentials"):
        source.nodes()
    assert sleeps == []


def test_a_flaky_api_server_is_retried(
    kube_api: FakeKubeApi, source: KubernetesFleetSource, sleeps: list[timedelta]
) -> None:
    kube_api.fleet.add_nodes(*many_nodes(3))
    kube_api.fail_requests(2, status=503, plural="nodes")
    assert len(source.nodes().nodes) == 3
    assert sleeps == [timedelta(seconds=1), timedelta(seconds=2)]


@pytest.mark.parametrize("body", ["status", "text", "none", "bad-json"])
def test_server_errors_in_any_shape_end_as_unavailable(
    kube_api: FakeKubeApi, source: KubernetesFleetSource, body: str
) -> None:
    kube_api.fail_requests(
        None, status=500, reason="InternalError", message="etcdserver: request timed out", body=body
    )
    # Lists are read through the bounded reader: a 500 that says JSON and is not is an
    # unreadable answer of status 500, as every client releasebot makes reads it.
    said = r"(500 |unreadable answer \(HTTP 500\): truncated or invalid JSON)"
    with pytest.raises(ClusterUnavailableError, match=rf"^kubernetes list nodes: {said}") as caught:
        source.nodes()
    assert "\n" not in str(caught.value)
    assert len(kube_api.requests_to("GET", "nodes")) == 3


def test_throttling_carries_retry_after(
    kube_api: FakeKubeApi, source: KubernetesFleetSource
) -> None:
    kube_api.fail_requests(
        None, status=429, reason="TooManyRequests", message="slow down", retry_after=30
    )
    with pytest.raises(ClusterUnavailableError) as caught:
        source.nodes()
    assert caught.value.retry_after == timedelta(seconds=30)


def test_an_api_server_that_is_gone_is_unavailable(sleeps: list[timedelta]) -> None:
    with FakeKubeApi() as api:
        client = api.client(timeout=2.0)
    source = KubernetesFleetSource(client, sleep=sleeps.append)  # the port is closed now
    try:
        with pytest.raises(ClusterUnavailableError, match="API server unreachable") as caught:
            source.nodes()
    finally:
        source.close()
    assert isinstance(caught.value.__cause__, httpx2.HTTPError)
    assert sleeps == [timedelta(seconds=1), timedelta(seconds=2)]


def test_a_garbage_node_is_ignored_not_fatal(
    kube_api: FakeKubeApi, source: KubernetesFleetSource
) -> None:
    kube_api.fleet.add_nodes(
        *many_nodes(2), {"metadata": {"name": "odd", "labels": ["x"]}, "status": "?"}
    )
    nodes = {node.name: node for node in source.nodes().nodes}
    assert isinstance(nodes["gpu-0000"], FleetNode)
    odd = nodes["odd"]
    assert isinstance(odd, IgnoredNode)
    assert odd.reason.startswith("no OS information")


def test_a_runaway_listing_is_cut(kube_api: FakeKubeApi) -> None:
    kube_api.fleet.add_nodes(*many_nodes(12))
    source = KubernetesFleetSource(
        kube_api.client(), page_size=5, max_nodes=10, sleep=lambda _: None
    )
    try:
        listing = source.nodes()
    finally:
        source.close()
    assert len(listing.nodes) == 10
    assert listing.cut
    assert listing.unsure is not None
    assert "cut short: more than 10 nodes" in listing.unsure
    assert any("narrow fleet.node_selector" in line for line in listing.problems)


def test_a_listing_that_never_ends_is_cut_by_its_page_bound(kube_api: FakeKubeApi) -> None:
    endless = b'{"kind": "NodeList", "metadata": {"continue": "again"}, "items": []}'
    kube_api.fail_requests(None, status=200, plural="nodes", raw=endless)
    source = KubernetesFleetSource(
        kube_api.client(), page_size=5, max_nodes=10, sleep=lambda _: None
    )
    try:
        listing = source.nodes()
    finally:
        source.close()
    assert listing.cut
    assert listing.unsure is not None
    assert "more than 4 pages of nodes" in listing.unsure
    assert len(kube_api.requests_to("GET", "nodes")) == 4  # ceil(10 / 5) + 2


def test_a_listing_that_never_ends_is_cut_by_its_time_budget(kube_api: FakeKubeApi) -> None:
    endless = b'{"kind": "NodeList", "metadata": {"continue": "again"}, "items": []}'
    kube_api.fail_requests(None, status=200, plural="nodes", raw=endless)
    ticks = iter(range(0, 1000, 25))  # each look at the clock: 25 s later
    source = KubernetesFleetSource(
        kube_api.client(),
        page_size=5,
        sleep=lambda _: None,
        budget=timedelta(seconds=60),
        monotonic=lambda: float(next(ticks)),
    )
    try:
        listing = source.nodes()
    finally:
        source.close()
    assert listing.cut
    assert listing.unsure is not None
    assert "not finished after 60 s (3 pages of nodes)" in listing.unsure
    assert len(kube_api.requests_to("GET", "nodes")) == 3


def test_a_null_node_is_skipped_and_the_others_are_read(kube_api: FakeKubeApi) -> None:
    page = {
        "kind": "NodeList",
        "items": [*many_nodes(2), None, {"metadata": {"name": "odd"}}],
    }
    kube_api.fail_requests(None, status=200, plural="nodes", raw=json.dumps(page).encode())
    source = KubernetesFleetSource(kube_api.client(), sleep=lambda _: None)
    try:
        listing = source.nodes()
    finally:
        source.close()
    assert [node.name for node in listing.nodes] == ["gpu-0000", "gpu-0001", "odd"]
    assert "item 3 of the Node list is null: skipped" in listing.problems
    assert listing.unsure is not None
    assert not listing.cut


def test_the_fake_patches_nodes_as_the_api_server_does(kube_api: FakeKubeApi) -> None:
    kube_api.fleet.add_nodes(*many_nodes(1))
    client = httpx2.Client(
        base_url=kube_api.url, headers={"Authorization": f"Bearer {kube_api.token}"}
    )
    merge = {"Content-Type": "application/merge-patch+json"}
    try:
        version = kube_api.fleet.node("gpu-0000")["metadata"]["resourceVersion"]
        patch = {
            "metadata": {
                "resourceVersion": version,
                "annotations": {"releasebot.io/driver-image-ready": "true"},
            }
        }
        answer = client.patch("/api/v1/nodes/gpu-0000", json=patch, headers=merge)
        assert answer.status_code == 200
        assert (
            kube_api.fleet.node("gpu-0000")["metadata"]["annotations"][
                "releasebot.io/driver-image-ready"
            ]
            == "true"
        )
        stale = client.patch("/api/v1/nodes/gpu-0000", json=patch, headers=merge)
        assert (stale.status_code, stale.json()["reason"]) == (409, "Conflict")
        removal = {"metadata": {"annotations": {"releasebot.io/driver-image-ready": None}}}
        assert (
            client.patch("/api/v1/nodes/gpu-0000", json=removal, headers=merge).status_code == 200
        )
        assert (
            "releasebot.io/driver-image-ready"
            not in kube_api.fleet.node("gpu-0000")["metadata"]["annotations"]
        )
        json_patch = client.patch(
            "/api/v1/nodes/gpu-0000",
            json=[],
            headers={"Content-Type": "application/json-patch+json"},
        )
        assert json_patch.status_code == 415
        bad_token = client.get("/api/v1/nodes", params={"limit": "1", "continue": "not-a-token"})
        assert (bad_token.status_code, bad_token.json()["reason"]) == (400, "BadRequest")
    finally:
        client.close()


def test_rbac_refusals_apply_to_any_resource_and_subresource(kube_api: FakeKubeApi) -> None:
    client = httpx2.Client(
        base_url=kube_api.url, headers={"Authorization": f"Bearer {kube_api.token}"}
    )
    try:
        kube_api.fleet.forbid("get", "pods/log")
        kube_api.fleet.forbid("create", "jobs", "batch")
        log = client.get("/api/v1/namespaces/builds/pods/p/log")
        assert (log.status_code, log.json()["reason"]) == (403, "Forbidden")
        assert log.json()["message"] == (
            'pods "p" is forbidden: User "system:serviceaccount:releasebot:releasebot" cannot '
            'get resource "pods/log" in API group "" in the namespace "builds"'
        )
        job = client.post("/apis/batch/v1/namespaces/builds/jobs", json={"metadata": {"name": "j"}})
        assert job.status_code == 403
        assert client.get("/apis/batch/v1/namespaces/builds/jobs").status_code == 200
    finally:
        client.close()
