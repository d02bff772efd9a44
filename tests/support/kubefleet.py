"""Nodes, the GPU Operator's objects and RBAC refusals for the fake Kubernetes API.

``tests/kubeapi.py`` routes these requests here; this module holds the objects and answers
as the real API server does, as plain (status, body) pairs (no HTTP in here):

- Nodes (cluster-scoped ``v1/nodes``): list with ``labelSelector`` and real pagination.
  ``limit`` returns at most that many items in name order (etcd key order) with an opaque
  ``metadata.continue`` token and ``remainingItemCount``; a token that does not decode is
  400 ``BadRequest``; a token issued before ``expire_continue_tokens()`` is 410 ``Expired``
  with the API server's own message (etcd compacted the revision). GET by name; PATCH with
  a JSON merge patch or a strategic merge patch (the same for label and annotation maps:
  ``null`` removes a key), ``metadata.resourceVersion`` in the patch checked (409
  ``Conflict``), bumping the resourceVersion.
- ClusterPolicies (``nvidia.com/v1``) and NVIDIADrivers (``nvidia.com/v1alpha1``), listed
  and read only once ``install_gpu_operator_crds()`` ran; before, every request answers 404
  ``NotFound`` "the server could not find the requested resource", as a real server does
  for a group/version/resource nobody registered.
- RBAC: ``forbid(verb, plural, group)`` makes matching requests answer 403 ``Forbidden``
  with the message kube-apiserver writes (``nodes is forbidden: User "system:
  serviceaccount:releasebot:releasebot" cannot list resource "nodes" in API group "" at
  the cluster scope``).

- Hostile listings on demand: ``add_raw_node_items(None, 7, ...)`` puts items that are
  not Node objects (``null``, a number...) at the end of the first page of every Node
  listing, as a broken or hostile API server (or a proxy in front of it) could send;
  Nodes whose names carry control characters are stored and patched under their exact
  name.

Deliberately different from a real server: pages are cut from the live list (a real one
serves every page from the first page's snapshot), there is no watch on these resources,
and nothing validates node objects.
"""

from __future__ import annotations

import base64
import binascii
import copy
import json
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

USER = "system:serviceaccount:releasebot:releasebot"
NODES = ("", "v1", "nodes")
CLUSTER_POLICIES = ("nvidia.com", "v1", "clusterpolicies")
NVIDIA_DRIVERS = ("nvidia.com", "v1alpha1", "nvidiadrivers")
_KINDS = {NODES: "Node", CLUSTER_POLICIES: "ClusterPolicy", NVIDIA_DRIVERS: "NVIDIADriver"}
_EXPIRED = (
    "The provided continue parameter is too old to display a consistent list result. You "
    "can start a new list without the continue parameter, or use the continue token in "
    "this response to retrieve the remainder of the results. Continuing with the provided "
    "token results in an inconsistent list - objects that were created, modified, or "
    "deleted between the time the first chunk was returned and now may show up in the list."
)
_MERGE_PATCHES = ("application/merge-patch+json", "application/strategic-merge-patch+json")

Answer = tuple[int, dict[str, Any]]
Selector = Callable[[dict[str, str]], bool]


def status(code: int, reason: str, message: str, **details: Any) -> Answer:
    """A ``Status`` body as the API server writes it."""
    body: dict[str, Any] = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }
    if details:
        body["details"] = details
    return code, body


@dataclass(frozen=True)
class Refusal:
    verb: str
    group: str
    plural: str


def verb_of(method: str, name: str | None, params: Mapping[str, str]) -> str:
    """The RBAC verb of a request, as the API server's authorizer names it."""
    if method == "GET":
        if name is not None:
            return "get"
        return "watch" if params.get("watch") in ("true", "1") else "list"
    plain = {"POST": "create", "PUT": "update", "PATCH": "patch"}
    if method in plain:
        return plain[method]
    return "delete" if name is not None else "deletecollection"


