"""The Kubernetes ``JobLauncher``: creates Kaniko Jobs through the API server (lightkube) and
tells how they stand.

``launch`` is idempotent by Job name: a 409 on create is adoption (after checking that the
Job found carries this bot's labels for this very build), never a twin. ``status`` reads the
Job and its Pod and classifies how a build ended: the termination message on success (the
digest Kaniko wrote; returned as-is, the service judges it), and on failure a
``FailureReason`` plus the last log lines. An executor image that cannot be pulled is
reported as ``FAILED``/``IMAGE_PULL`` while the Job is still active: it never heals by
itself, and the caller deletes the Job.

Every call is retried a bounded number of times inside the adapter (connection errors,
timeouts, 429, 5xx) by the shared policy (``edge.retry``) with a ``sleep`` the tests turn
off; then ``ClusterUnavailableError``. 403, 422, 400 and other refusals are
``ClusterRejectedError`` at once. No lightkube, httpx2 or msgspec exception leaves this
module (``edge.kube`` translates them). The Job's Pods are listed through ``edge.kubelist``
(bounded pages of raw JSON, each item converted to a Pod on its own): an item that is not
a Pod is skipped with one log line, never the whole listing.

With ``registry_auth = "azure"`` each Job mounts a Secret of its own
(``kaniko.render_registry_secret``): ``launch`` asks ``registry_login`` for a fresh token
BEFORE it creates the Job (a refused identity creates nothing), creates the Job, then the
Secret owned by it (the Pod waits for its volume meanwhile); an adopted Job gets its Secret
too (a crash in between). ``status`` deletes it once the Job has ended and ``delete`` with
the Job; the garbage collector would anyway (the owner reference). RBAC: ``create`` and
``delete`` on Secrets in the build namespace, nothing else
(``config/components/registry-auth-azure``).

Deliberately not here: watching (the service polls ``status`` once per cycle, which
survives restarts and needs no long-lived connection), checking the pushed digest against
the registry, and retries across cycles (the service decides by the error's class).
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Collection, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar
from urllib.parse import quote

import msgspec
from lightkube import Client
from lightkube.models.batch_v1 import JobCondition
from lightkube.models.core_v1 import ContainerStateTerminated, ContainerStatus
from lightkube.resources.batch_v1 import Job
from lightkube.resources.core_v1 import Pod, Secret
from lightkube.types import CascadeType

from releasebot.builders.kaniko import (
    APP,
    APP_LABEL,
    ARCH_LABEL,
    ATTEMPT_LABEL,
    CONTAINER_NAME,
    LOG_TAIL_MAX_CHARS,
    TARGET_LABEL,
    KanikoOptions,
    is_dns_label,
    registry_secret_name,
    render_job,
    render_registry_secret,
    trim_log_tail,
)
from releasebot.domain.shared.errors import (
    ClusterRejectedError,
    ClusterUnavailableError,
    RegistryAuthError,
    RegistryError,
    RegistryUnavailableError,
)
from releasebot.domain.shared.untrusted import quoted
from releasebot.domain.targets.builds import FailureReason, JobPhase, JobRequest, JobStatus
from releasebot.edge.kube import ERROR_TEXT_MAX_CHARS, Answered, kube_call
from releasebot.edge.kubelist import ListBounds, list_objects
from releasebot.edge.retry import RetryPolicy
from releasebot.edge.text import one_line

T = TypeVar("T")

DEFAULT_ATTEMPTS = RetryPolicy.retries + 1
"""Tries per call before ``ClusterUnavailableError``: rides out an API server restart."""
DEFAULT_BACKOFF = RetryPolicy.backoff
"""First pause between tries, doubled each time (1 s, 2 s): a cycle waits 3 s at most."""
LOG_TAIL_LINES = 50
"""Log lines read from a failed build's Pod: enough for a compiler error and its context."""
IMAGE_PULL_REASONS = frozenset({"ErrImagePull", "ImagePullBackOff", "InvalidImageName"})
"""Waiting reasons that mean the executor image cannot be pulled: configuration, not luck."""
JOB_NAME_LABEL = "job-name"
"""The label the Job controller puts on its Pods (``batch.kubernetes.io/job-name`` too
since 1.27; the short one works on every supported version)."""
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_POD_BOUNDS = ListBounds(max_items=100, page_size=100)
"""A build Job runs one Pod per try (``backoffLimit`` is small): a hundred is a runaway."""

