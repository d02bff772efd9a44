"""The ``PodSource`` contract: ``MemoryFleetSource`` and ``KubernetesPodSource`` (over the fake
API server, real HTTP, pages of two Pods) answer alike about the GPU Operator's Pods.

Covers: ``pods_on`` gives exactly the driver and validator Pods scheduled on the node, in
the operator's namespace only, each parsed as ``proof.parse_pod`` parses it, in name order
and complete across pages; every driver state the kubelet reports (Ready, starting,
CrashLoopBackOff, Init:Error) and every ``imageID`` form comes back with the digest it
names (none for a local image ID); a listing past the bound is refused naming it.
``log_tail`` gives the last ``LOG_TAIL_LINES`` lines, of the last terminated run with
``previous``, at most ``LOG_TAIL_CHARS`` characters of the end, without escape sequences
or control characters, credentials masked, bytes that are not UTF-8 replaced; no Pod, no
such container, no previous run is ``""``. RBAC refusals name what to grant on both.
The Kubernetes adapter alone: the requests it sends (field selector, pages, the log's
query), retries then a temporary error, and a server that ignores ``limitBytes``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import pytest

from releasebot.domain.fleet.proof import (
    LOG_TAIL_CHARS,
    LOG_TAIL_LINES,
    PodRole,
    parse_pod,
)
from releasebot.domain.ports import PodSource
from releasebot.domain.shared.errors import (
    ClusterForbiddenError,
    ClusterRejectedError,
    ClusterUnavailableError,
)
from releasebot.edge.retry import RetryPolicy
from releasebot.fleet.memory import MemoryFleetSource
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
DIGEST = digest_of(IMAGE)
Raw = dict[str, Any]
DRIVER = "nvidia-driver-ctr"
BEARER = "eyJhbGciOiJSUzI1NiIsImtpZCI6InNlY3JldCJ9.c2VjcmV0LXBheWxvYWQ"


@dataclass
class Cluster:
    source: PodSource
    add: Callable[[Sequence[Raw]], None]
    """Pods appear (each on the node its ``spec.nodeName`` names)."""
    set_log: Callable[..., None]
    """``set_log(pod, container, text, previous=False)`` in the operator's namespace."""
    forbid: Callable[[str, str], None]
    """RBAC refuses ``verb`` on ``resource``."""


Make = Callable[..., Cluster]


@pytest.fixture(params=["memory", "kubernetes"])
def make(request: pytest.FixtureRequest) -> Iterator[Make]:
    """``make(max_pods=500)``: an empty cluster whose Pods a test adds."""
    made: list[PodSource] = []
    api: FakeKubeApi | None = None
    if request.param == "kubernetes":
        api = FakeKubeApi().start()

    def build(max_pods: int = 500) -> Cluster:
        if api is None:
            memory = MemoryFleetSource(max_pods=max_pods)
            made.append(memory)
            added: list[Raw] = []

            def add_memory(pods: Sequence[Raw]) -> None:
                by_node: dict[str, list[Raw]] = {}
                for pod in pods:
                    by_node.setdefault(pod["spec"]["nodeName"], []).append(pod)
                for node, raws in by_node.items():
                    current = [p for p in added if p["spec"]["nodeName"] == node]
                    memory.set_pods(node, current + raws)
                added.extend(pods)

            def memory_log(pod: str, container: str, text: str | bytes, **kw: bool) -> None:
                memory.set_log(NAMESPACE, pod, container, text, **kw)

            def memory_forbid(verb: str, resource: str) -> None:
                error = ClusterForbiddenError(verb, resource, "")
                (memory.fail_pods if resource == "pods" else memory.fail_logs)(error)

            return Cluster(memory, add_memory, memory_log, memory_forbid)
        fake = api
        source = KubernetesPodSource(
            fake.client(), page_size=2, max_pods=max_pods, sleep=lambda _: None
        )
        made.append(source)

        def kube_log(pod: str, container: str, text: str | bytes, **kw: bool) -> None:
            fake.set_log(pod, text, namespace=NAMESPACE, container=container, **kw)

        return Cluster(
            source,
            lambda pods: fake.add_pods(*pods),
            kube_log,
            lambda verb, resource: fake.fleet.forbid(verb, resource),
        )

    try:
        yield build
    finally:
        for source in made:
            source.close()
        if api is not None:
            api.stop()
            assert not api.server_errors, api.server_errors


