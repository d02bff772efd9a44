"""A Kubernetes API server over real HTTP for tests, on which a test plays Kaniko.

It is kmock's ``KubernetesEmulator`` (an in-memory API server on aiohttp: CRUD, list,
watch, discovery) run in a thread on 127.0.0.1 and a random port, so sync tests drive it
through the real lightkube/httpx2 stack and real sockets. Where releasebot depends on the
real API server's behaviour, kmock 0.8 differs, and this module fixes it:

- A second create of the same name must answer 409 ``AlreadyExists``: kmock answers 409
  "Object Already Exists" inside its context manager and a bare 500 outside it (seen with
  lightkube 1.0.1 and kmock 0.8); the launcher's adoption depends on the 409.
- Error bodies are real ``Status`` objects (reasons ``NotFound``, ``AlreadyExists``,
  ``Invalid``, ``BadRequest``, messages like ``jobs.batch "x" not found``) with
  ``Content-Type: application/json`` exactly: lightkube only raises ``ApiError`` for that
  exact header, and kmock's aiohttp responses add ``; charset=utf-8``.
- List honours ``labelSelector`` (kmock returns everything) and has a real ``kind``; Pods
  are listed in etcd's key order (namespace, then name) in any namespace, honour
  ``fieldSelector`` (``spec.nodeName``, ``metadata.name``, ``metadata.namespace``,
  ``status.phase`` with ``=``, ``==``, ``!=``; another field is 400 ``field label not
  supported``) and ``limit``/``continue`` pages (an opaque token, ``remainingItemCount``;
  a token that does not decode is 400).
- ``pods/{name}/log`` serves the log a test set (text/plain, bytes as set: they need not be
  UTF-8; kmock would return the Pod object) as the API server and the kubelet do:
  ``container`` (required when the Pod has several; one that is not in the Pod is 400
  ``container x is not valid for pod y``), ``previous`` (the last terminated run; none is
  400 ``previous terminated container "x" in pod "y" not found``), ``tailLines`` then
  ``limitBytes`` (the first bytes of the tail); a container still waiting answers 400
  ``is waiting to start``, a crash-looping one serves its last run; an unknown Pod is 404.
  ``add_pods`` places Pods shaped by ``tests/support/operatorpods.py`` in any namespace.
- The server fills what a real one does on create: uid, resourceVersion,
  creationTimestamp, and for Jobs the selector and the Pod-template labels.
- DELETE of a Job with ``propagationPolicy`` Background or Foreground removes its Pods
  (the garbage collector, at once); without it they are orphaned, as for a real batch/v1
  Job deleted through the API.
- Secrets (the per-Job registry Secret of ``registry.auth = "azure"``): create (409 for a
  second), get, delete; no garbage collection of owned objects.
- Faults on demand: the next N requests (or all, until cleared) answer 503, 429, 403...
- Nodes (with real ``limit``/``continue`` pagination and merge-patch), the GPU Operator's
  ClusterPolicies and NVIDIADrivers (404 until their CRDs are "installed") and RBAC
  refusals (403 ``Forbidden`` with the real message, for any resource) are served by
  ``tests/kubefleet.py`` (``api.fleet``).
- ``coordination.k8s.io/v1`` Leases (kmock ignores PUT) are served here: create (409
  ``AlreadyExists`` for a second one), get, list, PUT with real optimistic concurrency
  (a stale ``metadata.resourceVersion`` answers 409 ``Conflict``, as leader election
  relies on) and delete; ``leases()`` reads them.

The test plays the Job controller, the kubelet and Kaniko with ``succeed``, ``oom_kill``,
``evict``, ``exceed_deadline``, ``exit_nonzero``, ``image_pull_error`` and ``delete_job``,
producing the statuses a real cluster shows (Job conditions including the 1.31+
``SuccessCriteriaMet``/``FailureTarget``, Pod phases, container states, termination
messages with the ``FallbackToLogsOnError`` rule). Deliberately NOT emulated: validation
and admission (``kubernetes-validate`` checks the manifests), controllers running on their
own, TTLs, watch bookmarks, pagination of anything but Nodes and Pods, ephemeral
containers' logs, ``sinceSeconds``/``timestamps`` on logs.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import json
import re
import threading
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

import aiohttp.web
import httpx2
import kmock
from lightkube import Client, KubeConfig
from lightkube.config.models import Cluster, User

from tests.support.kubefleet import FakeFleet, verb_of
from tests.support.servers import Started

T = TypeVar("T")

JOBS = kmock.resource("batch", "v1", "jobs")
PODS = kmock.resource("", "v1", "pods")
LEASES = kmock.resource("coordination.k8s.io", "v1", "leases")
SECRETS = kmock.resource("", "v1", "secrets")
_KINDS = {JOBS: "Job", PODS: "Pod", SECRETS: "Secret"}
DEFAULT_TOKEN = "test-token"  # a fake server's fake bearer token
FALLBACK_LINES = 80  # the kubelet's FallbackToLogsOnError: at most 80 lines...
FALLBACK_BYTES = 2048  # ... and 2 KiB of the log's end
_SELECTOR_REQUIREMENT = re.compile(
    r"\s*(?:!\s*(?P<absent>[\w./-]+)"
    r"|(?P<key>[\w./-]+)\s*(?:(?P<op>==|=|!=)\s*(?P<value>[\w.-]*)"
    r"|\s+(?P<setop>in|notin)\s*\((?P<values>[^)]*)\))?)\s*(?:,|$)"
)


@dataclass(frozen=True)
class RecordedRequest:
    method: str
    path: str
    query: dict[str, str]
    headers: dict[str, str]
    """Header names lower-cased."""


@dataclass
class Fault:
    """An answer forced on matching requests instead of the emulator's own."""

    status: int
    reason: str
    message: str
    remaining: int | None
    """How many more requests get it; ``None``: all of them until ``clear_faults``."""
    method: str | None = None
    plural: str | None = None
    body: str = "status"
    """``status``: a ``Status`` object as the API server writes it; ``text``: plain text, as a
    load balancer in front of it sends; ``none``: no body and no Content-Type; ``bad-json``:
    ``application/json`` that is not JSON."""
    retry_after: int | None = None
    path_contains: str | None = None
    raw: bytes | None = None
    """These exact bytes as the body (``Content-Type: application/json`` unless ``headers``
    name another), any ``body``."""
    headers: dict[str, str] | None = None
    """Headers sent as given (a hostile ``Retry-After``, say)."""


