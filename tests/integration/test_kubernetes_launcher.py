"""``KubernetesJobLauncher`` against the fake API server over real HTTP (``support/kubeapi.py``).

Covers what only the real adapter does: bounded retries when the API server is down, slow
to come back, rate-limiting or behind a load balancer answering plain text (then
``ClusterUnavailableError`` with the server's ``Retry-After``); refusals (403, 422, 400)
as one-line ``ClusterRejectedError`` without retries; a name clash with a Job releasebot
did not create; building the client from a ``KUBECONFIG`` file (bearer token sent) and the
errors of a missing kubeconfig or in-cluster config; the Background propagation of
``delete``; the log tail (``tailLines``, trimmed to its limit, the kubelet's fallback
message when the log cannot be read); a garbage or oversized termination message returned
as-is for the caller to judge; items of a Job's Pod list that are not Pods skipped, and
a Pod list that never ends refused after its few pages; and that the fake answers like a
real API server where the launcher relies on it (409 ``AlreadyExists``, 404 ``Status``
bodies, label selectors); a Job name that is no DNS-1123 label (read back from a tampered
store) is never sent.
"""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import timedelta
from pathlib import Path

import httpx
import pytest

from releasebot.builders.kaniko import LOG_TAIL_MAX_CHARS, KanikoOptions
from releasebot.builders.kubernetes import LOG_TAIL_LINES, KubernetesJobLauncher
from releasebot.domain.shared.errors import (
    ClusterRejectedError,
    ClusterUnavailableError,
    ConfigError,
    PermanentError,
    TemporaryError,
)
from releasebot.domain.shared.versions import Arch
from releasebot.domain.targets.builds import (
    BuildRequest,
    FailureReason,
    JobPhase,
    build_request,
)
from releasebot.edge.kube import ERROR_TEXT_MAX_CHARS, make_kube_client
from tests.support.kubeapi import FakeKubeApi
from tests.support.targets import make_target

DIGEST = "sha256:" + "c0" * 32


@pytest.fixture
def build() -> BuildRequest:
    return build_request(make_target(), Arch.AMD64, 1)


# -- the API server is unavailable -------------------------------------------------------


def test_api_server_down_is_unavailable_after_bounded_retries(
    kaniko_options: KanikoOptions, build: BuildRequest
) -> None:
    with FakeKubeApi() as gone:
        client = gone.client()
    sleeps: list[float] = []
    launcher = KubernetesJobLauncher(client, kaniko_options, attempts=4, sleep=sleeps.append)
    for call in (lambda: launcher.launch(build), lambda: launcher.status(build.job_name)):
        with pytest.raises(ClusterUnavailableError) as raised:
            call()
        assert isinstance(raised.value, TemporaryError)
        assert "ConnectError" in str(raised.value)
        assert raised.value.__cause__ is not None
    assert sleeps == [1.0, 2.0, 4.0] * 2  # 4 tries per call, backing off in between
    client.close()


def test_brief_outage_is_ridden_out(
    kube_api: FakeKubeApi,
    kube_launcher: KubernetesJobLauncher,
    kube_sleeps: list[float],
    build: BuildRequest,
) -> None:
    kube_api.fail_requests(2, plural="jobs", method="POST")
    assert kube_launcher.launch(build) is True
    assert len(kube_api.requests_to("POST", "jobs")) == 3
    assert kube_sleeps == [1.0, 2.0]
    assert [job["metadata"]["name"] for job in kube_api.jobs()] == [build.job_name]


def test_long_outage_gives_up_without_creating_anything(
    kube_api: FakeKubeApi,
    kube_launcher: KubernetesJobLauncher,
    kube_sleeps: list[float],
    build: BuildRequest,
) -> None:
    kube_api.fail_requests(None)
    with pytest.raises(ClusterUnavailableError) as raised:
        kube_launcher.launch(build)
    assert str(raised.value).startswith(f"kubernetes create job {build.job_name}: 503")
    assert len(kube_api.requests_to("POST", "jobs")) == 3
    assert kube_sleeps == [1.0, 2.0]
    kube_api.clear_faults()
    assert kube_api.jobs() == []


