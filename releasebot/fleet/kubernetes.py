"""``KubernetesFleetSource``: the fleet and the GPU Operator's objects, read from the API server.

Nodes are listed with the configured label selector through ``edge.kubelist`` (pages of
``page_size``, raw JSON, at most ``max_nodes`` objects, ``ceil(max_nodes / page_size) + 2``
pages and ``budget`` of wall-clock time; a 410 ``Expired`` continue token restarts the
listing once). Every Node is handed to ``fleet.parse_nodes`` as the JSON the API server
sent, so one odd node is an ``IgnoredNode`` with a reason, two Nodes shown alike are told
apart, and an item that is not an object at all (``null``) is skipped and named in one
line: never a failed listing. What releasebot does not see makes the listing *unsure*
(``NodeListing.unsure``: retention deletes nothing) and a bound that cuts it short makes
it ``cut`` too (the reboot gate opens nothing new); each is one line in
``NodeListing.problems`` saying what to do. ClusterPolicies and NVIDIADrivers are listed
the same way; a 404 on their list means the CRD is not installed and is answered as
``CrdAbsent``; a skipped item or a bound hit there is an error (the object that decides a
node's driver may be the one not seen), as if they could not be listed.

Calls go through ``edge/kube.py`` (one client, one error translation for every adapter):
403 is ``ClusterForbiddenError`` naming the verb and resource to grant; 401, other 4xx and
answers that are not what was asked are ``ClusterRejectedError``; connection failures,
timeouts, 429 and 5xx are retried by the ``RetryPolicy`` (``sleep`` injectable) and then
``ClusterUnavailableError``. No lightkube, httpx2 or msgspec exception escapes.

Deliberately not here: watching (a cycle lists; a watch would need a long-lived
connection and resync logic for what one list per cycle gives), patching the reboot-gate
annotation (a write; it belongs with the gate), and any decision about what the nodes need.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from lightkube import Client
from lightkube.generic_resource import create_global_resource

from releasebot.domain.fleet.nodes import (
    DEFAULT_GATE_ANNOTATION,
    DEFAULT_PROOF_ANNOTATION,
    LIST_PAGE_SIZE,
    parse_nodes,
)
from releasebot.domain.fleet.operator import (
    CrdAbsent,
    DriverSource,
    parse_cluster_policy,
    parse_nvidia_driver,
)
from releasebot.domain.fleet.selectors import LabelSelector
from releasebot.domain.ports import NodeListing
from releasebot.domain.shared.errors import ClusterRejectedError, ClusterUnavailableError
from releasebot.edge.kube import Answered, Permission
from releasebot.edge.kubelist import DEFAULT_LIST_BUDGET, ListBounds, RawListing, list_objects
from releasebot.edge.retry import RetryPolicy, Sleep, real_sleep

DEFAULT_PAGE_SIZE = LIST_PAGE_SIZE
DEFAULT_MAX_NODES = 50_000
"""Twice the largest cluster Kubernetes supports (5,000 nodes is its tested limit; some
run 15,000+): more than this means a runaway listing, not a fleet."""
DEFAULT_POLICY = RetryPolicy()
"""Two retries, 1 s then 2 s: a blip is ridden out, an outage is the next cycle's."""

# The node annotator patches through lightkube's generic resource; lists are read raw.
_Node = create_global_resource("", "v1", "Node", "nodes")
_ClusterPolicy = create_global_resource("nvidia.com", "v1", "ClusterPolicy", "clusterpolicies")
_NvidiaDriver = create_global_resource("nvidia.com", "v1alpha1", "NVIDIADriver", "nvidiadrivers")


@dataclass(frozen=True)
class _Kind:
    resource: Any
    kind: str
    plural: str
    group: str
    version: str

    @property
    def qualified(self) -> str:
        return f"{self.plural}.{self.group}" if self.group else self.plural

    @property
    def listing(self) -> Permission:
        return Permission("list", self.plural, self.group)

    @property
    def path(self) -> str:
        if not self.group:
            return f"api/{self.version}/{self.plural}"
        return f"apis/{self.group}/{self.version}/{self.plural}"