class FakeKubeApi(Started):
    """The fake API server and the controls a test uses to play the cluster.

    Use as a context manager (or ``start``/``stop``)::

        with FakeKubeApi() as api:
            launcher = KubernetesJobLauncher(api.client(), options, sleep=lambda _: None)
    """

    def __init__(self, namespace: str = "builds", token: str = DEFAULT_TOKEN) -> None:
        self.namespace = namespace
        self.token = token
        self.requests: list[RecordedRequest] = []
        self.server_errors: list[BaseException] = []
        """Unexpected exceptions inside the fake (bugs in it, not in the code under test)."""
        self._faults: list[Fault] = []
        self._logs: dict[tuple[str, str, str | None, bool], bytes] = {}
        self._leases: dict[tuple[str, str], dict[str, Any]] = {}
        self.fleet = FakeFleet()
        """Nodes, the GPU Operator's objects and RBAC refusals (``tests/kubefleet.py``)."""
        self._lock = threading.Lock()
        self._counter = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._stopping: asyncio.Event | None = None
        self._emulator: _Emulator | None = None
        self._port: int | None = None

    # -- lifecycle ---------------------------------------------------------------------

    def start(self) -> FakeKubeApi:
        ready = threading.Event()
        failure: list[BaseException] = []

        def serve() -> None:
            loop = asyncio.new_event_loop()
            self._loop = loop
            try:
                loop.run_until_complete(self._serve(ready))
            except Exception as error:  # noqa: BLE001 - start() reports it, waiting on `ready`
                failure.append(error)
                self.server_errors.append(error)
                ready.set()
            finally:
                loop.close()

        self._thread = threading.Thread(target=serve, name="fake-kube-api", daemon=True)
        self._thread.start()
        if not ready.wait(timeout=10) or failure:
            raise RuntimeError(f"the fake Kubernetes API did not start: {failure}")
        return self

    async def _serve(self, ready: threading.Event) -> None:
        self._stopping = asyncio.Event()
        emulator = _Emulator()
        emulator.fake = self
        emulator.resources["batch/v1/jobs"] = kmock.ResourceInfo(
            kind="Job", singular="job", namespaced=True, verbs={"create", "get", "list", "delete"}
        )
        emulator.resources["v1/pods"] = kmock.ResourceInfo(
            kind="Pod", singular="pod", namespaced=True, verbs={"get", "list"}, subresources={"log"}
        )
        emulator.resources["v1/secrets"] = kmock.ResourceInfo(  # per-Job registry Secrets
            kind="Secret", singular="secret", namespaced=True, verbs={"create", "get", "delete"}
        )
        emulator.resources["coordination.k8s.io/v1/leases"] = kmock.ResourceInfo(
            kind="Lease",
            singular="lease",
            namespaced=True,
            verbs={"create", "get", "list", "update", "delete"},
        )
        async with emulator, kmock.Server(emulator) as server:
            self._emulator = emulator
            self._port = server.port
            ready.set()
            await self._stopping.wait()

    def stop(self) -> None:
        if self._loop is not None and self._stopping is not None and self._thread is not None:
            self._loop.call_soon_threadsafe(self._stopping.set)
            self._thread.join(timeout=10)
        self._thread = None
        self._loop = None
        self._emulator = None

    # -- connecting --------------------------------------------------------------------

    @property
    def port(self) -> int:
        assert self._port is not None, "FakeKubeApi is not started"
        return self._port

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def client(self, *, timeout: float = 5.0) -> Client:
        """A lightkube client for this server (bearer token, default namespace)."""
        config = KubeConfig.from_one(
            cluster=Cluster(server=self.url), user=User(token=self.token), namespace=self.namespace
        )
        return Client(config=config, timeout=httpx2.Timeout(timeout), trust_env=False)

    def write_kubeconfig(self, path: Path) -> Path:
        """A kubeconfig file for this server (JSON, which is YAML too)."""
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "fake", "cluster": {"server": self.url}}],
            "users": [{"name": "releasebot", "user": {"token": self.token}}],
            "contexts": [
                {
                    "name": "fake",
                    "context": {"cluster": "fake", "user": "releasebot", "namespace": "default"},
                }
            ],
            "current-context": "fake",
        }
        path.write_text(json.dumps(config, indent=2))
        return path

    # -- faults ------------------------------------------------------------------------

    def fail_requests(
        self,
        count: int | None,
        *,
        status: int = 503,
        reason: str = "ServiceUnavailable",
        message: str = "the server is currently unable to handle the request",
        method: str | None = None,
        plural: str | None = None,
        body: str = "status",
        retry_after: int | None = None,
        path_contains: str | None = None,
        raw: bytes | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        """The next ``count`` matching requests (all when ``None``) get this answer.

        A request matches when its method, resource plural and path fit the filters given.
        """
        with self._lock:
            self._faults.append(
                Fault(
                    status,
                    reason,
                    message,
                    count,
                    method.upper() if method else None,
                    plural,
                    body,
                    retry_after,
                    path_contains,
                    raw,
                    headers,
                )
            )

    def clear_faults(self) -> None:
        with self._lock:
            self._faults.clear()

    def requests_to(self, method: str, plural: str) -> list[RecordedRequest]:
        """Requests with ``method`` whose path addresses ``plural`` (e.g. POST jobs)."""
        with self._lock:
            return [
                request
                for request in self.requests
                if request.method == method.upper() and f"/{plural}" in request.path
            ]

    # -- reading state -----------------------------------------------------------------

    def jobs(self) -> list[dict[str, Any]]:
        """Every Job that exists now, in creation order."""
        return self._call(lambda emulator: emulator.live_objects(JOBS, self.namespace))

    def job(self, name: str) -> dict[str, Any]:
        job = self._call(lambda emulator: emulator.read_object(JOBS, self.namespace, name))
        assert job is not None, f"no job {name!r}"
        return job

    def secrets(self) -> list[dict[str, Any]]:
        """Every Secret that exists now in the fake's namespace."""
        return self._call(lambda emulator: emulator.live_objects(SECRETS, self.namespace))

    def leases(self) -> dict[str, dict[str, Any]]:
        """Every Lease in the fake's namespace, by name."""

        def read(_emulator: _Emulator) -> dict[str, dict[str, Any]]:
            return {
                name: json.loads(json.dumps(lease))
                for (namespace, name), lease in self._leases.items()
                if namespace == self.namespace
            }

        return self._call(read)

    def pods(self, job_name: str | None = None) -> list[dict[str, Any]]:
        pods = self._call(lambda emulator: emulator.live_objects(PODS, self.namespace))
        if job_name is None:
            return pods
        return [pod for pod in pods if pod["metadata"]["labels"].get("job-name") == job_name]

    # -- playing the cluster -----------------------------------------------------------

    def start_pod(self, job_name: str) -> str:
        """The Job controller creates the build Pod; the kubelet starts Kaniko in it."""
        return self._call(lambda emulator: self._start_pod(emulator, job_name))

    def add_pods(self, *pods: dict[str, Any]) -> None:
        """Pods as the kubelet reports them (``tests/support/operatorpods.py``), each in its
        ``metadata.namespace`` (the fake's own when absent); uid, resourceVersion and
        creationTimestamp are filled as the API server fills them. One of the same name is
        replaced (the DaemonSet controller made a new one)."""

        def store(emulator: _Emulator) -> None:
            for raw in pods:
                pod = json.loads(json.dumps(raw))
                metadata = pod.setdefault("metadata", {})
                namespace = metadata.setdefault("namespace", self.namespace)
                number = self._next()
                metadata.setdefault("uid", _uid(number))
                metadata["resourceVersion"] = str(number)
                metadata.setdefault("creationTimestamp", _now())
                name = metadata["name"]
                if emulator.read_object(PODS, namespace, name) is not None:
                    emulator.remove_object(PODS, namespace, name)
                emulator.store_object(PODS, namespace, name, pod)

        self._call(store)

    def remove_pod(self, name: str, namespace: str | None = None) -> None:
        self._call(lambda emulator: emulator.remove_object(PODS, namespace or self.namespace, name))

    def set_log(
        self,
        pod_name: str,
        text: str | bytes,
        *,
        namespace: str | None = None,
        container: str | None = None,
        previous: bool = False,
    ) -> None:
        """The log of a container (any container of the Pod when ``None``); with
        ``previous``, the log of its last terminated run (``lastState.terminated``)."""
        data = text.encode() if isinstance(text, str) else text
        with self._lock:
            self._logs[(namespace or self.namespace, pod_name, container, previous)] = data

    def image_pull_error(self, job_name: str, reason: str = "ImagePullBackOff") -> str:
        """The executor image cannot be pulled: the Pod waits forever, the Job stays active."""
        message = f'Back-off pulling image "{self._image_of(job_name)}"'
        if reason == "ErrImagePull":
            message = "rpc error: code = NotFound desc = failed to pull and unpack image"
        waiting = {"waiting": {"reason": reason, "message": message}}
        return self._finish_pod(job_name, "Pending", waiting, pod_status={}, job_status=None)

    def succeed(self, job_name: str, termination_message: str | None, *, log: str = "") -> str:
        """Kaniko pushed and exited 0, its digest file being ``termination_message``."""
        terminated = _terminated(0, "Completed", termination_message)
        job_status = _job_finished("Complete", "CompletionsReached", succeeded=True)
        return self._finish_pod(
            job_name, "Succeeded", terminated, pod_status={}, job_status=job_status, log=log
        )

    def exit_nonzero(
        self,
        job_name: str,
        exit_code: int = 1,
        *,
        log: str = "",
        termination_message: str | None = None,
    ) -> str:
        """The build failed; without a digest file the kubelet falls back to the log's end."""
        message = termination_message if termination_message is not None else _fallback(log)
        terminated = _terminated(exit_code, "Error", message)
        return self._finish_pod(
            job_name, "Failed", terminated, pod_status={}, job_status=_backoff_failure(), log=log
        )

    def oom_kill(self, job_name: str, *, log: str = "") -> str:
        terminated = _terminated(137, "OOMKilled", _fallback(log))
        return self._finish_pod(
            job_name, "Failed", terminated, pod_status={}, job_status=_backoff_failure(), log=log
        )

    def evict(
        self,
        job_name: str,
        *,
        message: str = "Pod ephemeral local storage usage exceeds the total limit of "
        "containers 20Gi.",
        log: str = "",
    ) -> str:
        """The kubelet evicts the Pod (disk or memory pressure, ephemeral-storage limit)."""
        pod_status = {
            "reason": "Evicted",
            "message": message,
            "conditions": [
                _condition("DisruptionTarget", "TerminationByKubelet", message),
                _condition("Ready", "PodFailed", None, status="False"),
            ],
        }
        terminated = _terminated(137, "Error", _fallback(log))
        return self._finish_pod(
            job_name, "Failed", terminated, pod_status, _backoff_failure(), log=log
        )

    def exceed_deadline(self, job_name: str) -> None:
        """activeDeadlineSeconds passed: the Job fails and its Pods are deleted."""

        def change(emulator: _Emulator) -> None:
            job = emulator.read_object(JOBS, self.namespace, job_name)
            assert job is not None, f"no job {job_name!r}"
            for pod in emulator.live_objects(PODS, self.namespace):
                if pod["metadata"]["labels"].get("job-name") == job_name:
                    emulator.remove_object(PODS, self.namespace, pod["metadata"]["name"])
            message = "Job was active longer than specified deadline"
            emulator.patch_object(
                JOBS,
                self.namespace,
                job_name,
                {"status": _job_failure("DeadlineExceeded", message)},
            )

        self._call(change)

    def delete_job(self, job_name: str) -> None:
        """Someone runs ``kubectl delete job`` mid-build (Background propagation)."""

        def change(emulator: _Emulator) -> None:
            assert emulator.read_object(JOBS, self.namespace, job_name) is not None
            emulator.remove_object(JOBS, self.namespace, job_name)
            emulator.collect_pods(self.namespace, job_name)

        self._call(change)

    # -- inside the server's loop ------------------------------------------------------

    def _call(self, change: Callable[[_Emulator], T]) -> T:
        """Run ``change`` in the server's event loop, where the objects live, and wait."""
        assert self._loop is not None, "FakeKubeApi is not started"
        assert self._emulator is not None, "FakeKubeApi is not started"
        emulator = self._emulator

        async def run() -> T:
            async with emulator.lock:
                result = change(emulator)
            await emulator.flush_events()
            return result

        return asyncio.run_coroutine_threadsafe(run(), self._loop).result(timeout=10)

    def _next(self) -> int:
        with self._lock:
            self._counter += 1
            return self._counter

    def _image_of(self, job_name: str) -> str:
        job = self.job(job_name)
        return str(job["spec"]["template"]["spec"]["containers"][0]["image"])

    def _start_pod(self, emulator: _Emulator, job_name: str) -> str:
        job = emulator.read_object(JOBS, self.namespace, job_name)
        assert job is not None, f"no job {job_name!r}"
        template = job["spec"]["template"]
        number = self._next()
        name = f"{job_name}-{number:05d}"
        now = _now()
        containers = template["spec"]["containers"]
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": name,
                "namespace": self.namespace,
                "uid": _uid(number),
                "resourceVersion": str(self._next()),
                "creationTimestamp": now,
                "labels": dict(template["metadata"].get("labels", {})),
                "annotations": dict(template["metadata"].get("annotations", {})),
                "ownerReferences": [
                    {
                        "apiVersion": "batch/v1",
                        "kind": "Job",
                        "name": job_name,
                        "uid": job["metadata"]["uid"],
                        "controller": True,
                        "blockOwnerDeletion": True,
                    }
                ],
            },
            "spec": {**template["spec"], "nodeName": "node-1"},
            "status": {
                "phase": "Running",
                "startTime": now,
                "conditions": [_condition("PodScheduled", None, None)],
                "containerStatuses": [
                    {
                        "name": container["name"],
                        "image": container["image"],
                        "imageID": "",
                        "ready": True,
                        "restartCount": 0,
                        "started": True,
                        "state": {"running": {"startedAt": now}},
                    }
                    for container in containers
                ],
            },
        }
        emulator.store_object(PODS, self.namespace, name, pod)
        emulator.patch_object(
            JOBS,
            self.namespace,
            job_name,
            {"status": {"active": 1, "ready": 1, "startTime": now, "uncountedTerminatedPods": {}}},
        )
        return name

    def _finish_pod(
        self,
        job_name: str,
        phase: str,
        state: dict[str, Any],
        pod_status: dict[str, Any],
        job_status: dict[str, Any] | None,
        log: str = "",
    ) -> str:
        """Put the newest Pod of the Job (started if need be) into ``phase``/``state``."""

        def change(emulator: _Emulator) -> str:
            pods = [
                pod
                for pod in emulator.live_objects(PODS, self.namespace)
                if pod["metadata"]["labels"].get("job-name") == job_name
            ]
            name = pods[-1]["metadata"]["name"] if pods else self._start_pod(emulator, job_name)
            pod = emulator.read_object(PODS, self.namespace, name)
            assert pod is not None
            statuses = [
                {**status, "state": state, "ready": False, "started": "running" in state}
                for status in pod["status"]["containerStatuses"]
            ]
            emulator.patch_object(
                PODS,
                self.namespace,
                name,
                {"status": {**pod_status, "phase": phase, "containerStatuses": statuses}},
            )
            if job_status is not None:
                emulator.patch_object(JOBS, self.namespace, job_name, {"status": job_status})
            return name

        name = self._call(change)
        if log:
            self.set_log(name, log)
        return name

    def _record(self, request: kmock.Request) -> None:
        recorded = RecordedRequest(
            method=str(request.method.value),
            path=request.url.path,
            query=dict(request.params),
            headers={name.lower(): value for name, value in request.headers.items()},
        )
        with self._lock:
            self.requests.append(recorded)

    def _take_fault(self, request: kmock.Request) -> Fault | None:
        plural = request.resource.plural if request.resource is not None else None
        with self._lock:
            for fault in self._faults:
                if fault.method is not None and fault.method != request.method.value:
                    continue
                if fault.plural is not None and fault.plural != plural:
                    continue
                if fault.path_contains is not None and fault.path_contains not in request.url.path:
                    continue
                if fault.remaining is not None:
                    fault.remaining -= 1
                    if fault.remaining <= 0:
                        self._faults.remove(fault)
                return fault
        return None

    def _log_of(self, namespace: str, pod: str, container: str, previous: bool) -> bytes:
        with self._lock:
            found = self._logs.get((namespace, pod, container, previous))
            if found is None:
                found = self._logs.get((namespace, pod, None, previous), b"")
            return found