log = logging.getLogger("releasebot.builders")


class KubernetesJobLauncher:
    """Runs Kaniko build Jobs in ``options.namespace`` through ``client``."""

    def __init__(
        self,
        client: Client,
        options: KanikoOptions,
        *,
        attempts: int = DEFAULT_ATTEMPTS,
        backoff: timedelta = DEFAULT_BACKOFF,
        sleep: Callable[[float], None] = time.sleep,
        log_tail_lines: int = LOG_TAIL_LINES,
        log_tail_chars: int = LOG_TAIL_MAX_CHARS,
        registry_login: Callable[[], str] | None = None,
    ) -> None:
        """``registry_login`` (``registry_auth = "azure"``): a FRESH base64 ``user:token``
        for one Job's Secret, valid for a whole build; it raises the registry's errors."""
        if attempts < 1:
            raise ValueError("attempts must be at least 1")
        self._client = client
        self._options = options
        self._namespace = options.namespace
        self._policy = RetryPolicy(retries=attempts - 1, backoff=backoff)
        self._sleep = sleep
        self._log_tail_lines = log_tail_lines
        self._log_tail_chars = log_tail_chars
        self._registry_login = registry_login
        self._job_secrets = options.registry_auth == "azure"

    # -- JobLauncher -------------------------------------------------------------------

    def close(self) -> None:
        """Close the API client's connections."""
        self._client.close()

    def render(self, request: JobRequest) -> dict[str, Any]:
        return render_job(request, self._options)

    def launch(self, request: JobRequest) -> bool:
        name = request.job_name
        _check_job_name(name)
        manifest = self.render(request)
        try:
            job = msgspec.convert(manifest, type=Job)  # what Job.from_dict does, typed
        except msgspec.MsgspecError as error:  # a renderer bug, but never a crash
            raise ClusterRejectedError(f"kubernetes: cannot encode job {name}: {error}") from error
        login = self._login(name) if self._job_secrets else None
        # Twice at most: a Job deleted between our create (409) and our read is created anew.
        for _ in range(2):
            try:
                created = self._call(
                    f"create job {name}",
                    lambda: self._client.create(job, namespace=self._namespace),
                    answers={409},
                )
                if login is not None:
                    try:
                        self._write_secret(name, _uid(created), login)
                    except ClusterRejectedError:
                        # Refused for good (RBAC): the Job would wait for its volume until its
                        # deadline. Take it back; the refusal is what the cycle reports.
                        self.delete(name)
                        raise
                return True
            except Answered:
                pass  # 409: it exists already (or a retried create did succeed): adopt it
            existing = self._read_job(name)
            if existing is not None:
                self._check_adoptable(existing, manifest)
                if login is not None:
                    self._write_secret(name, _uid(existing), login)
                return False
        raise ClusterUnavailableError(f"kubernetes: job {name} keeps vanishing after a conflict")

    def status(self, job_name: str) -> JobStatus:
        _check_job_name(job_name)
        job = self._read_job(job_name)
        if job is None:
            return JobStatus(job_name, JobPhase.MISSING)
        pods = self._pods(job_name, job.metadata.uid if job.metadata else None)
        true_conditions = {
            condition.type: condition
            for condition in ((job.status.conditions if job.status else None) or [])
            if condition.status == "True"
        }
        # Only the terminal conditions count: SuccessCriteriaMet and FailureTarget (1.31+)
        # come first, while the Pods may still be terminating.
        if "Complete" in true_conditions or "Failed" in true_conditions:
            self._delete_secret(job_name)  # the token is not needed any more
        if "Complete" in true_conditions:
            return self._succeeded(job_name, pods)
        if "Failed" in true_conditions:
            return self._failed(job_name, true_conditions["Failed"], pods)
        return self._running(job_name, pods)

    def delete(self, job_name: str) -> None:
        _check_job_name(job_name)
        with contextlib.suppress(Answered):  # 404: already gone
            self._call(
                f"delete job {job_name}",
                lambda: self._client.delete(
                    Job, job_name, namespace=self._namespace, cascade=CascadeType.BACKGROUND
                ),
                answers={404},
            )
        self._delete_secret(job_name)

    # -- the per-Job registry Secret (azure) ---------------------------------------------

    def _login(self, job_name: str) -> str:
        """A fresh registry login for ``job_name``'s Secret; the registry's errors become
        the launcher's (a denied identity is a refusal a human must fix)."""
        if self._registry_login is None:
            raise ClusterRejectedError(
                f"kubernetes: job {job_name} needs a registry login (registry.auth = azure)"
            )
        try:
            return self._registry_login()
        except RegistryUnavailableError as error:
            raise ClusterUnavailableError(f"job {job_name}: {error}") from None
        except (RegistryAuthError, RegistryError) as error:
            raise ClusterRejectedError(f"job {job_name}: {error}") from None

    def _write_secret(self, job_name: str, job_uid: str, login: str) -> None:
        manifest = render_registry_secret(job_name, job_uid, self._options, login)
        secret = msgspec.convert(manifest, type=Secret)
        create = f"create secret {registry_secret_name(job_name)}"
        try:
            self._call(
                create,
                lambda: self._client.create(secret, namespace=self._namespace),
                answers={409},
            )
        except Answered:
            # 409: a Secret of that name exists: written before a crash, or left by an
            # earlier Job of the same name (its owner, so the garbage collector would take
            # it away under the new Pod). The bot may not read Secrets: replace it, with
            # the fresh login and this Job as its owner.
            self._delete_secret(job_name)
            with contextlib.suppress(Answered):  # 409 again: someone else wrote it just now
                self._call(
                    create,
                    lambda: self._client.create(secret, namespace=self._namespace),
                    answers={409},
                )

    def _delete_secret(self, job_name: str) -> None:
        if not self._job_secrets:
            return
        name = registry_secret_name(job_name)
        with contextlib.suppress(Answered):  # 404: already gone
            self._call(
                f"delete secret {name}",
                lambda: self._client.delete(Secret, name, namespace=self._namespace),
                answers={404},
            )

    # -- reading -----------------------------------------------------------------------

    def _read_job(self, name: str) -> Job | None:
        try:
            return self._call(
                f"read job {name}",
                lambda: self._client.get(Job, name, namespace=self._namespace),
                answers={404},
            )
        except Answered:
            return None

    def _pods(self, job_name: str, job_uid: str | None) -> list[Pod]:
        """The Job's Pods, oldest first; Pods of an earlier Job of the same name are skipped.

        Read through ``edge.kubelist`` (bounded pages, raw JSON), each item converted on
        its own: an item that is not a Pod is skipped with a line, not the whole listing
        (the Job's own conditions still say how it ended)."""
        listing = list_objects(
            self._client,
            f"api/v1/namespaces/{quote(self._namespace, safe='')}/pods",
            kind="Pod",
            plural="pods",
            what=f"list pods of job {job_name}",
            bounds=_POD_BOUNDS,
            params={"labelSelector": f"{JOB_NAME_LABEL}={job_name}"},
            policy=self._policy,
            sleep=lambda pause: self._sleep(pause.total_seconds()),
        )
        if listing.cut is not None:
            raise ClusterRejectedError(
                f"kubernetes list pods of job {job_name}: {listing.cut}, a runaway answer"
            )
        pods: list[Pod] = []
        skipped = list(listing.skipped)
        for number, raw in listing.items:
            try:
                pods.append(msgspec.convert(raw, type=Pod))
            except msgspec.MsgspecError as error:
                skipped.append(
                    f"item {number} of the Pod list is not a Pod ({_one_line(str(error))}): skipped"
                )
        for line in skipped:
            log.warning("kubernetes list pods of job %s: %s", job_name, line)
        owned = [pod for pod in pods if _owned_by(pod, job_uid)]
        return sorted(
            owned,
            key=lambda pod: (
                (pod.metadata.creationTimestamp if pod.metadata else None) or _EPOCH,
                (pod.metadata.name if pod.metadata else None) or "",
            ),
        )

    def _log_tail(self, pod: Pod, terminated: ContainerStateTerminated | None) -> str | None:
        """The end of the build's log; the FallbackToLogsOnError message if it cannot be read."""
        name = pod.metadata.name if pod.metadata else None
        text: str | None = None
        if name is not None:
            try:
                text = "".join(
                    self._call(
                        f"read log of pod {name}",
                        lambda: list(
                            self._client.log(
                                name,
                                namespace=self._namespace,
                                container=CONTAINER_NAME,
                                tail_lines=self._log_tail_lines,
                            )
                        ),
                        attempts=1,  # a missing log must not hold up the cycle
                    )
                )
            except (ClusterUnavailableError, ClusterRejectedError):
                text = None
        if not text and terminated is not None:
            text = terminated.message
        return trim_log_tail(text, self._log_tail_chars)

    # -- classifying -------------------------------------------------------------------

    def _succeeded(self, job_name: str, pods: Sequence[Pod]) -> JobStatus:
        candidates = [pod for pod in pods if _phase(pod) == "Succeeded"] or list(pods)
        for pod in reversed(candidates):
            terminated = _terminated(_container(pod))
            if terminated is None:
                continue
            if terminated.exitCode != 0:  # Kaniko writes the digest before it pushes
                return JobStatus(
                    job_name,
                    JobPhase.FAILED,
                    reason=FailureReason.EXIT_CODE,
                    message=f"job complete but the build exited {terminated.exitCode}",
                    log_tail=self._log_tail(pod, terminated),
                )
            return JobStatus(job_name, JobPhase.SUCCEEDED, termination_message=terminated.message)
        return JobStatus(
            job_name,
            JobPhase.SUCCEEDED,
            message="job complete but its pod is gone: no termination message",
        )

    def _failed(self, job_name: str, condition: JobCondition, pods: Sequence[Pod]) -> JobStatus:
        failed = [pod for pod in pods if _phase(pod) == "Failed"] or list(pods)
        pod = failed[-1] if failed else None
        terminated = _terminated(_container(pod)) if pod is not None else None
        job_says = _one_line(f"{condition.reason or 'Failed'}: {condition.message or ''}")
        reason: FailureReason
        if condition.reason == "DeadlineExceeded":
            reason, message = FailureReason.DEADLINE_EXCEEDED, job_says
        elif pod is None:
            # Evicted, preempted or deleted, and already removed: nothing tells which.
            reason = FailureReason.EVICTED
            message = _one_line(f"{job_says} (the build's pod is gone)")
        elif (disruption := _disruption(pod)) is not None:
            reason, message = FailureReason.EVICTED, disruption
        elif terminated is not None and terminated.reason == "OOMKilled":
            reason = FailureReason.OOM_KILLED
            message = (
                f"OOMKilled: the build exceeded its memory limit "
                f"{self._options.memory_limit} (exit {terminated.exitCode})"
            )
        elif terminated is not None:
            reason = FailureReason.EXIT_CODE
            message = _one_line(
                f"the build exited {terminated.exitCode} ({terminated.reason or 'Error'})"
            )
        else:
            reason, message = FailureReason.EXIT_CODE, job_says
        return JobStatus(
            job_name,
            JobPhase.FAILED,
            reason=reason,
            message=message,
            log_tail=self._log_tail(pod, terminated) if pod is not None else None,
        )

    def _running(self, job_name: str, pods: Sequence[Pod]) -> JobStatus:
        for pod in reversed(pods):
            container = _container(pod)
            waiting = container.state.waiting if container and container.state else None
            if waiting is not None and waiting.reason in IMAGE_PULL_REASONS:
                return JobStatus(
                    job_name,
                    JobPhase.FAILED,
                    reason=FailureReason.IMAGE_PULL,
                    message=_one_line(
                        f"{waiting.reason}: {waiting.message or self._options.executor_image}"
                    ),
                )
        return JobStatus(
            job_name, JobPhase.RUNNING, message=_pending_why(pods[-1]) if pods else None
        )

    def _check_adoptable(self, existing: Job, manifest: dict[str, Any]) -> None:
        """Adopt only a Job this bot rendered for the same target, arch and attempt."""
        wanted = manifest["metadata"]["labels"]
        labels = (existing.metadata.labels if existing.metadata else None) or {}
        keys = (APP_LABEL, TARGET_LABEL, ARCH_LABEL, ATTEMPT_LABEL)
        if any(labels.get(key) != wanted[key] for key in keys):
            name = manifest["metadata"]["name"]
            raise ClusterRejectedError(
                f"kubernetes: job {name} exists in namespace {self._namespace} but was not "
                f"created by {APP} for this build; delete it or use another namespace"
            )

    # -- calling -----------------------------------------------------------------------

    def _call(
        self,
        what: str,
        operation: Callable[[], T],
        *,
        answers: Collection[int] = (),
        attempts: int | None = None,
    ) -> T:
        """``operation()`` with bounded retries; every library error translated.

        An HTTP status in ``answers`` is raised as ``Answered`` for the caller to handle.
        """
        policy = self._policy if attempts is None else RetryPolicy(retries=attempts - 1)
        return kube_call(
            what,
            operation,
            policy=policy,
            sleep=lambda pause: self._sleep(pause.total_seconds()),
            answers=answers,
        )


