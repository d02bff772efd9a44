"""``KubernetesFleetSource``: the fleet and the GPU Operator's objects, read through lightkube.

Nodes are listed in pages (``limit``/``continue``, ``page_size`` per call) with the
configured label selector, and every Node is handed to ``fleet.parse_node`` as the raw JSON
the API server sent (lightkube's generic resources are plain dicts), so one odd node is an
``IgnoredNode`` with a reason, not a failed listing. A 410 ``Expired`` continue token (etcd
compacted the revision mid-listing) restarts the listing once from the top. ClusterPolicies
and NVIDIADrivers are listed the same way; a 404 on their list means the CRD is not
installed and is answered as ``CrdAbsent``.

Errors leave in the project's tree, with one line a person can act on: 403 is
``ClusterForbiddenError`` naming the verb and resource to grant; 401, other 4xx and
answers that are not what was asked are ``ClusterRejectedError``; connection failures,
timeouts, 429 and 5xx are retried a bounded number of times (``sleep`` injectable) and then
``ClusterUnavailableError``. No lightkube, httpx2 or msgspec exception escapes.

Deliberately not here: watching (a cycle lists; a watch would need a long-lived
connection and resync logic for what one list per cycle gives), patching the reboot-gate
annotation (a write; it belongs with the gate), and any decision about what the nodes need.
"""

from __future__ import annotations

import enum
import json
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, TypeVar

import httpx2
import msgspec
from lightkube import Client, operators
from lightkube.core.client import LabelValue
from lightkube.core.exceptions import ApiError
from lightkube.generic_resource import create_global_resource

from releasebot.domain.errors import (
    ClusterForbiddenError,
    ClusterRejectedError,
    ClusterUnavailableError,
)
from releasebot.domain.fleet import DEFAULT_GATE_ANNOTATION, parse_node
from releasebot.domain.operator import (
    CrdAbsent,
    DriverSource,
    parse_cluster_policy,
    parse_nvidia_driver,
)
from releasebot.domain.ports import NodeListing
from releasebot.domain.selectors import LabelSelector, Operator
from releasebot.domain.untrusted import clean

T = TypeVar("T")

DEFAULT_PAGE_SIZE = 500
"""Nodes per list call: kubectl's default chunk; 5,000 nodes take 10 calls."""
DEFAULT_MAX_NODES = 50_000
"""Twice the largest cluster Kubernetes supports (5,000 nodes is its tested limit; some
run 15,000+): more than this means a runaway listing, not a fleet."""
DEFAULT_ATTEMPTS = 3
DEFAULT_BACKOFF = timedelta(seconds=1)
"""First pause between tries, doubled each time (1 s, 2 s)."""
MESSAGE_MAX_CHARS = 200
RETRY_AFTER_MAX = timedelta(minutes=5)

# The raw shapes: lightkube hands these out as dicts, which is what parse_node reads.
_Node = create_global_resource("", "v1", "Node", "nodes")
_ClusterPolicy = create_global_resource("nvidia.com", "v1", "ClusterPolicy", "clusterpolicies")
_NvidiaDriver = create_global_resource("nvidia.com", "v1alpha1", "NVIDIADriver", "nvidiadrivers")


@dataclass(frozen=True)
class _Kind:
    resource: Any
    plural: str
    group: str

    @property
    def qualified(self) -> str:
        return f"{self.plural}.{self.group}" if self.group else self.plural


NODES = _Kind(_Node, "nodes", "")
CLUSTER_POLICIES = _Kind(_ClusterPolicy, "clusterpolicies", "nvidia.com")
NVIDIA_DRIVERS = _Kind(_NvidiaDriver, "nvidiadrivers", "nvidia.com")


class _Expired(Exception):
    """410 Gone: the continue token is too old; the listing must start again."""


class _Absent(Exception):
    """404 on a list: the API server serves no such resource."""


