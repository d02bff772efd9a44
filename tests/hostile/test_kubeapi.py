"""Hostile Kubernetes API answers, replayed against the fleet source over real HTTP.

The fake API server (``tests/support/kubeapi.py``) answers every node listing with the bytes
and headers of one case of ``tests/data/hostile/kubeapi/``; the client is made as
releasebot makes it (``make_kube_client`` from a kubeconfig), so the bounded reader sees
every answer. The case passes when the listing raises the named error of the domain's tree
(nothing from lightkube, httpx2, msgspec or json escapes), whose message is one clean line.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from releasebot.domain import errors
from releasebot.edge.kube import make_kube_client
from releasebot.edge.retry import RetryPolicy
from releasebot.fleet.kubernetes import KubernetesFleetSource
from tests.hostile.conftest import Case, assert_absent, assert_clean_line, body_of, cases
from tests.support.kubeapi import FakeKubeApi


@pytest.mark.parametrize("case", cases("kubeapi"))
def test_a_hostile_api_answer_is_one_clean_error(
    case: Case, kube_api: FakeKubeApi, tmp_path: Path
) -> None:
    kube_api.fail_requests(
        None,
        status=int(case.get("status", 200)),
        plural="nodes",
        raw=body_of(case.get("body", "")),
        headers=case.get("headers"),
    )
    client = make_kube_client(str(kube_api.write_kubeconfig(tmp_path / "kubeconfig")))
    source = KubernetesFleetSource(client, policy=RetryPolicy(retries=0), sleep=lambda _: None)
    expected = getattr(errors, case["error"])
    with client, pytest.raises(errors.ReleasebotError) as caught:
        source.nodes()
    assert type(caught.value) is expected, repr(caught.value)
    assert_clean_line(str(caught.value), case["problem"])
    assert_absent(str(caught.value), case.get("never_shown"))
    if "retry_after" in case.data:
        assert isinstance(caught.value, errors.TemporaryError)
        assert caught.value.retry_after.total_seconds() == case["retry_after"]