class FakeFleet:
    """The objects and RBAC rules behind the fake's fleet resources. Thread-safe: tests set
    nodes from their own thread while the server thread answers."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._objects: dict[tuple[str, str, str], dict[str, dict[str, Any]]] = {
            resource: {} for resource in _KINDS
        }
        self._crds = False
        self._forbidden: list[Refusal] = []
        self._revision = 1000
        self._token_epoch = 0
        self._expire_after: int | None = None
        self._pages = 0
        self._raw_node_items: list[object] = []

    # -- controls for tests --------------------------------------------------------------

    def add_nodes(self, *nodes: Mapping[str, Any]) -> None:
        for node in nodes:
            self._store(NODES, node)

    def add_raw_node_items(self, *items: object) -> None:
        """Items that are not Node objects, served at the end of the first page."""
        with self._lock:
            self._raw_node_items += [copy.deepcopy(item) for item in items]

    def node(self, name: str) -> dict[str, Any]:
        with self._lock:
            return copy.deepcopy(self._objects[NODES][name])

    def node_names(self) -> list[str]:
        with self._lock:
            return sorted(self._objects[NODES])

    def remove_node(self, name: str) -> None:
        with self._lock:
            del self._objects[NODES][name]

    def install_gpu_operator_crds(
        self,
        cluster_policies: Sequence[Mapping[str, Any]] = (),
        nvidia_drivers: Sequence[Mapping[str, Any]] = (),
    ) -> None:
        with self._lock:
            self._crds = True
        for policy in cluster_policies:
            self._store(CLUSTER_POLICIES, policy)
        for driver in nvidia_drivers:
            self._store(NVIDIA_DRIVERS, driver)

    def forbid(self, verb: str, plural: str, group: str = "") -> None:
        with self._lock:
            self._forbidden.append(Refusal(verb, group, plural))

    def allow_all(self) -> None:
        with self._lock:
            self._forbidden.clear()

    def expire_continue_tokens(self, *, after_pages: int = 0) -> None:
        """etcd compacts: every continue token handed out so far is now too old; with
        ``after_pages``, that happens once that many more list pages have been served."""
        with self._lock:
            if after_pages > 0:
                self._expire_after = after_pages
            else:
                self._token_epoch += 1

    @property
    def pages_served(self) -> int:
        with self._lock:
            return self._pages

    # -- answering -----------------------------------------------------------------------

    def serves(self, group: str, version: str, plural: str) -> bool:
        return (group, version, plural) in _KINDS or group == "nvidia.com"

    def refusal(
        self, verb: str, group: str, plural: str, namespace: str | None, name: str | None = None
    ) -> Answer | None:
        """The 403 for a request RBAC refuses (``plural`` may be ``pods/log``), else ``None``."""
        with self._lock:
            refused = any(
                rule.verb == verb and rule.group == group and rule.plural == plural
                for rule in self._forbidden
            )
        if not refused:
            return None
        base = plural.split("/", 1)[0]
        qualified = f"{base}.{group}" if group else base
        named = f'{qualified} "{name}"' if name else qualified
        where = f'in the namespace "{namespace}"' if namespace else "at the cluster scope"
        message = (
            f'{named} is forbidden: User "{USER}" cannot {verb} resource "{plural}" in '
            f'API group "{group}" {where}'
        )
        details = {"group": group, "kind": base, **({"name": name} if name else {})}
        return status(403, "Forbidden", message, **details)

    def answer(
        self,
        method: str,
        resource: tuple[str, str, str],
        name: str | None,
        params: Mapping[str, str],
        body: object,
        content_type: str,
        selector: Selector,
    ) -> Answer:
        with self._lock:
            if resource not in _KINDS or (resource != NODES and not self._crds):
                return status(404, "NotFound", "the server could not find the requested resource")
            objects = self._objects[resource]
            if method == "GET" and name is None:
                return self._list(resource, objects, params, selector)
            if name is None or name not in objects:
                return self._not_found(resource, name or "")
            if method == "GET":
                return 200, copy.deepcopy(objects[name])
            if method == "PATCH" and resource == NODES:
                return self._patch(objects, name, body, content_type)
            return status(405, "MethodNotAllowed", f"the fake does not serve {method} here")

    def _list(
        self,
        resource: tuple[str, str, str],
        objects: dict[str, dict[str, Any]],
        params: Mapping[str, str],
        selector: Selector,
    ) -> Answer:
        start = ""
        token = params.get("continue")
        if token:
            decoded = _decode_token(token)
            if decoded is None:
                return status(400, "BadRequest", f"continue key is not valid: {token[:40]}")
            epoch, start = decoded
            if epoch < self._token_epoch:
                return status(410, "Expired", _EXPIRED)
        selected = [
            objects[key]
            for key in sorted(objects)
            if key > start and selector(_labels(objects[key]))
        ]
        limit = int(params["limit"]) if params.get("limit", "").isdigit() else 0
        page = selected[:limit] if limit > 0 else selected
        group, version, _ = resource
        metadata: dict[str, Any] = {"resourceVersion": str(self._revision)}
        if len(page) < len(selected):
            last = page[-1]["metadata"]["name"]
            metadata["continue"] = _encode_token(self._token_epoch, last)
            metadata["remainingItemCount"] = len(selected) - len(page)
        self._pages += 1
        if self._expire_after is not None:
            self._expire_after -= 1
            if self._expire_after <= 0:  # compaction: the token just handed out is too old
                self._expire_after = None
                self._token_epoch += 1
        items: list[object] = copy.deepcopy(page)
        if resource == NODES and not start:
            items += copy.deepcopy(self._raw_node_items)
        return 200, {
            "kind": f"{_KINDS[resource]}List",
            "apiVersion": f"{group}/{version}" if group else version,
            "metadata": metadata,
            "items": items,
        }

    def _patch(
        self, objects: dict[str, dict[str, Any]], name: str, body: object, content_type: str
    ) -> Answer:
        if content_type.split(";")[0].strip() not in _MERGE_PATCHES:
            return status(415, "UnsupportedMediaType", f"the fake cannot apply {content_type}")
        if not isinstance(body, dict):
            return status(400, "BadRequest", "the body of the request was in an unknown format")
        current = objects[name]
        wanted = body.get("metadata", {}).get("resourceVersion")
        if wanted is not None and wanted != current["metadata"]["resourceVersion"]:
            return status(
                409,
                "Conflict",
                f'Operation cannot be fulfilled on nodes "{name}": the object has been '
                "modified; please apply your changes to the latest version and try again",
            )
        patched = _merge(copy.deepcopy(current), body)
        self._revision += 1
        patched["metadata"]["resourceVersion"] = str(self._revision)
        patched["metadata"]["name"] = name
        objects[name] = patched
        return 200, copy.deepcopy(patched)

    def _store(self, resource: tuple[str, str, str], raw: Mapping[str, Any]) -> None:
        obj = copy.deepcopy(dict(raw))
        with self._lock:
            self._revision += 1
            metadata = obj.setdefault("metadata", {})
            metadata["resourceVersion"] = str(self._revision)
            metadata.setdefault("uid", f"00000000-0000-4000-9000-{self._revision:012d}")
            self._objects[resource][metadata["name"]] = obj

    def _not_found(self, resource: tuple[str, str, str], name: str) -> Answer:
        group, _, plural = resource
        qualified = f"{plural}.{group}" if group else plural
        return status(
            404, "NotFound", f'{qualified} "{name}" not found', name=name, group=group, kind=plural
        )


def _labels(obj: Mapping[str, Any]) -> dict[str, str]:
    labels = obj.get("metadata", {}).get("labels")
    return labels if isinstance(labels, dict) else {}


def _encode_token(epoch: int, start: str) -> str:
    raw = json.dumps({"v": "meta.k8s.io/v1", "rv": epoch, "start": start}).encode()
    return base64.urlsafe_b64encode(raw).decode()


def _decode_token(token: str) -> tuple[int, str] | None:
    try:
        data = json.loads(base64.urlsafe_b64decode(token.encode()))
    except (binascii.Error, ValueError):
        return None
    if not isinstance(data, dict) or not isinstance(data.get("rv"), int):
        return None
    start = data.get("start")
    return (data["rv"], start) if isinstance(start, str) else None


def _merge(target: dict[str, Any], patch: Mapping[str, Any]) -> dict[str, Any]:
    """RFC 7386 JSON merge patch."""
    for key, value in patch.items():
        if value is None:
            target.pop(key, None)
        elif isinstance(value, Mapping) and isinstance(target.get(key), dict):
            target[key] = _merge(target[key], value)
        else:
            target[key] = copy.deepcopy(value)
    return target
