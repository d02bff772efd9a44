"""``KubernetesPodSource``: the GPU Operator's pods on one node, and a container's last lines.

``pods_on(node)`` lists Pods in ONE namespace, the operator's (``gpu-operator`` unless
told), selected by the API server with ``fieldSelector=spec.nodeName=<node>``, through
``edge.kubelist`` (pages, raw JSON, the bounds every listing has). Each item goes to
``proof.parse_pod`` as the JSON the API server sent, so one odd Pod is dropped or parsed as
far as it goes; Pods that are neither driver nor validator are left out. An item that is
not an object at all (``null``) may hide the driver's Pod: such a listing is a
``ClusterUnavailableError`` naming the item, so nothing is proven or refused from it. A
node runs a few dozen Pods: more than ``max_pods`` in the namespace on one node, more pages
than those could fill, or a listing over its time ``budget`` is a runaway answer and a
``ClusterRejectedError`` naming the bound.

``log_tail`` reads ``pods/<name>/log`` with ``tailLines=proof.LOG_TAIL_LINES``,
``limitBytes=max_log_bytes`` and ``previous`` (the last terminated run, for a crash loop),
and never reads more than ``max_log_bytes`` of the answer whatever the server sends. The
kubelet applies ``limitBytes`` to the START of the tail, so the bound is generous: forty
lines of a driver container are a few KiB. The bytes are decoded as UTF-8 with
replacement, terminal escape sequences and control characters other than newlines are
removed (``untrusted.strip_controls``, line by line), credentials are masked
(``edge.redact``), and the last ``proof.LOG_TAIL_CHARS`` characters are kept (``…`` first
when cut). No such container, no previous run, a container still waiting or a Pod gone
(400 or 404) is ``""``: there is no log to show, which is an answer.

Calls go through ``edge/kube.py``: a 403 names what to grant (``list`` on ``pods``,
``get`` on ``pods/log``, in the operator's namespace), connection failures, timeouts, 429
and 5xx are retried by the ``RetryPolicy`` (``sleep`` injectable) and then
``ClusterUnavailableError``, other refusals ``ClusterRejectedError``. No lightkube, httpx2
or msgspec exception escapes.

Deliberately not here: deciding anything from the pods (``domain.fleet.proof``), watching, and
reading Pods anywhere but the operator's namespace.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import timedelta
from urllib.parse import quote

from lightkube import Client

from releasebot.domain.fleet.nodes import is_node_name
from releasebot.domain.fleet.proof import LOG_TAIL_CHARS, LOG_TAIL_LINES, OperatorPod, parse_pod
from releasebot.domain.shared.errors import ClusterRejectedError, ClusterUnavailableError
from releasebot.domain.shared.untrusted import strip_controls
from releasebot.edge.kube import Answered, Permission, get_raw, kube_call
from releasebot.edge.kubelist import DEFAULT_LIST_BUDGET, ListBounds, list_objects
from releasebot.edge.redact import redact
from releasebot.edge.retry import RetryPolicy, Sleep, real_sleep
from releasebot.fleet.kubernetes import DEFAULT_POLICY

DEFAULT_NAMESPACE = "gpu-operator"
"""Where the GPU Operator's Helm chart is installed by its documentation."""
DEFAULT_PAGE_SIZE = 100
"""Pods per list request: one page holds every Pod of a normal node."""
DEFAULT_MAX_PODS = 500
"""More Pods of one namespace on one node than this is a runaway answer: the kubelet runs
at most 110 Pods per node by default (``maxPods``), 250 on the largest configurations."""
DEFAULT_MAX_LOG_BYTES = 256 * 1024
"""The most of a log read (sent as ``limitBytes``): forty lines of 6 KiB each."""
_LIST_PODS = Permission("list", "pods")
_GET_LOG = Permission("get", "pods/log")
_NO_LOG = frozenset({400, 404})
"""No such Pod or container, no previous run, not started yet: no log, not a failure."""
_ELLIPSIS = "…"