class _Emulator(kmock.KubernetesEmulator):
    """kmock's emulator answering as a real API server where releasebot depends on it."""

    fake: FakeKubeApi

    def __attrs_post_init__(self) -> None:
        super().__attrs_post_init__()
        self._pending_events: list[tuple[Any, dict[str, Any]]] = []

    @property
    def lock(self) -> asyncio.Lock:
        lock: asyncio.Lock = self._lock
        return lock

    # -- serving -----------------------------------------------------------------------

    async def _handle(self, request: kmock.Request) -> aiohttp.web.StreamResponse:
        self.fake._record(request)
        fault = self.fake._take_fault(request)
        if fault is not None:
            return _fault_response(fault)
        resource = request.resource
        if resource is None:
            return await super()._handle(request)
        fleet_answer = self._fleet(request)
        if fleet_answer is not None:
            return fleet_answer
        if resource == LEASES:
            async with self._lock:
                return self._lease(request)
        if resource not in _KINDS:
            return _status(404, "NotFound", "the server could not find the requested resource")
        if request.action == kmock.action.LIST:
            return self._list(request)
        if request.action == kmock.action.CREATE:
            refusal = await self._prepare_create(request)
            if refusal is not None:
                return refusal
        elif request.name is not None:
            async with self._lock:
                exists = self.read_object(resource, request.namespace, request.name) is not None
            if not exists:
                return _not_found(resource, request.name)
            if request.subresource == "log" and resource == PODS:
                return self._log(request)
            if request.subresource is not None:
                return _status(404, "NotFound", "the server could not find the requested resource")
        response = await super()._handle(request)
        policy = request.params.get("propagationPolicy")
        deleting_job = request.action == kmock.action.DELETE and resource == JOBS
        if deleting_job and request.name and policy in ("Background", "Foreground"):
            async with self._lock:
                self.collect_pods(request.namespace, request.name)
            await self.flush_events()
        return response

    def _fleet(self, request: kmock.Request) -> aiohttp.web.Response | None:
        """RBAC refusals for any resource, and the resources ``tests/kubefleet.py`` serves."""
        resource = request.resource
        assert resource is not None
        method = request.method.value if request.method is not None else ""
        params = dict(request.params)
        verb = verb_of(method, request.name, params)
        plural = resource.plural  # RBAC names subresources "pods/log"
        if request.subresource:
            plural = f"{plural}/{request.subresource}"
        refusal = self.fake.fleet.refusal(
            verb, resource.group, plural, request.namespace, request.name
        )
        if refusal is not None:
            return _json(*refusal)
        if not self.fake.fleet.serves(resource.group, resource.version, resource.plural):
            return None
        try:
            selects = _selector(params.get("labelSelector", ""))
        except ValueError as error:
            return _status(400, "BadRequest", f"unable to parse requirement: {error}")
        code, body = self.fake.fleet.answer(
            method,
            (resource.group, resource.version, resource.plural),
            request.name,
            params,
            request.data,
            request.headers.get("Content-Type", ""),
            selects,
        )
        return _json(code, body)

    async def _render_error(self, exc: Exception) -> aiohttp.web.StreamResponse:
        if isinstance(exc, kmock.KubernetesError) and exc.status == 409:
            # A create racing another create of the same name inside kmock.
            return _status(409, "AlreadyExists", "object already exists")
        self.fake.server_errors.append(exc)
        return _status(500, "InternalError", f"fake API server error: {exc!r}")

    async def _prepare_create(self, request: kmock.Request) -> aiohttp.web.Response | None:
        """Check the object and fill what the API server fills, before kmock stores it."""
        resource = request.resource
        assert resource is not None
        data = request.data
        if not isinstance(data, dict):
            return _status(400, "BadRequest", "the body of the request was in an unknown format")
        metadata = data.setdefault("metadata", {})
        name = metadata.get("name")
        kind = _KINDS[resource]
        if not name:
            return _status(
                422,
                "Invalid",
                f"{kind} is invalid: metadata.name: Required value: name or generateName "
                "is required",
            )
        if metadata.get("namespace") not in (None, request.namespace):
            return _status(
                400,
                "BadRequest",
                "the namespace of the provided object does not match the namespace sent on "
                "the request",
            )
        async with self._lock:
            if self.read_object(resource, request.namespace, name) is not None:
                return _status(
                    409,
                    "AlreadyExists",
                    f'{_qualified(resource)} "{name}" already exists',
                    details={"name": name, "group": resource.group, "kind": resource.plural},
                )
        number = self.fake._next()
        uid = _uid(number)
        metadata.update(
            namespace=request.namespace,
            uid=uid,
            resourceVersion=str(number),
            generation=1,
            creationTimestamp=_now(),
        )
        if resource == JOBS:
            spec = data.setdefault("spec", {})
            for key, value in {
                "completions": 1,
                "parallelism": 1,
                "completionMode": "NonIndexed",
                "suspend": False,
            }.items():
                spec.setdefault(key, value)
            spec["selector"] = {"matchLabels": {"batch.kubernetes.io/controller-uid": uid}}
            template_meta = spec.setdefault("template", {}).setdefault("metadata", {})
            template_meta.setdefault("labels", {}).update(
                {
                    "batch.kubernetes.io/controller-uid": uid,
                    "batch.kubernetes.io/job-name": name,
                    "controller-uid": uid,
                    "job-name": name,
                }
            )
            data["status"] = {}
        return None

    def _list(self, request: kmock.Request) -> aiohttp.web.Response:
        resource = request.resource
        assert resource is not None
        try:
            selects = _selector(request.params.get("labelSelector", ""))
        except ValueError as error:
            return _status(400, "BadRequest", f"unable to parse requirement: {error}")
        fields = _field_selector(request.params.get("fieldSelector", ""), resource)
        if isinstance(fields, aiohttp.web.Response):
            return fields
        items = sorted(
            (
                raw
                for raw in self.live_objects(resource, request.namespace)
                if selects(raw.get("metadata", {}).get("labels") or {}) and fields(raw)
            ),
            key=_key_of,
        )
        metadata: dict[str, Any] = {"resourceVersion": str(self.fake._next())}
        if resource == PODS:  # pages as the API server cuts them (Jobs are never paged)
            token = request.params.get("continue")
            if token:
                start = _decode_key(token)
                if start is None:
                    return _status(400, "BadRequest", f"continue key is not valid: {token[:40]}")
                items = [raw for raw in items if _key_of(raw) > start]
            limit = request.params.get("limit", "")
            size = int(limit) if limit.isdigit() else 0
            if 0 < size < len(items):
                metadata["continue"] = _encode_key(_key_of(items[size - 1]))
                metadata["remainingItemCount"] = len(items) - size
                items = items[:size]
        api_version = f"{resource.group}/{resource.version}" if resource.group else "v1"
        body = {
            "kind": f"{_KINDS[resource]}List",
            "apiVersion": api_version,
            "metadata": metadata,
            "items": items,
        }
        return aiohttp.web.Response(body=json.dumps(body).encode(), content_type="application/json")

    def _lease(self, request: kmock.Request) -> aiohttp.web.Response:
        """Leases as the API server keeps them: whole-object PUT, resourceVersion checked."""
        leases = self.fake._leases
        namespace = request.namespace or "default"
        method = request.method.value if request.method is not None else ""
        if method == "GET" and request.name is None:
            items = [lease for (ns, _), lease in leases.items() if ns == namespace]
            body = {"kind": "LeaseList", "apiVersion": "coordination.k8s.io/v1", "items": items}
            return _json(200, body)
        if method == "POST" and request.name is None:
            data = request.data
            if not isinstance(data, dict) or not data.get("metadata", {}).get("name"):
                return _status(422, "Invalid", "Lease is invalid: metadata.name: Required value")
            name = data["metadata"]["name"]
            if (namespace, name) in leases:
                return _status(
                    409, "AlreadyExists", f'leases.coordination.k8s.io "{name}" already exists'
                )
            number = self.fake._next()
            data["metadata"].update(
                namespace=namespace,
                uid=_uid(number),
                resourceVersion=str(number),
                creationTimestamp=_now(),
            )
            leases[(namespace, name)] = data
            return _json(201, data)
        name = request.name or ""
        stored = leases.get((namespace, name))
        if stored is None:
            return _not_found(LEASES, name)
        if method == "GET":
            return _json(200, stored)
        if method == "DELETE":
            del leases[(namespace, name)]
            return _json(200, stored)
        if method != "PUT" or not isinstance(request.data, dict):
            return _status(405, "MethodNotAllowed", "the fake serves Leases by PUT only")
        data = request.data
        metadata = data.setdefault("metadata", {})
        if metadata.get("resourceVersion") != stored["metadata"]["resourceVersion"]:
            return _status(
                409,
                "Conflict",
                f'Operation cannot be fulfilled on leases.coordination.k8s.io "{name}": the '
                "object has been modified; please apply your changes to the latest version "
                "and try again",
            )
        for key in ("uid", "creationTimestamp", "namespace", "name"):
            metadata[key] = stored["metadata"][key]
        metadata["resourceVersion"] = str(self.fake._next())
        leases[(namespace, name)] = data
        return _json(200, data)

    def _log(self, request: kmock.Request) -> aiohttp.web.Response:
        """A container's log, as the API server (which container) and the kubelet (which run
        of it) decide (kubelet ``validateContainerLogStatus``); their refusals are 400."""
        name = request.name
        assert name is not None
        pod = self.read_object(PODS, request.namespace, name)
        assert pod is not None
        spec = pod.get("spec", {})
        names = [c["name"] for c in spec.get("initContainers", []) + spec.get("containers", [])]
        container = request.params.get("container")
        if not container:
            if len(spec.get("containers", [])) != 1:
                return _status(
                    400,
                    "BadRequest",
                    f"a container name must be specified for pod {name}, choose one of: "
                    f"[{' '.join(names)}]",
                )
            container = spec["containers"][0]["name"]
        if container not in names:
            return _status(400, "BadRequest", f"container {container} is not valid for pod {name}")
        if not spec.get("nodeName"):
            return aiohttp.web.Response(body=b"", content_type="text/plain")  # not scheduled
        status = pod.get("status", {})
        statuses = status.get("containerStatuses", []) + status.get("initContainerStatuses", [])
        found = next((s for s in statuses if s.get("name") == container), None)
        where = f'container "{container}" in pod "{name}"'
        if found is None:
            return _status(400, "BadRequest", f"{where} is not available")
        run = _run_of(found, request.params.get("previous") in ("true", "1"))
        if isinstance(run, str):
            return _status(400, "BadRequest", run.format(where=where))
        log = self.fake._log_of(request.namespace or "", name, container, run)
        lines = log.splitlines(keepends=True)
        tail = request.params.get("tailLines")
        if tail is not None:
            lines = lines[-int(tail) :] if int(tail) > 0 else []
        body = b"".join(lines)
        limit = request.params.get("limitBytes")
        if limit is not None:
            body = body[: int(limit)]
        return aiohttp.web.Response(body=body, content_type="text/plain")

    # -- the store (call with the lock held, in the server's loop) ---------------------

    def read_object(self, resource: Any, namespace: str | None, name: str) -> dict[str, Any] | None:
        key = (resource, namespace, name)
        if key not in self.objects or self.objects[key].deleted:
            return None
        raw: dict[str, Any] = json.loads(json.dumps(self.objects[key].raw))
        return raw

    def live_objects(self, resource: Any, namespace: str | None) -> list[dict[str, Any]]:
        found = []
        for (kind, object_namespace, _name), obj in self.objects.items():
            if kind != resource or obj.deleted:
                continue
            if namespace is not None and object_namespace != namespace:
                continue
            found.append(json.loads(json.dumps(obj.raw)))
        return found

    def store_object(self, resource: Any, namespace: str, name: str, raw: dict[str, Any]) -> None:
        key = (resource, namespace, name)
        if key in self.objects:
            self.objects[key].create(raw)
        else:
            self.objects[key] = raw
        self._pending_events.append((resource, {"type": "ADDED", "object": raw}))

    def patch_object(
        self, resource: Any, namespace: str, name: str, changes: dict[str, Any]
    ) -> None:
        obj = self.objects[(resource, namespace, name)]
        obj.patch({**changes, "metadata": {"resourceVersion": str(self.fake._next())}})
        self._pending_events.append((resource, {"type": "MODIFIED", "object": obj.raw}))

    def remove_object(self, resource: Any, namespace: str, name: str) -> None:
        obj = self.objects[(resource, namespace, name)]
        raw = obj.raw
        obj.delete()
        self._pending_events.append((resource, {"type": "DELETED", "object": raw}))

    def collect_pods(self, namespace: str | None, job_name: str) -> None:
        """The garbage collector removes the Pods of a deleted Job."""
        for pod in self.live_objects(PODS, namespace):
            if pod["metadata"]["labels"].get("job-name") == job_name:
                self.remove_object(PODS, pod["metadata"]["namespace"], pod["metadata"]["name"])

    async def flush_events(self) -> None:
        """Tell kmock's watch streams about the changes made through the methods above."""
        events, self._pending_events = self._pending_events, []
        for resource, event in events:
            await self._buses[resource].put(event)


