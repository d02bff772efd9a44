"""``KubernetesNodeAnnotator``: releasebot's annotations on Nodes, written with JSON merge patches.

Opening sends ``{"metadata": {"resourceVersion": <as listed>, "annotations": {<gate>:
"true", <version annotation>: <pending version>}}}``: the API server applies it only if
the Node has not changed since releasebot read it (else 409 ``Conflict``), so the gate is
never opened for a pending version that changed in between (FLUO's agent rewrites
``new-version`` when update_engine installs a newer release while the node waits).
Closing sends both annotations as ``null`` (removed), unconditionally: removing is always
safe. A Node that is gone (404) needs nothing. The after-reboot proof sends
``{"metadata": {"annotations": {<proof annotation>: "true"}}}``, unconditionally: FLUO
deleted the annotation when the node came back and only waits for it, and the proof is of
the node as it runs now, whatever else changed on the object. Calls and their errors go
through ``edge/kube.py``: a 403 names the ``patch`` permission on ``nodes`` to grant. A
name that is not a valid Node name is never sent (``ClusterRejectedError``): it would
address another object, or none, and a decision is only for the node it was made for.

Deliberately not here: deciding (``domain.fleet.gate``), reading Nodes (``kubernetes.py``).
"""

from __future__ import annotations

from typing import Any

from lightkube import Client
from lightkube.types import PatchType

from releasebot.domain.fleet.nodes import (
    DEFAULT_GATE_ANNOTATION,
    DEFAULT_PROOF_ANNOTATION,
    GATE_VERSION_ANNOTATION,
    is_node_name,
)
from releasebot.domain.shared.errors import ClusterRejectedError
from releasebot.domain.shared.untrusted import escaped
from releasebot.edge.kube import Answered, Permission, kube_call
from releasebot.edge.retry import RetryPolicy, Sleep, real_sleep
from releasebot.fleet.kubernetes import DEFAULT_POLICY, NODES

_GONE = 404
_CHANGED = 409
_PATCH_NODES = Permission("patch", "nodes")


class KubernetesNodeAnnotator:
    """Opens and closes the reboot gate, and sets the after-reboot proof, on Nodes through
    ``client``."""

    def __init__(
        self,
        client: Client,
        *,
        annotation: str = DEFAULT_GATE_ANNOTATION,
        proof_annotation: str = DEFAULT_PROOF_ANNOTATION,
        policy: RetryPolicy = DEFAULT_POLICY,
        sleep: Sleep = real_sleep,
    ) -> None:
        self._client = client
        self._annotation = annotation
        self._proof_annotation = proof_annotation
        self._policy = policy
        self._sleep = sleep

    def open_gate(self, node: str, version: str, resource_version: str | None) -> bool:
        metadata: dict[str, Any] = {
            "annotations": {self._annotation: "true", GATE_VERSION_ANNOTATION: version}
        }
        if resource_version is not None:
            metadata["resourceVersion"] = resource_version
        try:
            self._patch("open the reboot gate of", node, {"metadata": metadata})
        except Answered:  # changed since it was listed, or gone: decided again next cycle
            return False
        return True

    def close_gate(self, node: str) -> None:
        removal = {"annotations": {self._annotation: None, GATE_VERSION_ANNOTATION: None}}
        try:
            self._patch("close the reboot gate of", node, {"metadata": removal})
        except Answered:
            return  # gone: nothing to close

    def set_proof(self, node: str, resource_version: str | None = None) -> bool:
        proven: dict[str, Any] = {"annotations": {self._proof_annotation: "true"}}
        if resource_version is not None:
            proven["resourceVersion"] = resource_version
        try:
            self._patch("set the driver proof of", node, {"metadata": proven})
        except Answered:  # changed since it was listed (409), or gone (404)
            return False
        return True

    def close(self) -> None:
        self._client.close()

    def _patch(self, action: str, node: str, patch: dict[str, Any]) -> None:
        if not is_node_name(node):  # never a request for a name no Node can have
            raise ClusterRejectedError(
                f"kubernetes {action} node {escaped(node)}: not a valid Node name; nothing "
                "is written to it"
            )
        kube_call(
            f"{action} node {node}",
            lambda: self._client.patch(NODES.resource, node, patch, patch_type=PatchType.MERGE),
            policy=self._policy,
            sleep=self._sleep,
            answers={_GONE, _CHANGED},
            permission=_PATCH_NODES,
        )