class KubernetesPodSource:
    """Reads the GPU Operator's Pods in ``namespace`` and their logs through ``client``."""

    def __init__(
        self,
        client: Client,
        *,
        namespace: str = DEFAULT_NAMESPACE,
        page_size: int = DEFAULT_PAGE_SIZE,
        max_pods: int = DEFAULT_MAX_PODS,
        max_log_bytes: int = DEFAULT_MAX_LOG_BYTES,
        policy: RetryPolicy = DEFAULT_POLICY,
        sleep: Sleep = real_sleep,
        budget: timedelta = DEFAULT_LIST_BUDGET,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        if page_size < 1 or max_pods < 1 or max_log_bytes < 1:
            raise ValueError("page_size, max_pods and max_log_bytes must be at least 1")
        if not namespace:
            raise ValueError("namespace must not be empty")
        self._client = client
        self._namespace = namespace
        self._page_size = page_size
        self._bounds = ListBounds(max_pods, page_size, budget)
        self._max_log_bytes = max_log_bytes
        self._policy = policy
        self._sleep = sleep
        self._monotonic = monotonic

    def close(self) -> None:
        self._client.close()

    # -- pods ----------------------------------------------------------------------------

    def pods_on(self, node: str) -> tuple[OperatorPod, ...]:
        if not node:  # spec.nodeName= would select every Pod not scheduled yet
            return ()
        listing = list_objects(
            self._client,
            f"api/v1/namespaces/{quote(self._namespace, safe='')}/pods",
            kind="Pod",
            plural="pods",
            what=f"list pods in namespace {self._namespace}",
            bounds=self._bounds,
            params={"fieldSelector": f"spec.nodeName={_field_value(node)}"},
            permission=_LIST_PODS,
            policy=self._policy,
            sleep=self._sleep,
            monotonic=self._monotonic,
        )
        if listing.cut is not None:
            raise ClusterRejectedError(
                f"{self._where(node)}: {listing.cut}, a runaway answer; the listing is refused"
            )
        if listing.skipped:
            # A Pod that cannot be read may be the driver's: nothing is proven or refused
            # from a listing that does not show every Pod on the node.
            raise ClusterUnavailableError(
                f"{self._where(node)}: {listing.skipped[0].removesuffix(': skipped')} "
                f"({listing.skipped_count} in all): "
                "the node's pods are not all known; the proof waits for a readable listing"
            )
        parsed = (parse_pod(item) for _, item in listing.items)
        return tuple(pod for pod in parsed if pod is not None)

    def _where(self, node: str) -> str:
        return f"kubernetes list pods in namespace {self._namespace} on node {node[:253]}"

    # -- logs ----------------------------------------------------------------------------

    def log_tail(self, namespace: str, pod: str, container: str | None, *, previous: bool) -> str:
        if not (is_node_name(namespace) and is_node_name(pod)):
            # Names the API server sent: "..", "x?y" or "a/b" would address something else.
            return ""
        params = {"tailLines": str(LOG_TAIL_LINES), "limitBytes": str(self._max_log_bytes)}
        if container:
            params["container"] = container
        if previous:
            params["previous"] = "true"
        path = f"api/v1/namespaces/{quote(namespace, safe='')}/pods/{quote(pod, safe='')}/log"
        try:
            answer = kube_call(
                f"read the log of pod {namespace}/{pod}",
                lambda: get_raw(self._client, path, params, max_bytes=self._max_log_bytes),
                policy=self._policy,
                sleep=self._sleep,
                answers=_NO_LOG,
                permission=_GET_LOG,
            )
        except Answered:
            return ""
        return shown_tail(answer.body)


def shown_tail(data: bytes, limit: int = LOG_TAIL_CHARS) -> str:
    """Log bytes as they may be kept and shown: UTF-8 (replacing what is not), each line
    without escape sequences or control characters and without trailing blanks,
    credentials masked, and at most ``limit`` characters of the end (``…`` first when cut)."""
    text = data.decode("utf-8", errors="replace")
    lines = [strip_controls(line).rstrip() for line in text.splitlines()]
    masked = redact("\n".join(lines)).strip("\n")
    if len(masked) <= limit:
        return masked
    return _ELLIPSIS + masked[-(limit - len(_ELLIPSIS)) :]


def _field_value(value: str) -> str:
    """``value`` escaped for a field selector (as client-go's ``fields.EscapeValue``)."""
    return value.replace("\\", "\\\\").replace(",", "\\,").replace("=", "\\=")
