"""The per-Job registry Secret of ``registry.auth = "azure"``: ``KubernetesJobLauncher``
against the fake API server over real HTTP (``support/kubeapi.py``).

A fresh login is asked for BEFORE the Job exists (a refused identity creates nothing);
the Secret follows the Job, owned by it (its uid), holding that login; an adopted Job gets
its Secret too (a crash in between); a Job that ended, or is deleted, takes its Secret
along; the API server refusing the Secret is a one-line refusal naming it, and the next
launch adopts the Job and writes the Secret.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from dataclasses import replace

import pytest

from releasebot.builders.kaniko import KanikoOptions, registry_secret_name
from releasebot.builders.kubernetes import KubernetesJobLauncher
from releasebot.domain.shared.errors import (
    ClusterRejectedError,
    ClusterUnavailableError,
    RegistryAuthError,
    RegistryUnavailableError,
)
from releasebot.domain.shared.versions import Arch
from releasebot.domain.targets.builds import BuildRequest, JobPhase, build_request
from tests.support.kubeapi import FakeKubeApi
from tests.support.targets import make_target

DIGEST = "sha256:" + "c0" * 32
LOGIN = base64.b64encode(b"00000000-0000-0000-0000-000000000000:acr-refresh").decode()


class Logins:
    def __init__(self) -> None:
        self.calls = 0
        self.error: Exception | None = None

    def __call__(self) -> str:
        self.calls += 1
        if self.error is not None:
            raise self.error
        return LOGIN


@pytest.fixture
def build() -> BuildRequest:
    return build_request(make_target(), Arch.AMD64, 1)


@pytest.fixture
def logins() -> Logins:
    return Logins()


@pytest.fixture
def launcher(
    kube_api: FakeKubeApi, kaniko_options: KanikoOptions, logins: Logins
) -> Iterator[KubernetesJobLauncher]:
    client = kube_api.client()
    options = replace(kaniko_options, registry_auth="azure")
    try:
        yield KubernetesJobLauncher(
            client, options, sleep=lambda _: None, attempts=2, registry_login=logins
        )
    finally:
        client.close()


def test_the_secret_follows_the_job_owned_by_it(
    launcher: KubernetesJobLauncher, kube_api: FakeKubeApi, build: BuildRequest, logins: Logins
) -> None:
    assert launcher.launch(build) is True
    job = kube_api.job(build.job_name)
    [secret] = kube_api.secrets()
    assert secret["metadata"]["name"] == registry_secret_name(build.job_name)
    assert secret["type"] == "kubernetes.io/dockerconfigjson"
    [owner] = secret["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["name"], owner["uid"]) == (
        "Job",
        build.job_name,
        job["metadata"]["uid"],
    )
    config = json.loads(base64.b64decode(secret["data"][".dockerconfigjson"]))
    assert list(config["auths"].values()) == [{"auth": LOGIN}]
    volumes = job["spec"]["template"]["spec"]["volumes"]
    assert volumes[0]["secret"]["secretName"] == secret["metadata"]["name"]
    assert logins.calls == 1
    posts = [r.path for r in kube_api.requests if r.method == "POST"]
    assert "/jobs" in posts[0]
    assert "/secrets" in posts[1]


def test_a_refused_identity_creates_nothing(
    launcher: KubernetesJobLauncher, kube_api: FakeKubeApi, build: BuildRequest, logins: Logins
) -> None:
    logins.error = RegistryAuthError("azure: Entra ID denied the workload identity (AADSTS70021)")
    with pytest.raises(ClusterRejectedError, match=r"AADSTS70021"):
        launcher.launch(build)
    logins.error = RegistryUnavailableError("azure: Microsoft Entra ID is unreachable")
    with pytest.raises(ClusterUnavailableError, match=r"unreachable"):
        launcher.launch(build)
    assert kube_api.jobs() == []
    assert kube_api.secrets() == []


def test_a_refused_secret_is_one_line_and_takes_its_job_back(
    launcher: KubernetesJobLauncher, kube_api: FakeKubeApi, build: BuildRequest
) -> None:
    kube_api.fail_requests(
        1,
        status=403,
        reason="Forbidden",
        message='secrets is forbidden: User "x"',
        method="POST",
        plural="secrets",
    )
    with pytest.raises(ClusterRejectedError) as caught:
        launcher.launch(build)
    assert "secret" in str(caught.value)
    assert "\n" not in str(caught.value)
    assert LOGIN not in str(caught.value)
    assert kube_api.secrets() == []
    # No Job left waiting for a volume that will never come until its deadline.
    assert [job["metadata"]["name"] for job in kube_api.jobs()] == []
    assert launcher.launch(build) is True  # created again, with its Secret
    assert len(kube_api.secrets()) == 1
    assert launcher.launch(build) is False  # adopted: the Secret (409) is written anew
    [secret] = kube_api.secrets()
    [job] = kube_api.jobs()
    assert secret["metadata"]["ownerReferences"][0]["uid"] == job["metadata"]["uid"]


def test_a_secret_left_by_an_earlier_job_of_that_name_is_replaced(
    launcher: KubernetesJobLauncher, kube_api: FakeKubeApi, build: BuildRequest
) -> None:
    launcher.launch(build)
    [old] = kube_api.secrets()
    kube_api.delete_job(build.job_name)  # the Job went, its Secret not yet (GC is late)
    assert launcher.launch(build) is True
    [secret] = kube_api.secrets()
    [job] = kube_api.jobs()
    assert secret["metadata"]["ownerReferences"][0]["uid"] == job["metadata"]["uid"]
    assert old["metadata"]["ownerReferences"][0]["uid"] != job["metadata"]["uid"]


def test_the_secret_goes_when_the_job_ends_or_is_deleted(
    launcher: KubernetesJobLauncher, kube_api: FakeKubeApi, build: BuildRequest
) -> None:
    launcher.launch(build)
    kube_api.start_pod(build.job_name)
    assert launcher.status(build.job_name).phase is JobPhase.RUNNING
    assert len(kube_api.secrets()) == 1
    kube_api.succeed(build.job_name, DIGEST)
    assert launcher.status(build.job_name).phase is JobPhase.SUCCEEDED
    assert kube_api.secrets() == []

    second = build_request(make_target(), Arch.AMD64, 2)
    launcher.launch(second)
    assert len(kube_api.secrets()) == 1
    launcher.delete(second.job_name)
    assert kube_api.secrets() == []
    launcher.delete(second.job_name)  # twice: both already gone