def _selector(text: str) -> Callable[[dict[str, str]], bool]:
    """A label selector (equality- and set-based) as a predicate; ValueError if malformed."""
    checks: list[Callable[[dict[str, str]], bool]] = []
    position = 0
    while position < len(text.strip()):
        match = _SELECTOR_REQUIREMENT.match(text, position)
        if match is None or match.end() == position:
            raise ValueError(repr(text[position:]))
        position = match.end()
        checks.append(_requirement(match))
    return lambda labels: all(check(labels) for check in checks)


def _requirement(match: re.Match[str]) -> Callable[[dict[str, str]], bool]:
    if match["absent"]:
        absent = match["absent"]
        return lambda labels: absent not in labels
    key = match["key"]
    if match["op"] in ("=", "=="):
        value = match["value"]
        return lambda labels: labels.get(key) == value
    if match["op"] == "!=":
        value = match["value"]
        return lambda labels: labels.get(key) != value
    if match["setop"]:
        values = {item.strip() for item in match["values"].split(",")}
        if match["setop"] == "in":
            return lambda labels: labels.get(key) in values
        return lambda labels: labels.get(key) not in values
    return lambda labels: key in labels


_POD_FIELDS = {
    "spec.nodeName": ("spec", "nodeName"),
    "metadata.name": ("metadata", "name"),
    "metadata.namespace": ("metadata", "namespace"),
    "status.phase": ("status", "phase"),
}
"""The Pod fields the fake selects on (the API server knows a few more)."""