def test_rate_limit_passes_retry_after_on(
    kube_api: FakeKubeApi, kube_launcher: KubernetesJobLauncher, build: BuildRequest
) -> None:
    kube_api.fail_requests(
        None, status=429, reason="TooManyRequests", message="slow down", retry_after=30
    )
    with pytest.raises(ClusterUnavailableError) as raised:
        kube_launcher.status(build.job_name)
    assert raised.value.retry_after == timedelta(seconds=30)
    assert "429 TooManyRequests: slow down" in str(raised.value)


@pytest.mark.parametrize("body", ["text", "none", "bad-json"])
def test_proxy_errors_that_are_no_status_are_unavailable(
    kube_api: FakeKubeApi, kube_launcher: KubernetesJobLauncher, build: BuildRequest, body: str
) -> None:
    # lightkube only parses error bodies declared exactly application/json; it fails on
    # the others in its own ways (KeyError without Content-Type, JSONDecodeError).
    kube_api.fail_requests(None, status=502, message="Bad Gateway", body=body)
    for call in (lambda: kube_launcher.launch(build), lambda: kube_launcher.status("x")):
        with pytest.raises(ClusterUnavailableError) as raised:
            call()
        assert ": 502 Bad Gateway" in str(raised.value)


def test_garbage_success_answer_is_unavailable(
    kube_api: FakeKubeApi,
    kube_launcher: KubernetesJobLauncher,
    kube_sleeps: list[float],
    build: BuildRequest,
) -> None:
    kube_api.fail_requests(None, status=200, message="Welcome to nginx", body="bad-json")
    with pytest.raises(ClusterUnavailableError, match="unreadable answer"):
        kube_launcher.status(build.job_name)
    assert kube_sleeps == [1.0, 2.0]


def test_refusal_without_a_status_body_is_still_a_refusal(
    kube_api: FakeKubeApi, kube_launcher: KubernetesJobLauncher, build: BuildRequest
) -> None:
    kube_api.fail_requests(1, status=403, message="denied by the proxy", body="text")
    with pytest.raises(ClusterRejectedError, match="403 Forbidden: denied by the proxy"):
        kube_launcher.launch(build)


# -- the API server refuses --------------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "reason", "message"),
    [
        (
            403,
            "Forbidden",
            'jobs.batch is forbidden: User "system:serviceaccount:releasebot:releasebot" '
            'cannot create resource "jobs" in API group "batch" in the namespace "builds"',
        ),
        (
            422,
            "Invalid",
            'Job.batch "x" is invalid: spec.template.spec.containers[0].resources.requests: '
            'Invalid value: "10Gi": must be less than or equal to memory limit of 8Gi\n'
            + "and more\n"
            * 100,
        ),
        (400, "BadRequest", "the body of the request was in an unknown format"),
    ],
)
def test_refusals_are_permanent_one_line_errors_without_retries(
    kube_api: FakeKubeApi,
    kube_launcher: KubernetesJobLauncher,
    kube_sleeps: list[float],
    build: BuildRequest,
    status: int,
    reason: str,
    message: str,
) -> None:
    kube_api.fail_requests(1, status=status, reason=reason, message=message, method="POST")
    with pytest.raises(ClusterRejectedError) as raised:
        kube_launcher.launch(build)
    text = str(raised.value)
    assert isinstance(raised.value, PermanentError)
    assert text.startswith(f"kubernetes create job {build.job_name}: {status} {reason}: ")
    assert "\n" not in text
    assert len(text) <= ERROR_TEXT_MAX_CHARS
    assert kube_sleeps == []
    assert len(kube_api.requests_to("POST", "jobs")) == 1


def test_a_job_of_the_same_name_not_ours_is_not_adopted(
    kube_api: FakeKubeApi, kube_launcher: KubernetesJobLauncher, build: BuildRequest
) -> None:
    foreign = kube_launcher.render(build)
    foreign["metadata"]["labels"] = {"app.kubernetes.io/name": "someone-else"}
    with httpx.Client(base_url=kube_api.url) as http:
        created = http.post("/apis/batch/v1/namespaces/builds/jobs", json=foreign)
    assert created.status_code == 201 or created.status_code == 200
    with pytest.raises(ClusterRejectedError, match="not created by releasebot"):
        kube_launcher.launch(build)