def node_pods(node: str) -> list[Raw]:
    return [driver_pod(node, image=IMAGE, digest=DIGEST), validator_pod(node), plugin_pod(node)]


# -- pods -----------------------------------------------------------------------------------


def test_the_driver_and_validator_on_the_node_come_back_parsed(make: Make) -> None:
    cluster = make()
    elsewhere = driver_pod("gpu-1", image=IMAGE, digest=DIGEST, namespace="kube-system")
    cluster.add([*node_pods("gpu-0"), *node_pods("gpu-1"), elsewhere])
    pods = cluster.source.pods_on("gpu-0")
    expected = [driver_pod("gpu-0", image=IMAGE, digest=DIGEST), validator_pod("gpu-0")]
    assert [pod.name for pod in pods] == sorted(raw["metadata"]["name"] for raw in expected)
    parsed = {pod.name: pod for pod in pods}
    for raw in expected:
        assert parsed[raw["metadata"]["name"]] == parse_pod(raw)
    assert {pod.role for pod in pods} == {PodRole.DRIVER, PodRole.VALIDATOR}
    assert {(pod.namespace, pod.node) for pod in pods} == {(NAMESPACE, "gpu-0")}
    assert all(pod.ready for pod in pods)
    theirs = cluster.source.pods_on("gpu-1")  # its own two, not the one in kube-system
    assert [(pod.namespace, pod.node) for pod in theirs] == [(NAMESPACE, "gpu-1")] * 2


def test_a_node_without_operator_pods_has_none(make: Make) -> None:
    cluster = make()
    cluster.add([plugin_pod("gpu-0"), *node_pods("gpu-1")])
    assert cluster.source.pods_on("gpu-0") == ()
    assert cluster.source.pods_on("gpu-9") == ()


@pytest.mark.parametrize("state", ["ready", "starting", "crashloop", "init-error"])
@pytest.mark.parametrize("form", ["docker-pullable", "repo", "mirror", "local"])
def test_every_driver_state_and_image_id_form_comes_back_as_reported(
    make: Make, state: Any, form: Any
) -> None:
    cluster = make()
    raw = driver_pod("gpu-0", image=IMAGE, digest=DIGEST, state=state, image_id_form=form)
    cluster.add([raw])
    (pod,) = cluster.source.pods_on("gpu-0")
    assert pod == parse_pod(raw)
    container = pod.driver_container()
    assert container is not None
    assert container.name == DRIVER
    assert pod.ready is (state == "ready")
    ran = state != "init-error"  # a container that never started reports no image ID
    assert container.digest == (DIGEST if ran and form != "local" else None)
    if state == "crashloop":
        assert (container.waiting, container.restarts) == ("CrashLoopBackOff", 7)
    if state == "init-error":
        (manager,) = pod.init_containers
        assert (manager.name, manager.failed_exit) == ("k8s-driver-manager", 1)
        assert container.waiting == "PodInitializing"


def test_a_validator_still_validating_is_not_ready(make: Make) -> None:
    cluster = make()
    cluster.add([validator_pod("gpu-0", ready=False)])
    (pod,) = cluster.source.pods_on("gpu-0")
    assert (pod.role, pod.ready) == (PodRole.VALIDATOR, False)
    assert [c.name for c in pod.init_containers] == [
        "driver-validation",
        "toolkit-validation",
        "cuda-validation",
        "plugin-validation",
    ]


def test_many_pods_come_back_complete_across_pages(make: Make) -> None:
    cluster = make()
    drivers = [
        driver_pod("gpu-0", image=IMAGE, digest=DIGEST, name=f"nvidia-driver-{n:02d}")
        for n in range(7)
    ]
    cluster.add([*drivers, *node_pods("gpu-1")])
    names = [pod.name for pod in cluster.source.pods_on("gpu-0")]
    assert names == [f"nvidia-driver-{n:02d}" for n in range(7)]