def _field_selector(
    text: str, resource: Any
) -> Callable[[dict[str, Any]], bool] | aiohttp.web.Response:
    """A field selector as a predicate, or the API server's 400 for one it refuses."""
    checks: list[Callable[[dict[str, Any]], bool]] = []
    for requirement in filter(None, (part.strip() for part in text.split(","))):
        match = re.fullmatch(r"([\w.]+)\s*(==|=|!=)\s*(.*)", requirement)
        if match is None:
            return _status(400, "BadRequest", f"invalid selector: '{text}'")
        field, op, value = match.groups()
        path = _POD_FIELDS.get(field) if resource == PODS else None
        if path is None and field not in ("metadata.name", "metadata.namespace"):
            return _status(400, "BadRequest", f"field label not supported: {field}")
        path = path or tuple(field.split("."))

        def check(raw: dict[str, Any], path: tuple[str, ...] = path, value: str = value) -> bool:
            found: Any = raw
            for key in path:
                found = found.get(key) if isinstance(found, dict) else None
            return (found if isinstance(found, str) else "") == value

        checks.append(check if op != "!=" else (lambda raw, c=check: not c(raw)))
    return lambda raw: all(check(raw) for check in checks)


def _key_of(raw: dict[str, Any]) -> tuple[str, str]:
    """An object's place in etcd's key order."""
    metadata = raw.get("metadata", {})
    return (str(metadata.get("namespace") or ""), str(metadata.get("name") or ""))


