"""The fake API server's Pods and logs over real HTTP, as the pod source's tests rely on them.

The contract tests of ``KubernetesPodSource`` mean something only if the fake answers as
kube-apiserver and the kubelet do. Covers, with plain HTTP requests: ``fieldSelector`` on
``spec.nodeName`` (and 400 ``field label not supported`` for a field the API server does
not index), pages with ``limit``/``continue`` in key order and 400 for a token that does
not decode; ``pods/{name}/log`` as text/plain with ``tailLines`` then ``limitBytes``,
``container`` required for a Pod of several and 400 for one it does not have, ``previous``
400 when there was no terminated run, a container waiting 400, a crash loop serving its
last run, 404 for an unknown Pod; and RBAC's 403 naming the namespace. Last, the adapter
on a kubeconfig-made client (the bounded reader's response hook in place).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest

from releasebot.edge.kube import make_kube_client
from releasebot.fleet.pods import KubernetesPodSource
from tests.support.kubeapi import FakeKubeApi
from tests.support.operatorpods import (
    NAMESPACE,
    digest_of,
    driver_pod,
    plugin_pod,
    validator_pod,
)

IMAGE = "registry.example.test/gpu/driver:580.178.04-flatcar4593.2.5"
PODS = f"/api/v1/namespaces/{NAMESPACE}/pods"


@pytest.fixture
def http(kube_api: FakeKubeApi) -> Iterator[httpx2.Client]:
    headers = {"Authorization": f"Bearer {kube_api.token}"}
    with httpx2.Client(base_url=kube_api.url, headers=headers, trust_env=False) as client:
        yield client


def driver(node: str, state: Any = "ready", **kw: Any) -> dict[str, Any]:
    return driver_pod(node, image=IMAGE, digest=digest_of(IMAGE), state=state, **kw)


def names(answer: httpx2.Response) -> list[str]:
    assert answer.status_code == 200, answer.text
    return [item["metadata"]["name"] for item in answer.json()["items"]]


def status_of(answer: httpx2.Response) -> tuple[int, str, str]:
    assert answer.headers["content-type"] == "application/json"
    body = answer.json()
    assert body["kind"] == "Status"
    return answer.status_code, body["reason"], body["message"]


def test_the_field_selector_selects_by_node(kube_api: FakeKubeApi, http: httpx2.Client) -> None:
    kube_api.add_pods(driver("gpu-0"), validator_pod("gpu-0"), driver("gpu-1"), plugin_pod("gpu-1"))
    on_0 = names(http.get(PODS, params={"fieldSelector": "spec.nodeName=gpu-0"}))
    assert on_0 == [driver("gpu-0")["metadata"]["name"], validator_pod("gpu-0")["metadata"]["name"]]
    assert len(names(http.get(PODS, params={"fieldSelector": "spec.nodeName!=gpu-0"}))) == 2
    assert names(http.get(PODS, params={"fieldSelector": "spec.nodeName=gpu-9"})) == []
    refused = http.get(PODS, params={"fieldSelector": "spec.imageName=x"})
    assert status_of(refused) == (400, "BadRequest", "field label not supported: spec.imageName")


def test_pages_come_in_key_order_with_tokens(kube_api: FakeKubeApi, http: httpx2.Client) -> None:
    kube_api.add_pods(*(driver("gpu-0", name=f"d-{n}") for n in (3, 1, 4, 0, 2)))
    first = http.get(PODS, params={"limit": "2"}).json()
    assert [i["metadata"]["name"] for i in first["items"]] == ["d-0", "d-1"]
    assert first["metadata"]["remainingItemCount"] == 3
    token = first["metadata"]["continue"]
    second = http.get(PODS, params={"limit": "2", "continue": token}).json()
    assert [i["metadata"]["name"] for i in second["items"]] == ["d-2", "d-3"]
    last = http.get(PODS, params={"limit": "2", "continue": second["metadata"]["continue"]})
    assert names(last) == ["d-4"]
    assert "continue" not in last.json()["metadata"]
    bad = http.get(PODS, params={"limit": "2", "continue": "not-a-token"})
    assert status_of(bad)[:2] == (400, "BadRequest")


def test_a_log_is_its_tail_then_its_first_bytes(kube_api: FakeKubeApi, http: httpx2.Client) -> None:
    pod = driver("gpu-0")
    kube_api.add_pods(pod)
    name = pod["metadata"]["name"]
    kube_api.set_log(name, b"one\ntwo\nthree\xff\n", namespace=NAMESPACE)
    log = http.get(f"{PODS}/{name}/log", params={"tailLines": "2", "limitBytes": "6"})
    assert log.status_code == 200
    assert log.headers["content-type"].startswith("text/plain")
    assert log.content == b"two\nth"  # limitBytes cuts the START of the tail
    whole = http.get(f"{PODS}/{name}/log", params={"container": "nvidia-driver-ctr"})
    assert whole.content == b"one\ntwo\nthree\xff\n"


def test_which_container_and_which_run(kube_api: FakeKubeApi, http: httpx2.Client) -> None:
    crashing = driver("gpu-0", "crashloop")
    ready = validator_pod("gpu-1")
    starting = driver("gpu-2", "init-error")
    kube_api.add_pods(crashing, ready, starting)
    crash = crashing["metadata"]["name"]
    kube_api.set_log(crash, "last run\n", namespace=NAMESPACE, previous=True)
    log = f"{PODS}/{crash}/log"
    assert http.get(log, params={"previous": "true"}).content == b"last run\n"
    assert http.get(log).content == b"last run\n"  # a crash loop shows its last run
    assert status_of(http.get(log, params={"container": "nope"})) == (
        400,
        "BadRequest",
        f"container nope is not valid for pod {crash}",
    )
    manager = http.get(log, params={"container": "k8s-driver-manager", "previous": "true"})
    assert status_of(manager) == (
        400,
        "BadRequest",
        f'previous terminated container "k8s-driver-manager" in pod "{crash}" not found',
    )
    validator = f"{PODS}/{ready['metadata']['name']}/log"
    assert http.get(validator).status_code == 200  # one container: no need to name it
    waiting = http.get(f"{PODS}/{starting['metadata']['name']}/log")
    assert status_of(waiting)[2].endswith("is waiting to start: PodInitializing")
    assert status_of(http.get(f"{PODS}/gone/log"))[:2] == (404, "NotFound")


def test_a_pod_of_several_containers_needs_one_named(
    kube_api: FakeKubeApi, http: httpx2.Client
) -> None:
    pod = driver("gpu-0")
    pod["spec"]["containers"].append({"name": "sidecar", "image": "busybox"})
    kube_api.add_pods(pod)
    answer = http.get(f"{PODS}/{pod['metadata']['name']}/log")
    code, _, message = status_of(answer)
    assert code == 400
    assert message.startswith("a container name must be specified for pod nvidia-driver-")


def test_rbac_names_the_namespace(kube_api: FakeKubeApi, http: httpx2.Client) -> None:
    kube_api.fleet.forbid("get", "pods/log")
    pod = driver("gpu-0")
    kube_api.add_pods(pod)
    answer = http.get(f"{PODS}/{pod['metadata']['name']}/log")
    code, reason, message = status_of(answer)
    assert (code, reason) == (403, "Forbidden")
    assert 'cannot get resource "pods/log" in API group "" in the namespace "gpu-operator"' in (
        message
    )


def test_the_adapter_on_a_kubeconfig_client(kube_api: FakeKubeApi, tmp_path: Path) -> None:
    crashing = driver("gpu-0", "crashloop")
    kube_api.add_pods(crashing, validator_pod("gpu-0"))
    name = crashing["metadata"]["name"]
    kube_api.set_log(name, "NVRM: API mismatch\n", namespace=NAMESPACE, previous=True)
    client = make_kube_client(str(kube_api.write_kubeconfig(tmp_path / "kubeconfig")))
    source = KubernetesPodSource(client, sleep=lambda _: None)
    try:
        assert len(source.pods_on("gpu-0")) == 2
        assert source.log_tail(NAMESPACE, name, "nvidia-driver-ctr", previous=True) == (
            "NVRM: API mismatch"
        )
    finally:
        source.close()
    sent = kube_api.requests_to("GET", "pods")
    assert len(sent) == 2
    assert {r.headers["authorization"] for r in sent} == {f"Bearer {kube_api.token}"}


@pytest.mark.parametrize(
    ("namespace", "pod"),
    [
        (NAMESPACE, ".."),
        (NAMESPACE, "x?previous=false"),
        ("..", "x"),
        (NAMESPACE, "a/b"),
        ("", "x"),
    ],
)
def test_a_log_of_a_name_that_is_no_kubernetes_name_is_never_asked(
    kube_api: FakeKubeApi, namespace: str, pod: str
) -> None:
    source = KubernetesPodSource(kube_api.client(), sleep=lambda _: None)
    try:
        assert source.log_tail(namespace, pod, "nvidia-driver-ctr", previous=True) == ""
    finally:
        source.close()
    assert kube_api.requests_to("GET", "pods") == []