def test_a_listing_past_the_bound_is_refused_naming_it(make: Make) -> None:
    cluster = make(max_pods=5)
    drivers = [
        driver_pod("gpu-0", image=IMAGE, digest=DIGEST, name=f"nvidia-driver-{n:02d}")
        for n in range(6)
    ]
    cluster.add(drivers)
    with pytest.raises(ClusterRejectedError, match="more than 5 pods") as caught:
        cluster.source.pods_on("gpu-0")
    assert "gpu-0" in str(caught.value)
    cluster.add(node_pods("gpu-1"))
    assert len(cluster.source.pods_on("gpu-1")) == 2  # the bound is per node


def test_rbac_refusing_the_listing_names_what_to_grant(make: Make) -> None:
    cluster = make()
    cluster.add(node_pods("gpu-0"))
    cluster.forbid("list", "pods")
    with pytest.raises(ClusterForbiddenError) as caught:
        cluster.source.pods_on("gpu-0")
    assert (caught.value.verb, caught.value.resource, caught.value.group) == ("list", "pods", "")
    assert "grant releasebot's ServiceAccount 'list' on 'pods'" in str(caught.value)


# -- logs -----------------------------------------------------------------------------------


def crashing(cluster: Cluster) -> str:
    raw = driver_pod("gpu-0", image=IMAGE, digest=DIGEST, state="crashloop")
    cluster.add([raw])
    return str(raw["metadata"]["name"])


def test_the_log_tail_is_the_last_lines(make: Make) -> None:
    cluster = make()
    name = crashing(cluster)
    lines = [f"line {n}" for n in range(100)]
    cluster.set_log(name, DRIVER, "\n".join(lines) + "\n", previous=True)
    tail = cluster.source.log_tail(NAMESPACE, name, DRIVER, previous=True)
    assert tail.splitlines() == lines[-LOG_TAIL_LINES:]


def test_previous_is_the_last_terminated_run(make: Make) -> None:
    cluster = make()
    name = crashing(cluster)
    cluster.set_log(name, DRIVER, "modprobe: FATAL: Module nvidia not found\n", previous=True)
    assert cluster.source.log_tail(NAMESPACE, name, DRIVER, previous=True) == (
        "modprobe: FATAL: Module nvidia not found"
    )
    ready = driver_pod("gpu-1", image=IMAGE, digest=DIGEST)
    cluster.add([ready])
    ready_name = ready["metadata"]["name"]
    cluster.set_log(ready_name, DRIVER, "Done, now waiting for signal\n")
    assert cluster.source.log_tail(NAMESPACE, ready_name, DRIVER, previous=False) == (
        "Done, now waiting for signal"
    )
    assert cluster.source.log_tail(NAMESPACE, ready_name, None, previous=False) == (
        "Done, now waiting for signal"
    )
    # it never terminated: there is no previous run
    assert cluster.source.log_tail(NAMESPACE, ready_name, DRIVER, previous=True) == ""


def test_a_crash_loop_shows_its_last_run_and_a_waiting_container_nothing(make: Make) -> None:
    cluster = make()
    name = crashing(cluster)
    cluster.set_log(name, DRIVER, "NVRM: API mismatch\n", previous=True)
    assert cluster.source.log_tail(NAMESPACE, name, DRIVER, previous=False) == (
        "NVRM: API mismatch"
    )
    stuck = driver_pod("gpu-1", image=IMAGE, digest=DIGEST, state="init-error")
    cluster.add([stuck])
    stuck_name = stuck["metadata"]["name"]
    cluster.set_log(stuck_name, DRIVER, "never shown\n")
    cluster.set_log(stuck_name, "k8s-driver-manager", "unload failed\n")
    assert cluster.source.log_tail(NAMESPACE, stuck_name, DRIVER, previous=False) == ""
    assert cluster.source.log_tail(NAMESPACE, stuck_name, "k8s-driver-manager", previous=False) == (
        "unload failed"
    )
    assert cluster.source.pods_on("") == ()