def _encode_key(key: tuple[str, str]) -> str:
    raw = json.dumps({"v": "meta.k8s.io/v1", "start": "/".join(key)}).encode()
    return base64.urlsafe_b64encode(raw).decode()


def _decode_key(token: str) -> tuple[str, str] | None:
    try:
        data = json.loads(base64.urlsafe_b64decode(token.encode()))
    except (binascii.Error, ValueError):
        return None
    start = data.get("start") if isinstance(data, dict) else None
    if not isinstance(start, str) or "/" not in start:
        return None
    namespace, name = start.split("/", 1)
    return namespace, name


def _run_of(status: dict[str, Any], previous: bool) -> bool | str:
    """Which run of a container the kubelet reads the log of (``True``: its last terminated
    one), or its refusal (``{where}`` to fill)."""
    state = status.get("state") or {}
    last = (status.get("lastState") or {}).get("terminated") or {}
    if previous:
        if not last.get("containerID"):
            return "previous terminated {where} not found"
        return True
    if "running" in state:
        return False
    if "terminated" in state:
        if state["terminated"].get("containerID"):
            return False
        return True if last.get("containerID") else "{where} is terminated"
    if last:
        return True if last.get("containerID") else "{where} is terminated"
    waiting = state.get("waiting")
    if waiting is not None:
        reason = waiting.get("reason", "ContainerCreating")
        shown = {
            "ErrImagePull": "image can't be pulled",
            "ImagePullBackOff": "trying and failing to pull image",
        }.get(reason, reason)
        return "{where} is waiting to start: " + shown
    return "{where} is waiting to start - no logs yet"


