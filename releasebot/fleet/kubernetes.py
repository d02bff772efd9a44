"""``KubernetesFleetSource``: the fleet and the GPU Operator's objects, read through lightkube.

Nodes are listed in pages (``limit``/``continue``, ``page_size`` per call) with the
configured label selector, and every Node is handed to ``fleet.parse_node`` as the raw JSON
the API server sent (lightkube's generic resources are plain dicts), so one odd node is an
``IgnoredNode`` with a reason, not a failed listing. A 410 ``Expired`` continue token (etcd
compacted the revision mid-listing) restarts the listing once from the top. ClusterPolicies
and NVIDIADrivers are listed the same way; a 404 on their list means the CRD is not
installed and is answered as ``CrdAbsent``.

Calls go through ``edge/kube.py`` (one client, one error translation for every adapter):
403 is ``ClusterForbiddenError`` naming the verb and resource to grant; 401, other 4xx and
answers that are not what was asked are ``ClusterRejectedError``; connection failures,
timeouts, 429 and 5xx are retried by the ``RetryPolicy`` (``sleep`` injectable) and then
``ClusterUnavailableError``. No lightkube, httpx2 or msgspec exception escapes, nor the
``TypeError`` lightkube's generic decoder raises on a ``null`` item (an unreadable answer).

Deliberately not here: watching (a cycle lists; a watch would need a long-lived
connection and resync logic for what one list per cycle gives), patching the reboot-gate
annotation (a write; it belongs with the gate), and any decision about what the nodes need.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from lightkube import Client, operators
from lightkube.core.client import LabelValue
from lightkube.generic_resource import create_global_resource

from releasebot.domain.errors import ClusterRejectedError, ClusterUnavailableError
from releasebot.domain.fleet import (
    DEFAULT_GATE_ANNOTATION,
    DEFAULT_PROOF_ANNOTATION,
    LIST_PAGE_SIZE,
    parse_node,
)
from releasebot.domain.operator import (
    CrdAbsent,
    DriverSource,
    parse_cluster_policy,
    parse_nvidia_driver,
)
from releasebot.domain.ports import NodeListing
from releasebot.domain.selectors import LabelSelector, Operator
from releasebot.edge.kube import (
    LIBRARY_ERRORS,
    Answered,
    Permission,
    UnreadableAnswerError,
    kube_call,
)
from releasebot.edge.retry import RetryPolicy, Sleep, real_sleep

DEFAULT_PAGE_SIZE = LIST_PAGE_SIZE
DEFAULT_MAX_NODES = 50_000
"""Twice the largest cluster Kubernetes supports (5,000 nodes is its tested limit; some
run 15,000+): more than this means a runaway listing, not a fleet."""
DEFAULT_POLICY = RetryPolicy()
"""Two retries, 1 s then 2 s: a blip is ridden out, an outage is the next cycle's."""

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

    @property
    def listing(self) -> Permission:
        return Permission("list", self.plural, self.group)


NODES = _Kind(_Node, "nodes", "")
CLUSTER_POLICIES = _Kind(_ClusterPolicy, "clusterpolicies", "nvidia.com")
NVIDIA_DRIVERS = _Kind(_NvidiaDriver, "nvidiadrivers", "nvidia.com")


_ABSENT = 404
"""On a list: the API server serves no such resource (its CRD is not installed)."""
_EXPIRED = 410
"""Gone: the continue token is too old (etcd compacted the revision); start again."""


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
        proof_annotation: str = DEFAULT_PROOF_ANNOTATION,
        policy: RetryPolicy = DEFAULT_POLICY,
        sleep: Sleep = real_sleep,
    ) -> None:
        if page_size < 1 or max_nodes < 1:
            raise ValueError("page_size and max_nodes must be at least 1")
        self._client = client
        self._labels = _lightkube_labels(selector or LabelSelector())
        self._page_size = page_size
        self._max_nodes = max_nodes
        self._gate_annotation = gate_annotation
        self._proof_annotation = proof_annotation
        self._policy = policy
        self._sleep = sleep

    def close(self) -> None:
        self._client.close()

    def nodes(self) -> NodeListing:
        try:
            items, restarts = self._list(NODES, self._labels)
        except Answered as answer:  # every API server serves nodes: this is not one
            raise ClusterRejectedError(
                f"kubernetes list nodes: the API server does not serve nodes "
                f"({answer.failure.detail})"
            ) from answer
        gate, proof = self._gate_annotation, self._proof_annotation
        return NodeListing(
            tuple(parse_node(item, gate_annotation=gate, proof_annotation=proof) for item in items),
            restarts,
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
        except Answered:
            return CrdAbsent(kind.qualified)
        return tuple(parse(item) for item in items)

    # -- listing -------------------------------------------------------------------------

    def _list(self, kind: _Kind, labels: dict[str, LabelValue] | None) -> tuple[list[Any], int]:
        """Every object of ``kind``, all pages; restarted once after an expired token.

        Raises ``Answered`` for a 404 (the resource type is not served)."""
        for restarts in range(2):
            try:
                return self._call(kind, lambda: list(self._pages(kind, labels))), restarts
            except Answered as answer:
                if answer.failure.code != _EXPIRED:
                    raise
        raise ClusterUnavailableError(
            f"kubernetes list {kind.qualified}: the continue token expired twice in a row "
            "(the listing is slower than etcd compaction); retrying next cycle"
        )

    def _pages(self, kind: _Kind, labels: dict[str, LabelValue] | None) -> Iterator[Any]:
        listed = self._client.list(kind.resource, chunk_size=self._page_size, labels=labels)
        try:
            for count, item in enumerate(listed, start=1):
                if count > self._max_nodes:
                    raise ClusterRejectedError(
                        f"kubernetes list {kind.qualified}: more than {self._max_nodes} "
                        "objects; narrow the node selector"
                    )
                yield item
        except (TypeError, ValueError) as error:
            if isinstance(error, LIBRARY_ERRORS):
                raise  # msgspec's and json's own: edge.kube classifies them
            # lightkube makes each item a dict with dict(item): a null, a number or a
            # string among the items raises TypeError or ValueError out of its decoder.
            raise UnreadableAnswerError(200, "an item of the list is not an object") from error

    def _call(self, kind: _Kind, operation: Callable[[], list[Any]]) -> list[Any]:
        return kube_call(
            f"list {kind.qualified}",
            operation,
            policy=self._policy,
            sleep=self._sleep,
            answers={_ABSENT, _EXPIRED},
            permission=kind.listing,
        )


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