NODES = _Kind(_Node, "Node", "nodes", "", "v1")
CLUSTER_POLICIES = _Kind(_ClusterPolicy, "ClusterPolicy", "clusterpolicies", "nvidia.com", "v1")
NVIDIA_DRIVERS = _Kind(_NvidiaDriver, "NVIDIADriver", "nvidiadrivers", "nvidia.com", "v1alpha1")


_ABSENT = 404
"""On a list: the API server serves no such resource (its CRD is not installed)."""


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
        budget: timedelta = DEFAULT_LIST_BUDGET,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        if page_size < 1 or max_nodes < 1:
            raise ValueError("page_size and max_nodes must be at least 1")
        self._client = client
        self._selector = str(selector or LabelSelector())
        self._bounds = ListBounds(max_nodes, page_size, budget)
        self._gate_annotation = gate_annotation
        self._proof_annotation = proof_annotation
        self._policy = policy
        self._sleep = sleep
        self._monotonic = monotonic

    def close(self) -> None:
        self._client.close()

    def nodes(self) -> NodeListing:
        params = {"labelSelector": self._selector} if self._selector else {}
        try:
            listing = self._list(NODES, params)
        except Answered as answer:  # every API server serves nodes: this is not one
            raise ClusterRejectedError(
                f"kubernetes list nodes: the API server does not serve nodes "
                f"({answer.failure.detail})"
            ) from answer
        nodes, names = parse_nodes(
            listing.items,
            gate_annotation=self._gate_annotation,
            proof_annotation=self._proof_annotation,
        )
        problems = [*listing.skipped, *names]
        unsure = None
        if listing.cut is not None:
            unsure = (
                f"the Node listing was cut short: {listing.cut}; the API server (or a proxy "
                "in front of it) keeps answering with more pages: check it, or narrow "
                "fleet.node_selector"
            )
        elif listing.skipped_count:
            unsure = (
                f"{listing.skipped_count} item(s) of the Node list could not be read, so "
                "not every node is known: find the odd objects with kubectl get nodes -o json"
            )
        if unsure is not None:
            problems.append(unsure)
        return NodeListing(
            nodes, listing.restarts, tuple(problems), unsure, cut=listing.cut is not None
        )

    def cluster_policies(self) -> tuple[DriverSource, ...] | CrdAbsent:
        return self._operator_objects(CLUSTER_POLICIES, parse_cluster_policy)

    def nvidia_drivers(self) -> tuple[DriverSource, ...] | CrdAbsent:
        return self._operator_objects(NVIDIA_DRIVERS, parse_nvidia_driver)

    def _operator_objects(
        self, kind: _Kind, parse: Callable[[object], DriverSource]
    ) -> tuple[DriverSource, ...] | CrdAbsent:
        try:
            listing = self._list(kind, {})
        except Answered:
            return CrdAbsent(kind.qualified)
        # A skipped or missing object may be the one that decides a node's driver: the
        # GPU Operator's view is then unknown, as when it cannot be listed at all.
        if listing.cut is not None:
            raise ClusterRejectedError(
                f"kubernetes list {kind.qualified}: {listing.cut}, a runaway answer; the "
                "listing is refused"
            )
        if listing.skipped:
            raise ClusterUnavailableError(
                f"kubernetes list {kind.qualified}: {listing.skipped[0].removesuffix(': skipped')} "
                f"({listing.skipped_count} in all): the {kind.kind} objects are not all known"
            )
        return tuple(parse(item) for _, item in listing.items)

    # -- listing -------------------------------------------------------------------------

    def _list(self, kind: _Kind, params: dict[str, str]) -> RawListing:
        """Every object of ``kind`` within the bounds; ``Answered`` for a 404 (the resource
        type is not served)."""
        return list_objects(
            self._client,
            kind.path,
            kind=kind.kind,
            plural=kind.qualified,
            what=f"list {kind.qualified}",
            bounds=self._bounds,
            params=params,
            permission=kind.listing,
            answers={_ABSENT},
            policy=self._policy,
            sleep=self._sleep,
            monotonic=self._monotonic,
        )