def _status(
    code: int,
    reason: str,
    message: str,
    *,
    details: dict[str, Any] | None = None,
    headers: dict[str, str] | None = None,
) -> aiohttp.web.Response:
    """An error answer exactly as the API server writes it."""
    body: dict[str, Any] = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }
    if details is not None:
        body["details"] = details
    return aiohttp.web.Response(
        status=code,
        body=json.dumps(body).encode(),
        content_type="application/json",
        headers=headers,
    )


def _json(code: int, body: dict[str, Any]) -> aiohttp.web.Response:
    return aiohttp.web.Response(
        status=code, body=json.dumps(body).encode(), content_type="application/json"
    )


def _not_found(resource: Any, name: str) -> aiohttp.web.Response:
    return _status(
        404,
        "NotFound",
        f'{_qualified(resource)} "{name}" not found',
        details={"name": name, "group": resource.group, "kind": resource.plural},
    )


def _fault_response(fault: Fault) -> aiohttp.web.Response:
    headers = {"Retry-After": str(fault.retry_after)} if fault.retry_after is not None else None
    if fault.headers is not None:
        headers = {**(headers or {}), **fault.headers}
    if fault.raw is not None:
        typed = any(name.lower() == "content-type" for name in headers or {})
        return aiohttp.web.Response(
            status=fault.status,
            body=fault.raw,
            content_type=None if typed else "application/json",
            headers=headers,
        )
    if fault.body == "status":
        return _status(fault.status, fault.reason, fault.message, headers=headers)
    if fault.body == "text":
        return aiohttp.web.Response(
            status=fault.status, text=fault.message, content_type="text/plain", headers=headers
        )
    if fault.body == "none":
        return aiohttp.web.Response(status=fault.status, headers=headers)
    assert fault.body == "bad-json", fault.body
    return aiohttp.web.Response(
        status=fault.status,
        body=f"<html>{fault.message}</html>".encode(),
        content_type="application/json",
        headers=headers,
    )