@pytest.mark.parametrize(
    "name", ["../../../api/v1/namespaces/builds/secrets/x", "rb-x?dryRun=All", "RB-X", "a" * 64, ""]
)
def test_a_job_name_releasebot_never_makes_is_never_sent(
    kube_api: FakeKubeApi, kube_launcher: KubernetesJobLauncher, build: BuildRequest, name: str
) -> None:
    before = len(kube_api.requests)
    for call in (
        lambda: kube_launcher.status(name),
        lambda: kube_launcher.delete(name),
        lambda: kube_launcher.launch(replace(build, job_name=name)),
    ):
        with pytest.raises(ClusterRejectedError, match="not a Job name releasebot makes") as caught:
            call()
        assert "\n" not in str(caught.value)
    assert len(kube_api.requests) == before


# -- configuration -----------------------------------------------------------------------


def test_kubeconfig_file_is_used_with_its_token(
    kube_api: FakeKubeApi, kaniko_options: KanikoOptions, build: BuildRequest, tmp_path: Path
) -> None:
    kubeconfig = kube_api.write_kubeconfig(tmp_path / "kubeconfig")
    client = make_kube_client(str(kubeconfig), kaniko_options.namespace)
    try:
        launcher = KubernetesJobLauncher(client, kaniko_options, sleep=lambda _: None)
        assert launcher.launch(build) is True
        assert launcher.status(build.job_name).phase is JobPhase.RUNNING
    finally:
        client.close()
    assert [job["metadata"]["namespace"] for job in kube_api.jobs()] == ["builds"]
    post = kube_api.requests_to("POST", "jobs")[0]
    assert post.path == "/apis/batch/v1/namespaces/builds/jobs"
    assert post.headers["authorization"] == f"Bearer {kube_api.token}"
    assert post.query.get("fieldManager") == "releasebot"


