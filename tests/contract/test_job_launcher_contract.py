"""The ``JobLauncher`` contract: one suite that ``MemoryJobLauncher`` and
``KubernetesJobLauncher`` (on the fake API server over real HTTP) both pass.

Covers creating a Job, adopting it on a second launch without a twin, the manifest that
is created being the one ``render`` shows, ``running`` before and after the Pod starts,
``succeeded`` with the termination message, ``failed`` with each reason (OOM kill,
eviction, deadline, non-zero exit) and the log's end, an unpullable executor image
reported as a permanent ``IMAGE_PULL`` failure, ``missing`` after ``delete`` or after
someone else deleted the Job mid-build, and builds of one target not disturbing each other.

The test plays Kaniko through a small ``Cluster`` harness: the memory launcher's own
``succeed``/``fail``, or the fake API server's Job, Pod and log changes.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest

from releasebot.builders.kaniko import KanikoOptions
from releasebot.builders.kubernetes import KubernetesJobLauncher
from releasebot.builders.memory import MemoryJobLauncher
from releasebot.domain.ports import JobLauncher
from releasebot.domain.shared.versions import Arch
from releasebot.domain.targets.builds import (
    BuildRequest,
    FailureReason,
    JobPhase,
    build_request,
)
from releasebot.domain.targets.models import Target
from tests.support.kubeapi import FakeKubeApi
from tests.support.targets import make_target

DIGEST = "sha256:" + "5e" * 32
BUILD_LOG = "".join(f"step {number}: compiling nvidia.ko\n" for number in range(1, 40))
BUILD_LOG += "error: implicit declaration of function 'pci_enable_device'\n"
LAST_LINE = "error: implicit declaration of function 'pci_enable_device'"


@dataclass
class Cluster:
    """What a test does to the cluster behind a launcher: it plays Kaniko and the kubelet."""

    launcher: JobLauncher
    job_names: Callable[[], list[str]]
    manifest: Callable[[str], dict[str, Any]]
    start: Callable[[str], object]
    succeed: Callable[[str, str | None], object]
    fail: Callable[[str, FailureReason, str], object]
    image_pull_error: Callable[[str], object]
    delete_behind_our_back: Callable[[str], object]


def memory_cluster(options: KanikoOptions) -> Cluster:
    launcher = MemoryJobLauncher(options)

    def fail(name: str, reason: FailureReason, log: str) -> None:
        # A deadline kills and removes the Pod: no log is left to read.
        launcher.fail(name, reason, None if reason is FailureReason.DEADLINE_EXCEEDED else log)

    return Cluster(
        launcher=launcher,
        job_names=launcher.job_names,
        manifest=launcher.manifest,
        start=lambda _name: None,
        succeed=launcher.succeed,
        fail=fail,
        image_pull_error=lambda name: launcher.fail(name, FailureReason.IMAGE_PULL),
        delete_behind_our_back=launcher.delete,
    )


def kubernetes_cluster(api: FakeKubeApi, launcher: KubernetesJobLauncher) -> Cluster:
    def fail(name: str, reason: FailureReason, log: str) -> None:
        if reason is FailureReason.OOM_KILLED:
            api.oom_kill(name, log=log)
        elif reason is FailureReason.EVICTED:
            api.evict(name, log=log)
        elif reason is FailureReason.DEADLINE_EXCEEDED:
            api.start_pod(name)
            api.exceed_deadline(name)
        else:
            api.exit_nonzero(name, 2, log=log)

    return Cluster(
        launcher=launcher,
        job_names=lambda: [job["metadata"]["name"] for job in api.jobs()],
        manifest=api.job,
        start=api.start_pod,
        succeed=api.succeed,
        fail=fail,
        image_pull_error=api.image_pull_error,
        delete_behind_our_back=api.delete_job,
    )


@pytest.fixture(params=["memory", "kubernetes"])
def cluster(request: pytest.FixtureRequest, kaniko_options: KanikoOptions) -> Cluster:
    if request.param == "memory":
        return memory_cluster(kaniko_options)
    api = request.getfixturevalue("kube_api")
    launcher = request.getfixturevalue("kube_launcher")
    return kubernetes_cluster(api, launcher)


def target(*arches: Arch) -> Target:
    return make_target(arches=arches or (Arch.AMD64,))


@pytest.fixture
def build() -> BuildRequest:
    return build_request(target(), Arch.AMD64, 1)


def test_launch_creates_the_job(cluster: Cluster, build: BuildRequest) -> None:
    assert cluster.launcher.launch(build) is True
    assert cluster.job_names() == [build.job_name]
    assert cluster.launcher.status(build.job_name).phase is JobPhase.RUNNING


def test_second_launch_adopts_without_a_twin(cluster: Cluster, build: BuildRequest) -> None:
    assert cluster.launcher.launch(build) is True
    assert cluster.launcher.launch(build) is False
    assert cluster.launcher.launch(build) is False
    assert cluster.job_names() == [build.job_name]


def test_created_job_is_the_rendered_manifest(cluster: Cluster, build: BuildRequest) -> None:
    rendered = cluster.launcher.render(build)
    cluster.launcher.launch(build)
    created = cluster.manifest(build.job_name)
    assert created["metadata"]["name"] == rendered["metadata"]["name"] == build.job_name
    assert created["metadata"]["annotations"] == rendered["metadata"]["annotations"]
    assert created["spec"]["template"]["spec"] == rendered["spec"]["template"]["spec"]
    for key in ("backoffLimit", "activeDeadlineSeconds", "ttlSecondsAfterFinished"):
        assert created["spec"][key] == rendered["spec"][key]
    # The API server adds its own labels to the Pod template; ours must all be there.
    template_labels = created["spec"]["template"]["metadata"]["labels"]
    assert rendered["spec"]["template"]["metadata"]["labels"].items() <= template_labels.items()


def test_running_before_and_after_the_pod_starts(cluster: Cluster, build: BuildRequest) -> None:
    cluster.launcher.launch(build)
    assert cluster.launcher.status(build.job_name).phase is JobPhase.RUNNING
    cluster.start(build.job_name)
    status = cluster.launcher.status(build.job_name)
    assert status.phase is JobPhase.RUNNING
    assert status.reason is None
    assert status.termination_message is None


def test_succeeded_with_the_termination_message(cluster: Cluster, build: BuildRequest) -> None:
    cluster.launcher.launch(build)
    cluster.start(build.job_name)
    cluster.succeed(build.job_name, DIGEST)
    status = cluster.launcher.status(build.job_name)
    assert status.phase is JobPhase.SUCCEEDED
    assert status.termination_message == DIGEST
    assert status.reason is None
    assert status.name == build.job_name


@pytest.mark.parametrize(
    "reason",
    [
        FailureReason.OOM_KILLED,
        FailureReason.EVICTED,
        FailureReason.DEADLINE_EXCEEDED,
        FailureReason.EXIT_CODE,
    ],
)
def test_failed_with_each_reason(
    cluster: Cluster, build: BuildRequest, reason: FailureReason
) -> None:
    cluster.launcher.launch(build)
    cluster.fail(build.job_name, reason, BUILD_LOG)
    status = cluster.launcher.status(build.job_name)
    assert status.phase is JobPhase.FAILED
    assert status.reason is reason
    assert status.message
    assert status.termination_message is None
    if reason is FailureReason.DEADLINE_EXCEEDED:
        assert status.log_tail is None  # the Pod was killed and removed with its log
    else:
        assert status.log_tail is not None
        assert status.log_tail.endswith(LAST_LINE)


def test_unpullable_executor_is_reported_as_a_failure(
    cluster: Cluster, build: BuildRequest
) -> None:
    # The Pod would wait for the image forever: the launcher reports it failed (the service
    # retries it a few times, a pull may be a blip, then hands it to a human) and deletes it.
    cluster.launcher.launch(build)
    cluster.image_pull_error(build.job_name)
    status = cluster.launcher.status(build.job_name)
    assert status.phase is JobPhase.FAILED
    assert status.reason is FailureReason.IMAGE_PULL
    cluster.launcher.delete(build.job_name)
    assert cluster.launcher.status(build.job_name).phase is JobPhase.MISSING


def test_missing_after_delete(cluster: Cluster, build: BuildRequest) -> None:
    cluster.launcher.launch(build)
    cluster.start(build.job_name)
    cluster.launcher.delete(build.job_name)
    assert cluster.launcher.status(build.job_name).phase is JobPhase.MISSING
    assert cluster.job_names() == []
    cluster.launcher.delete(build.job_name)  # deleting what is gone is not an error
    assert cluster.launcher.launch(build) is True  # and it can be launched again


def test_missing_when_someone_deletes_it_mid_build(cluster: Cluster, build: BuildRequest) -> None:
    cluster.launcher.launch(build)
    cluster.start(build.job_name)
    cluster.delete_behind_our_back(build.job_name)
    assert cluster.launcher.status(build.job_name).phase is JobPhase.MISSING


def test_never_launched_is_missing(cluster: Cluster) -> None:
    assert cluster.launcher.status("rb-never-launched-00000000-amd64-1").phase is JobPhase.MISSING


def test_builds_of_one_target_are_independent(cluster: Cluster) -> None:
    multi = target(Arch.AMD64, Arch.ARM64)
    amd64, arm64 = (build_request(multi, arch, 1) for arch in (Arch.AMD64, Arch.ARM64))
    retry = build_request(multi, Arch.AMD64, 2)
    for request in (amd64, arm64, retry):
        assert cluster.launcher.launch(request) is True
    assert sorted(cluster.job_names()) == sorted([amd64.job_name, arm64.job_name, retry.job_name])
    cluster.succeed(arm64.job_name, DIGEST)
    cluster.fail(amd64.job_name, FailureReason.OOM_KILLED, BUILD_LOG)
    assert cluster.launcher.status(arm64.job_name).phase is JobPhase.SUCCEEDED
    assert cluster.launcher.status(amd64.job_name).reason is FailureReason.OOM_KILLED
    assert cluster.launcher.status(retry.job_name).phase is JobPhase.RUNNING
