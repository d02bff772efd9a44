"""Hostile Kubernetes API answers, replayed against the fleet and pod sources over real HTTP.

The fake API server (``tests/support/kubeapi.py``) answers every request of the case's
``call`` with the bytes and headers of one case of ``tests/data/hostile/kubeapi/``: the node
listing (``nodes``, the default, ``KubernetesFleetSource.nodes``), the GPU Operator's pod
listing (``pods_on``, ``KubernetesPodSource.pods_on``) or a container's log (``log_tail``).
A node listing that answers (``answer`` with ``nodes``) shows the nodes it could read, one
clean line per problem (an item skipped, names shown alike, a bound hit) and whether the
fleet view is unsure or cut short; ``pages`` says how many requests it took at most. The
ClusterPolicy listing (``cluster_policies``) answers the objects it could read, each with
the problem that keeps it from naming an image, if any.
The client is made as releasebot makes it (``make_kube_client`` from a kubeconfig), so the
bounded reader sees every answer. A case with an ``error`` passes when the call raises that
error of the domain's tree (nothing from lightkube, httpx2, msgspec or json escapes), whose
message is one clean line; a case with an ``answer`` when the call answers, within its
bounds: the pods it finds, a log tail that is at most ``LOG_TAIL_CHARS`` characters with
nothing that moves a terminal and no credential.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from releasebot.domain.fleet.operator import DriverSource
from releasebot.domain.fleet.proof import LOG_TAIL_CHARS, POD_CONTAINERS_MAX
from releasebot.domain.ports import NodeListing
from releasebot.domain.shared import errors
from releasebot.edge.kube import make_kube_client
from releasebot.edge.retry import RetryPolicy
from releasebot.fleet.kubernetes import KubernetesFleetSource
from releasebot.fleet.pods import KubernetesPodSource
from tests.hostile.conftest import (
    TERMINAL_MOVERS,
    Case,
    assert_absent,
    assert_clean_line,
    body_of,
    cases,
)
from tests.support.kubeapi import FakeKubeApi
from tests.support.operatorpods import NAMESPACE, digest_of, driver_pod

_WHERE = {
    "nodes": {"plural": "nodes"},
    "pods_on": {"plural": "pods"},
    "cluster_policies": {"plural": "clusterpolicies"},
}
_POD = driver_pod("gpu-0", image="r.test/driver:1", digest=digest_of("1"))


def _call(case: Case, client: Any) -> object:
    call = case.get("call", "nodes")
    no_retries = RetryPolicy(retries=0)
    if call in ("nodes", "cluster_policies"):
        source = KubernetesFleetSource(client, policy=no_retries, sleep=lambda _: None)
        return source.nodes() if call == "nodes" else source.cluster_policies()
    pods = KubernetesPodSource(client, policy=no_retries, sleep=lambda _: None)
    if call == "pods_on":
        return pods.pods_on("gpu-0")
    assert call == "log_tail", call
    return pods.log_tail(NAMESPACE, _POD["metadata"]["name"], "nvidia-driver-ctr", previous=True)


@pytest.mark.parametrize("case", cases("kubeapi"))
def test_a_hostile_api_answer_is_one_clean_error_or_a_bounded_answer(
    case: Case, kube_api: FakeKubeApi, tmp_path: Path
) -> None:
    kube_api.add_pods(_POD)
    where = _WHERE.get(case.get("call", "nodes"), {"path_contains": "/log"})
    kube_api.fail_requests(
        None,
        status=int(case.get("status", 200)),
        raw=body_of(case.get("body", "")),
        headers=case.get("headers"),
        **where,
    )
    client = make_kube_client(str(kube_api.write_kubeconfig(tmp_path / "kubeconfig")))
    with client:
        if "answer" in case.data:
            _check_answer(case, _call(case, client))
            if "pages" in case["answer"]:
                assert len(kube_api.requests_to("GET", "nodes")) == case["answer"]["pages"]
            return
        expected = getattr(errors, case["error"])
        with pytest.raises(errors.ReleasebotError) as caught:
            _call(case, client)
    assert type(caught.value) is expected, repr(caught.value)
    assert_clean_line(str(caught.value), case["problem"])
    assert_absent(str(caught.value), case.get("never_shown"))
    if "retry_after" in case.data:
        assert isinstance(caught.value, errors.TemporaryError)
        assert caught.value.retry_after.total_seconds() == case["retry_after"]


def _check_answer(case: Case, answer: object) -> None:
    wanted = case["answer"]
    if isinstance(answer, str):  # a log tail
        assert len(answer) <= LOG_TAIL_CHARS
        assert not TERMINAL_MOVERS.search(answer), ascii(answer[:200])
        assert "Traceback" not in answer
        assert re.search(wanted["shows"], answer), f"{wanted['shows']!r} not in {answer[-300:]!r}"
        assert_absent(answer, case.get("never_shown"))
        return
    if isinstance(answer, NodeListing):
        _check_listing(case, answer)
        return
    if "policies" in wanted:  # the GPU Operator's ClusterPolicies
        assert isinstance(answer, tuple)
        assert [source.name for source in answer] == [p["name"] for p in wanted["policies"]]
        for source, expected in zip(answer, wanted["policies"], strict=True):
            assert isinstance(source, DriverSource)
            if expected.get("problem") is None:
                assert source.problem is None
                continue
            assert source.problem is not None
            assert_clean_line(source.problem, expected["problem"])
            assert_absent(source.problem, case.get("never_shown"))
        return
    assert isinstance(answer, tuple)
    assert [pod.name for pod in answer] == wanted["pods"]
    for pod in answer:
        assert len(pod.containers) <= POD_CONTAINERS_MAX
        assert len(pod.init_containers) <= POD_CONTAINERS_MAX


def _check_listing(case: Case, listing: NodeListing) -> None:
    """A node listing read as far as it is readable: the nodes it shows, one clean line per
    problem, and whether the view is unsure or cut short."""
    wanted = case["answer"]
    names = [node.name for node in listing.nodes]
    assert names[: len(wanted["nodes"])] == wanted["nodes"], names[:10]
    assert len(names) == wanted.get("count", len(wanted["nodes"]))
    for line in listing.problems:
        assert_clean_line(line)
        assert_absent(line, case.get("never_shown"))
    for pattern in wanted.get("problems", ()):
        assert any(re.search(pattern, line) for line in listing.problems), (
            pattern,
            listing.problems,
        )
    if "unsure" in wanted:
        assert listing.unsure is not None
        assert re.search(wanted["unsure"], listing.unsure), listing.unsure
    else:
        assert listing.unsure is None, listing.unsure
    assert listing.cut is wanted.get("cut", False)