def test_no_pod_no_container_no_log_is_empty(make: Make) -> None:
    cluster = make()
    name = crashing(cluster)
    assert cluster.source.log_tail(NAMESPACE, "gone", DRIVER, previous=False) == ""
    assert cluster.source.log_tail(NAMESPACE, name, "no-such-container", previous=False) == ""
    assert cluster.source.log_tail("elsewhere", name, DRIVER, previous=True) == ""
    assert cluster.source.log_tail(NAMESPACE, name, DRIVER, previous=True) == ""  # none set


def test_a_hostile_log_is_cleaned_masked_and_bounded(make: Make) -> None:
    cluster = make()
    name = crashing(cluster)
    hostile = (
        b"\x1b]0;owned\x07\x1b[31mERROR\x1b[0m: curl -H 'Authorization: Bearer "
        + BEARER.encode()
        + b"' failed\r\n"
        + b"caf\xe9 \xff\xfe broken bytes\x00\x07\x9b2J\n"
        + b"\xe2\x80\xaereversed\xe2\x80\xac and a tab\there\n"
    )
    cluster.set_log(name, DRIVER, hostile, previous=True)
    tail = cluster.source.log_tail(NAMESPACE, name, DRIVER, previous=True)
    assert BEARER not in tail
    assert "ERROR: curl -H 'Authorization: Bearer ***' failed" in tail.splitlines()[0]
    assert "caf\ufffd \ufffd\ufffd broken bytes" in tail
    for control in ("\x1b", "\x07", "\x00", "\x9b", "\r", "\u202e", "\u202c"):
        assert control not in tail
    assert tail.splitlines()[-1] == "reversed and a tab here"
    assert all(char == "\n" or char.isprintable() for char in tail)


def test_a_long_log_keeps_its_end(make: Make) -> None:
    cluster = make()
    name = crashing(cluster)
    lines = [f"{n:03d} " + "x" * 300 for n in range(LOG_TAIL_LINES)]
    lines[-1] = "NVRM: the last line, which says why"
    cluster.set_log(name, DRIVER, "\n".join(lines), previous=True)
    tail = cluster.source.log_tail(NAMESPACE, name, DRIVER, previous=True)
    assert len(tail) == LOG_TAIL_CHARS
    assert tail.startswith("…")
    assert tail.endswith("NVRM: the last line, which says why")


def test_rbac_refusing_the_log_names_what_to_grant(make: Make) -> None:
    cluster = make()
    name = crashing(cluster)
    cluster.forbid("get", "pods/log")
    with pytest.raises(ClusterForbiddenError) as caught:
        cluster.source.log_tail(NAMESPACE, name, DRIVER, previous=True)
    assert (caught.value.verb, caught.value.resource) == ("get", "pods/log")
    assert "grant releasebot's ServiceAccount 'get' on 'pods/log'" in str(caught.value)


# -- the Kubernetes adapter alone -----------------------------------------------------------


@pytest.fixture
def sleeps() -> list[timedelta]:
    return []


@pytest.fixture
def pods(kube_api: FakeKubeApi, sleeps: list[timedelta]) -> Iterator[KubernetesPodSource]:
    source = KubernetesPodSource(kube_api.client(), page_size=2, sleep=sleeps.append)
    yield source
    source.close()


def test_the_listing_asks_the_api_server_for_the_node_in_pages(
    kube_api: FakeKubeApi, pods: KubernetesPodSource
) -> None:
    drivers = [
        driver_pod("gpu-0", image=IMAGE, digest=DIGEST, name=f"nvidia-driver-{n}") for n in range(5)
    ]
    kube_api.add_pods(*drivers, *node_pods("gpu-1"))
    assert len(pods.pods_on("gpu-0")) == 5
    listed = kube_api.requests_to("GET", "pods")
    assert [r.path for r in listed] == [f"/api/v1/namespaces/{NAMESPACE}/pods"] * 3
    assert {r.query["fieldSelector"] for r in listed} == {"spec.nodeName=gpu-0"}
    assert {r.query["limit"] for r in listed} == {"2"}
    assert "continue" not in listed[0].query
    assert all(r.query["continue"] for r in listed[1:])