class KubernetesFleetSource:
    """Reads Nodes (through ``selector``) and the GPU Operator's objects with ``client``."""

    def __init__(
        self,
        client: Client,
        *,
        selector: LabelSelector | None = None,
        page_size: int = DEFAULT_PAGE_SIZE,
        max_nodes: int = DEFAULT_MAX_NODES,
        gate_annotation: str = DEFAULT_GATE_ANNOTATION,
        attempts: int = DEFAULT_ATTEMPTS,
        backoff: timedelta = DEFAULT_BACKOFF,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        if page_size < 1 or max_nodes < 1 or attempts < 1:
            raise ValueError("page_size, max_nodes and attempts must be at least 1")
        self._client = client
        self._labels = _lightkube_labels(selector or LabelSelector())
        self._page_size = page_size
        self._max_nodes = max_nodes
        self._gate_annotation = gate_annotation
        self._attempts = attempts
        self._backoff = backoff
        self._sleep = sleep

    def close(self) -> None:
        self._client.close()

    def nodes(self) -> NodeListing:
        try:
            items, restarts = self._list(NODES, self._labels)
        except _Absent as error:  # every API server serves nodes: this is not one
            raise ClusterRejectedError(f"kubernetes list nodes: {error}") from error
        gate = self._gate_annotation
        return NodeListing(
            tuple(parse_node(item, gate_annotation=gate) for item in items), restarts
        )

    def cluster_policies(self) -> tuple[DriverSource, ...] | CrdAbsent:
        return self._operator_objects(CLUSTER_POLICIES, parse_cluster_policy)

    def nvidia_drivers(self) -> tuple[DriverSource, ...] | CrdAbsent:
        return self._operator_objects(NVIDIA_DRIVERS, parse_nvidia_driver)

    def _operator_objects(
        self, kind: _Kind, parse: Callable[[object], DriverSource]
    ) -> tuple[DriverSource, ...] | CrdAbsent:
        try:
            items, _ = self._list(kind, None)
        except _Absent:
            return CrdAbsent(kind.qualified)
        return tuple(parse(item) for item in items)

    # -- listing -------------------------------------------------------------------------

    def _list(self, kind: _Kind, labels: dict[str, LabelValue] | None) -> tuple[list[Any], int]:
        """Every object of ``kind``, all pages; restarted once after an expired token."""
        for restarts in range(2):
            try:
                return self._call(kind, lambda: list(self._pages(kind, labels))), restarts
            except _Expired:
                continue
        raise ClusterUnavailableError(
            f"kubernetes list {kind.qualified}: the continue token expired twice in a row "
            "(the listing is slower than etcd compaction); retrying next cycle"
        )

    def _pages(self, kind: _Kind, labels: dict[str, LabelValue] | None) -> Iterator[Any]:
        listed = self._client.list(kind.resource, chunk_size=self._page_size, labels=labels)
        for count, item in enumerate(listed, start=1):
            if count > self._max_nodes:
                raise ClusterRejectedError(
                    f"kubernetes list {kind.qualified}: more than {self._max_nodes} objects; "
                    "narrow the node selector"
                )
            yield item

    def _call(self, kind: _Kind, operation: Callable[[], T]) -> T:
        """``operation()`` with bounded retries; lightkube and httpx2 errors translated."""
        for attempt in range(1, self._attempts + 1):
            try:
                return operation()
            except _LIBRARY_ERRORS as error:
                failure = _classify(kind, error)
                if failure is None:
                    raise  # a KeyError or ValueError of our own making: a bug, not the cluster
                if failure.outcome is _Outcome.FORBIDDEN:
                    raise ClusterForbiddenError(
                        "list", kind.plural, kind.group, failure.text
                    ) from error
                if failure.outcome is _Outcome.ABSENT:
                    raise _Absent(failure.text) from error
                if failure.outcome is _Outcome.EXPIRED:
                    raise _Expired(failure.text) from error
                if failure.outcome is _Outcome.REJECTED:
                    raise ClusterRejectedError(failure.text) from error
                if attempt >= self._attempts:
                    retry = {"retry_after": failure.retry_after} if failure.retry_after else {}
                    raise ClusterUnavailableError(failure.text, **retry) from error
            self._sleep((self._backoff * 2 ** (attempt - 1)).total_seconds())
        raise AssertionError("unreachable")  # pragma: no cover - the loop returns or raises


_LIBRARY_ERRORS = (httpx2.HTTPError, httpx2.StreamError, msgspec.MsgspecError, ValueError, KeyError)
"""What lightkube lets escape: httpx2 errors (``ApiError`` is one), msgspec decoding errors,
and KeyError/JSONDecodeError when an error answer lacks or lies about its Content-Type."""


class _Outcome(enum.Enum):
    TEMPORARY = "temporary"
    REJECTED = "rejected"
    FORBIDDEN = "forbidden"
    ABSENT = "absent"
    EXPIRED = "expired"


@dataclass(frozen=True)
class _Failure:
    outcome: _Outcome
    text: str
    retry_after: timedelta | None = None


def _classify(kind: _Kind, error: Exception) -> _Failure | None:
    """What a failed list means; ``None`` when the error is not the API server's doing."""
    what = f"kubernetes list {kind.qualified}"
    response = _response_of(error)
    if response is not None:
        return _from_status(kind, what, response, _status_message(error, response))
    if isinstance(error, httpx2.TimeoutException):
        return _Failure(_Outcome.TEMPORARY, f"{what}: timed out ({type(error).__name__})")
    if isinstance(error, httpx2.HTTPError | httpx2.StreamError):
        text = f"{what}: API server unreachable ({type(error).__name__}: {error})"
        return _Failure(_Outcome.TEMPORARY, _line(text))
    if isinstance(error, msgspec.MsgspecError | json.JSONDecodeError):
        text = f"{what}: unreadable answer ({type(error).__name__}: {error})"
        return _Failure(_Outcome.TEMPORARY, _line(text))
    return None


def _from_status(kind: _Kind, what: str, response: httpx2.Response, message: str) -> _Failure:
    code = response.status_code
    detail = _line(f"{code} {message}")
    if code == 403:
        return _Failure(_Outcome.FORBIDDEN, detail)
    if code == 404:
        return _Failure(
            _Outcome.ABSENT, f"the API server does not serve {kind.qualified} ({detail})"
        )
    if code == 410:
        return _Failure(_Outcome.EXPIRED, detail)
    if code == 401:
        text = (
            f"{what}: {detail}: the API server refused releasebot's credentials "
            "(service account token or kubeconfig)"
        )
        return _Failure(_Outcome.REJECTED, text)
    if code >= 500 or code in (408, 429):
        return _Failure(_Outcome.TEMPORARY, f"{what}: {detail}", _retry_after(response))
    return _Failure(_Outcome.REJECTED, f"{what}: {detail}")


def _response_of(error: BaseException) -> httpx2.Response | None:
    """The error answer behind ``error``: lightkube's ``ApiError``, a raw status error, or
    the one lightkube was handling when reading its body failed (no or wrong Content-Type)."""
    current: BaseException | None = error
    for _ in range(6):
        if isinstance(current, ApiError | httpx2.HTTPStatusError):
            return current.response
        if current is None:
            return None
        current = current.__context__
    return None


def _status_message(error: BaseException, response: httpx2.Response) -> str:
    if isinstance(error, ApiError) and error.status.message:
        return f"{error.status.reason or response.reason_phrase}: {error.status.message}"
    try:
        body = response.text
    except (httpx2.HTTPError, httpx2.StreamError, UnicodeDecodeError):
        body = ""
    return f"{response.reason_phrase}: {body}"


def _retry_after(response: httpx2.Response) -> timedelta | None:
    value = response.headers.get("Retry-After", "")
    return min(timedelta(seconds=int(value)), RETRY_AFTER_MAX) if value.isdigit() else None


def _line(text: str) -> str:
    return clean(text, limit=MESSAGE_MAX_CHARS) or ""


def _lightkube_labels(selector: LabelSelector) -> dict[str, LabelValue] | None:
    """The selector in lightkube's form (one requirement per key: ``LabelSelector.parse``
    refuses a key given twice)."""
    if not selector.requirements:
        return None
    labels: dict[str, LabelValue] = {}
    for requirement in selector.requirements:
        key, values = requirement.key, requirement.values
        if requirement.operator is Operator.EQUALS:
            labels[key] = operators.equal(values[0])
        elif requirement.operator is Operator.NOT_EQUALS:
            labels[key] = operators.not_equal(values[0])
        elif requirement.operator is Operator.IN:
            labels[key] = operators.in_(values)
        elif requirement.operator is Operator.NOT_IN:
            labels[key] = operators.not_in(values)
        elif requirement.operator is Operator.EXISTS:
            labels[key] = operators.exists()
        else:
            labels[key] = operators.not_exists()
    return labels