def _one_line(text: str) -> str:
    return one_line(text, ERROR_TEXT_MAX_CHARS)


def _uid(job: Job) -> str:
    uid = job.metadata.uid if job.metadata else None
    if not uid:
        raise ClusterRejectedError("kubernetes: the API server answered a Job without a uid")
    return uid


def _owned_by(pod: Pod, job_uid: str | None) -> bool:
    references = (pod.metadata.ownerReferences if pod.metadata else None) or []
    jobs = [reference for reference in references if reference.kind == "Job"]
    return job_uid is None or not jobs or any(reference.uid == job_uid for reference in jobs)


def _phase(pod: Pod) -> str | None:
    return pod.status.phase if pod.status else None


def _container(pod: Pod | None) -> ContainerStatus | None:
    statuses = (pod.status.containerStatuses if pod and pod.status else None) or []
    for status in statuses:
        if status.name == CONTAINER_NAME:
            return status
    return statuses[0] if statuses else None


def _terminated(container: ContainerStatus | None) -> ContainerStateTerminated | None:
    return container.state.terminated if container and container.state else None


def _disruption(pod: Pod) -> str | None:
    """Why the kubelet or the control plane took the Pod away (eviction, preemption)."""
    status = pod.status
    if status is None:
        return None
    if status.reason == "Evicted":
        return _one_line(f"Evicted: {status.message or ''}")
    for condition in status.conditions or []:
        if condition.type == "DisruptionTarget" and condition.status == "True":
            return _one_line(f"{condition.reason or 'Disrupted'}: {condition.message or ''}")
    return None


def _pending_why(pod: Pod) -> str | None:
    """Why a build has not started yet (unschedulable, creating...), for people to read."""
    container = _container(pod)
    waiting = container.state.waiting if container and container.state else None
    if waiting is not None and waiting.reason:
        return _one_line(f"{waiting.reason}: {waiting.message or ''}")
    for condition in (pod.status.conditions if pod.status else None) or []:
        if condition.type == "PodScheduled" and condition.status == "False":
            return _one_line(f"{condition.reason or 'Unschedulable'}: {condition.message or ''}")
    return None


def _check_job_name(name: str) -> None:
    """A Job name read back from the store goes into the API path as it is (lightkube
    joins it): only a DNS-1123 label of at most 63 characters, what ``job_name`` makes."""
    if not is_dns_label(name):
        raise ClusterRejectedError(
            f"kubernetes: {quoted(name)} is not a Job name releasebot makes; not sent"
        )