def test_pages_without_end_are_refused(kube_api: FakeKubeApi, pods: KubernetesPodSource) -> None:
    endless = b'{"kind": "PodList", "metadata": {"continue": "again"}, "items": []}'
    kube_api.fail_requests(None, status=200, plural="pods", raw=endless)
    with pytest.raises(ClusterRejectedError, match="more than 252 pages of pods"):
        pods.pods_on("gpu-0")
    assert len(kube_api.requests_to("GET", "pods")) == 252  # ceil(500 / 2) + 2


def test_a_pod_listing_over_its_time_budget_is_refused(kube_api: FakeKubeApi) -> None:
    endless = b'{"kind": "PodList", "metadata": {"continue": "again"}, "items": []}'
    kube_api.fail_requests(None, status=200, plural="pods", raw=endless)
    ticks = iter(range(0, 1000, 40))  # each look at the clock: 40 s later
    pods = KubernetesPodSource(
        kube_api.client(),
        page_size=2,
        sleep=lambda _: None,
        budget=timedelta(seconds=60),
        monotonic=lambda: float(next(ticks)),
    )
    try:
        with pytest.raises(
            ClusterRejectedError, match=r"not finished after 60 s \(2 pages of pods\)"
        ):
            pods.pods_on("gpu-0")
    finally:
        pods.close()
    assert len(kube_api.requests_to("GET", "pods")) == 2


def test_the_log_request_says_what_it_wants(
    kube_api: FakeKubeApi, pods: KubernetesPodSource
) -> None:
    name = driver_pod("gpu-0", image=IMAGE, digest=DIGEST, state="crashloop")["metadata"]["name"]
    kube_api.add_pods(driver_pod("gpu-0", image=IMAGE, digest=DIGEST, state="crashloop"))
    kube_api.set_log(name, "oops\n", namespace=NAMESPACE, container=DRIVER, previous=True)
    assert pods.log_tail(NAMESPACE, name, DRIVER, previous=True) == "oops"
    (request,) = [r for r in kube_api.requests_to("GET", "pods") if r.path.endswith("/log")]
    assert request.path == f"/api/v1/namespaces/{NAMESPACE}/pods/{name}/log"
    assert request.query == {
        "tailLines": str(LOG_TAIL_LINES),
        "limitBytes": str(256 * 1024),
        "container": DRIVER,
        "previous": "true",
    }


def test_a_server_ignoring_limit_bytes_is_read_no_further(kube_api: FakeKubeApi) -> None:
    name = driver_pod("gpu-0", image=IMAGE, digest=DIGEST)["metadata"]["name"]
    kube_api.add_pods(driver_pod("gpu-0", image=IMAGE, digest=DIGEST))
    huge = b"A" * 10_000_000 + b"\nthe end\n"
    kube_api.fail_requests(None, status=200, path_contains="/log", raw=huge)
    source = KubernetesPodSource(kube_api.client(), max_log_bytes=4096, sleep=lambda _: None)
    try:
        tail = source.log_tail(NAMESPACE, name, DRIVER, previous=False)
    finally:
        source.close()
    assert tail == "…" + "A" * (LOG_TAIL_CHARS - 1)  # the first 4 KiB, its end kept


def test_an_api_server_down_is_retried_then_temporary(
    kube_api: FakeKubeApi, pods: KubernetesPodSource, sleeps: list[timedelta]
) -> None:
    kube_api.fail_requests(None, status=503, plural="pods")
    with pytest.raises(ClusterUnavailableError, match="list pods in namespace gpu-operator"):
        pods.pods_on("gpu-0")
    assert sleeps == [timedelta(seconds=1), timedelta(seconds=2)]
    with pytest.raises(ClusterUnavailableError, match="read the log of pod"):
        pods.log_tail(NAMESPACE, "x", DRIVER, previous=False)


def test_a_forbidden_listing_says_which_namespace(kube_api: FakeKubeApi) -> None:
    kube_api.fleet.forbid("list", "pods")
    source = KubernetesPodSource(
        kube_api.client(), namespace="nvidia-gpu", policy=RetryPolicy(retries=0)
    )
    try:
        with pytest.raises(ClusterForbiddenError, match='in the namespace "nvidia-gpu"'):
            source.pods_on("gpu-0")
    finally:
        source.close()