def _qualified(resource: Any) -> str:
    return f"{resource.plural}.{resource.group}" if resource.group else str(resource.plural)


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _uid(number: int) -> str:
    return f"00000000-0000-4000-8000-{number:012d}"


def _condition(
    kind: str, reason: str | None, message: str | None, *, status: str = "True"
) -> dict[str, Any]:
    condition: dict[str, Any] = {
        "type": kind,
        "status": status,
        "lastProbeTime": None,
        "lastTransitionTime": _now(),
    }
    if reason is not None:
        condition["reason"] = reason
    if message is not None:
        condition["message"] = message
    return condition


def _terminated(exit_code: int, reason: str, message: str | None) -> dict[str, Any]:
    now = _now()
    terminated: dict[str, Any] = {
        "exitCode": exit_code,
        "reason": reason,
        "startedAt": now,
        "finishedAt": now,
        "containerID": "containerd://0123456789abcdef",
    }
    if message:
        terminated["message"] = message
    return {"terminated": terminated}


def _fallback(log: str) -> str | None:
    """What ``FallbackToLogsOnError`` puts in the termination message: the log's end."""
    tail = "\n".join(log.splitlines()[-FALLBACK_LINES:]).encode()[-FALLBACK_BYTES:]
    return tail.decode(errors="replace") or None


def _job_finished(kind: str, reason: str, *, succeeded: bool) -> dict[str, Any]:
    message = "Reached expected number of succeeded pods"
    criteria = "SuccessCriteriaMet" if succeeded else "FailureTarget"
    status: dict[str, Any] = {
        "active": None,
        "ready": 0,
        "terminating": 0,
        "conditions": [_condition(criteria, reason, message), _condition(kind, reason, message)],
    }
    if succeeded:
        status.update(succeeded=1, completionTime=_now())
    return status


def _job_failure(reason: str, message: str) -> dict[str, Any]:
    return {
        "active": None,
        "ready": 0,
        "terminating": 0,
        "failed": 1,
        "conditions": [
            _condition("FailureTarget", reason, message),
            _condition("Failed", reason, message),
        ],
    }


def _backoff_failure() -> dict[str, Any]:
    return _job_failure("BackoffLimitExceeded", "Job has reached the specified backoff limit")