def test_missing_kubeconfig_is_a_config_error(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere" / "kubeconfig"
    with pytest.raises(ConfigError) as raised:
        make_kube_client(str(missing), "builds")
    assert raised.value.key == "kubeconfig"
    assert str(missing) in str(raised.value)


def test_broken_kubeconfig_is_a_config_error(tmp_path: Path) -> None:
    broken = tmp_path / "kubeconfig"
    broken.write_text(json.dumps({"apiVersion": "v1", "clusters": [], "contexts": []}))
    with pytest.raises(ConfigError, match="cannot load Kubernetes config"):
        make_kube_client(str(broken), "builds")


def test_in_cluster_config_outside_a_cluster_is_a_config_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    with pytest.raises(ConfigError) as raised:
        make_kube_client(None, "builds")
    assert raised.value.key == "kubernetes"
    assert "in-cluster service account" in str(raised.value)


# -- deleting ----------------------------------------------------------------------------


def test_delete_takes_the_pods_along(
    kube_api: FakeKubeApi, kube_launcher: KubernetesJobLauncher, build: BuildRequest
) -> None:
    kube_launcher.launch(build)
    kube_api.image_pull_error(build.job_name)
    assert len(kube_api.pods(build.job_name)) == 1
    kube_launcher.delete(build.job_name)
    delete = kube_api.requests_to("DELETE", "jobs")[0]
    assert delete.query["propagationPolicy"] == "Background"
    assert kube_api.jobs() == []
    assert kube_api.pods(build.job_name) == []


# -- following a build -------------------------------------------------------------------


def test_log_tail_is_the_trimmed_end_of_the_log(
    kube_api: FakeKubeApi, kube_launcher: KubernetesJobLauncher, build: BuildRequest
) -> None:
    kube_launcher.launch(build)
    log = "".join(f"{number:04d} " + "x" * 200 + "\n" for number in range(500))
    kube_api.exit_nonzero(build.job_name, 1, log=log)
    status = kube_launcher.status(build.job_name)
    assert status.reason is FailureReason.EXIT_CODE
    assert status.message == "the build exited 1 (Error)"
    assert status.log_tail is not None
    assert len(status.log_tail) == LOG_TAIL_MAX_CHARS
    assert status.log_tail.endswith("0499 " + "x" * 200)
    log_reads = [request for request in kube_api.requests if request.path.endswith("/log")]
    assert [request.query.get("tailLines") for request in log_reads] == [str(LOG_TAIL_LINES)]
    assert log_reads[0].query.get("container") == "kaniko"


def test_unreadable_log_falls_back_to_the_kubelets_message(
    kube_api: FakeKubeApi,
    kube_launcher: KubernetesJobLauncher,
    kube_sleeps: list[float],
    build: BuildRequest,
) -> None:
    kube_launcher.launch(build)
    kube_api.oom_kill(build.job_name, log="unpacking rootfs\nsnapshotting /usr\n")
    kube_api.fail_requests(None, status=500, reason="InternalError", path_contains="/log")
    status = kube_launcher.status(build.job_name)
    assert status.reason is FailureReason.OOM_KILLED
    assert status.log_tail == "unpacking rootfs\nsnapshotting /usr"
    assert kube_sleeps == []  # a log read is tried once: it must not hold up the cycle


@pytest.mark.parametrize(
    "message",
    [
        "not a digest at all",
        "sha256:" + "z" * 64,
        "sha256:" + "ab" * 32 + "\nINFO pushed to registry.example.test",
        "x" * 10_000,
        "",
    ],
)
def test_termination_message_is_returned_as_is(
    kube_api: FakeKubeApi,
    kube_launcher: KubernetesJobLauncher,
    build: BuildRequest,
    message: str,
) -> None:
    kube_launcher.launch(build)
    kube_api.succeed(build.job_name, message)
    status = kube_launcher.status(build.job_name)
    assert status.phase is JobPhase.SUCCEEDED
    assert status.termination_message == (message or None)


def test_success_requires_exit_code_zero(
    kube_api: FakeKubeApi, kube_launcher: KubernetesJobLauncher, build: BuildRequest
) -> None:
    kube_launcher.launch(build)
    # Kaniko writes the digest file BEFORE pushing: a failed push leaves a digest behind.
    kube_api.exit_nonzero(build.job_name, 1, log="error pushing image", termination_message=DIGEST)
    status = kube_launcher.status(build.job_name)
    assert status.phase is JobPhase.FAILED
    assert status.reason is FailureReason.EXIT_CODE
    assert status.termination_message is None
    assert status.log_tail == "error pushing image"


def test_evicted_reason_and_message_come_from_the_pod(
    kube_api: FakeKubeApi, kube_launcher: KubernetesJobLauncher, build: BuildRequest
) -> None:
    kube_launcher.launch(build)
    kube_api.evict(build.job_name, message="The node was low on resource: ephemeral-storage.")
    status = kube_launcher.status(build.job_name)
    assert status.reason is FailureReason.EVICTED
    assert status.message == "Evicted: The node was low on resource: ephemeral-storage."


def test_err_image_pull_fails_at_once(
    kube_api: FakeKubeApi, kube_launcher: KubernetesJobLauncher, build: BuildRequest
) -> None:
    kube_launcher.launch(build)
    kube_api.image_pull_error(build.job_name, reason="ErrImagePull")
    status = kube_launcher.status(build.job_name)
    assert status.phase is JobPhase.FAILED
    assert status.reason is FailureReason.IMAGE_PULL
    assert status.message is not None
    assert status.message.startswith("ErrImagePull: ")


def test_a_success_whose_pod_is_gone_has_no_message(
    kube_api: FakeKubeApi, kube_launcher: KubernetesJobLauncher, build: BuildRequest
) -> None:
    kube_launcher.launch(build)
    pod = kube_api.succeed(build.job_name, DIGEST)
    with httpx.Client(base_url=kube_api.url) as http:
        http.delete(f"/api/v1/namespaces/builds/pods/{pod}").raise_for_status()
    status = kube_launcher.status(build.job_name)
    assert status.phase is JobPhase.SUCCEEDED
    assert status.termination_message is None


def test_items_of_the_pod_list_that_are_not_pods_are_skipped(
    kube_api: FakeKubeApi, kube_launcher: KubernetesJobLauncher, build: BuildRequest
) -> None:
    kube_launcher.launch(build)
    kube_api.succeed(build.job_name, DIGEST)
    [pod] = kube_api.pods(build.job_name)
    odd = {"metadata": {"name": "odd", "labels": "not a map"}}
    body = {"kind": "PodList", "metadata": {}, "items": [None, 7, odd, pod]}
    kube_api.fail_requests(
        None, status=200, method="GET", plural="pods", raw=json.dumps(body).encode()
    )
    status = kube_launcher.status(build.job_name)
    assert status.phase is JobPhase.SUCCEEDED
    assert status.termination_message == DIGEST


def test_a_pod_list_that_never_ends_is_refused_not_followed(
    kube_api: FakeKubeApi, kube_launcher: KubernetesJobLauncher, build: BuildRequest
) -> None:
    kube_launcher.launch(build)
    kube_api.succeed(build.job_name, DIGEST)
    endless = b'{"kind": "PodList", "metadata": {"continue": "again"}, "items": []}'
    kube_api.fail_requests(None, status=200, method="GET", plural="pods", raw=endless)
    with pytest.raises(ClusterRejectedError, match="more than 3 pages of pods"):
        kube_launcher.status(build.job_name)
    assert len(kube_api.requests_to("GET", "pods")) == 3


# -- the fake answers like a real API server ---------------------------------------------


def test_fake_answers_409_already_exists_and_404_not_found(
    kube_api: FakeKubeApi, kube_launcher: KubernetesJobLauncher, build: BuildRequest
) -> None:
    manifest = kube_launcher.render(build)
    with httpx.Client(base_url=kube_api.url) as http:
        first = http.post("/apis/batch/v1/namespaces/builds/jobs", json=manifest)
        second = http.post("/apis/batch/v1/namespaces/builds/jobs", json=manifest)
        missing = http.get("/apis/batch/v1/namespaces/builds/jobs/nope")
    assert first.is_success
    assert first.json()["metadata"]["uid"]
    assert second.status_code == 409
    assert second.headers["content-type"] == "application/json"
    assert second.json() == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": f'jobs.batch "{build.job_name}" already exists',
        "reason": "AlreadyExists",
        "details": {"name": build.job_name, "group": "batch", "kind": "jobs"},
        "code": 409,
    }
    assert missing.status_code == 404
    assert missing.headers["content-type"] == "application/json"
    assert missing.json()["reason"] == "NotFound"
    assert missing.json()["message"] == 'jobs.batch "nope" not found'


def test_fake_lists_by_label_selector(
    kube_api: FakeKubeApi, kube_launcher: KubernetesJobLauncher, build: BuildRequest
) -> None:
    other = build_request(build.target, Arch.AMD64, 2)
    kube_launcher.launch(build)
    kube_launcher.launch(other)
    with httpx.Client(base_url=kube_api.url) as http:

        def names(selector: str) -> list[str]:
            answer = http.get(
                "/apis/batch/v1/namespaces/builds/jobs", params={"labelSelector": selector}
            )
            answer.raise_for_status()
            assert answer.json()["kind"] == "JobList"
            return [item["metadata"]["name"] for item in answer.json()["items"]]

        assert names("releasebot/attempt=2") == [other.job_name]
        assert names("releasebot/attempt in (1,3),app.kubernetes.io/name") == [build.job_name]
        assert names("releasebot/attempt!=1,!missing") == [other.job_name]
        assert names("app.kubernetes.io/name=someone-else") == []
        assert (
            http.get(
                "/apis/batch/v1/namespaces/builds/jobs", params={"labelSelector": "a in b"}
            ).status_code
            == 400
        )
