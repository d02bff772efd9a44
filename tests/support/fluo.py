"""The Flatcar update operator (FLUO), played over the fake Kubernetes API, one node at a time.

What ``FluoPlayer.step`` does is what FLUO's operator and agent do (flatcar-linux-update-
operator ``pkg/operator/operator.go``, ``doc/before-after-reboot-checks.md``), started
with ``--before-reboot-annotations`` and ``--after-reboot-annotations``:

- at most one node reboots at a time: while a node is labelled ``before-reboot`` or
  ``after-reboot`` no other node starts;
- a node whose agent says ``reboot-needed`` is labelled ``before-reboot=true``; once every
  before-reboot annotation is exactly ``"true"`` the label and those annotations go, the
  node reboots (``reboot``), comes back on its ``new-version`` with a new ``bootID`` (the
  agent resets ``new-version`` to ``0.0.0``, NFD relabels ``VERSION_ID`` and the kernel),
  the after-reboot annotations are deleted and the node labelled ``after-reboot=true``;
- once every after-reboot annotation is exactly ``"true"`` the label goes and the next node
  may start; until then the node counts as rebooting (the agent keeps it cordoned).

The test puts the GPU Operator's pods on a rebooted node itself (``on_reboot``). Nothing
here decides for releasebot: the player only reads and writes what FLUO reads and writes.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

from releasebot.domain.fleet.nodes import (
    FLUO_AFTER_REBOOT,
    FLUO_BEFORE_REBOOT,
    FLUO_NEW_VERSION,
    FLUO_PREFIX,
    FLUO_REBOOT_NEEDED,
    FLUO_STATUS,
    GATE_VERSION_ANNOTATION,
    NFD_KERNEL,
    NFD_VERSION_ID,
)
from tests.support.fleetnodes import KERNELS
from tests.support.kubefleet import FakeFleet


class FluoPlayer:
    """FLUO's operator and agent over ``fleet``, waiting on ``before`` and ``after``."""

    def __init__(
        self,
        fleet: FakeFleet,
        *,
        before: tuple[str, ...],
        after: tuple[str, ...],
        on_reboot: Callable[[str], None] = lambda _node: None,
    ) -> None:
        self._fleet = fleet
        self._before = before
        self._after = after
        self._on_reboot = on_reboot
        self.rebooted: list[str] = []
        """Nodes rebooted so far, in order."""

    def step(self) -> str:
        """One reconcile of FLUO's operator; says what it did (for assertion messages)."""
        nodes = {name: self._fleet.node(name) for name in sorted(self._fleet.node_names())}
        for name, node in nodes.items():
            if _label(node, FLUO_AFTER_REBOOT):
                if all(_annotation(node, key) == "true" for key in self._after):
                    self._change(name, lambda n: _labels(n).pop(FLUO_AFTER_REBOOT, None))
                    return f"{name} done"
                return f"waiting after the reboot of {name}"
        for name, node in nodes.items():
            if _label(node, FLUO_BEFORE_REBOOT):
                if all(_annotation(node, key) == "true" for key in self._before):
                    self._reboot(name)
                    return f"rebooted {name}"
                return f"waiting before the reboot of {name}"
        for name, node in nodes.items():
            if _annotation(node, FLUO_REBOOT_NEEDED) == "true":
                self._change(name, lambda n: _labels(n).__setitem__(FLUO_BEFORE_REBOOT, "true"))
                return f"wants to reboot {name}"
        return "idle"

    def _reboot(self, name: str) -> None:
        def reboot(node: dict[str, Any]) -> None:
            labels, annotations = _labels(node), _annotations(node)
            version = annotations[FLUO_NEW_VERSION]
            labels.pop(FLUO_BEFORE_REBOOT, None)
            for key in (*self._before, GATE_VERSION_ANNOTATION, *self._after):
                annotations.pop(key, None)
            labels[NFD_VERSION_ID] = version
            labels[FLUO_PREFIX + "version"] = version
            kernel = KERNELS.get(version, "6.12.102") + "-flatcar"
            labels[NFD_KERNEL] = kernel
            labels[FLUO_AFTER_REBOOT] = "true"
            annotations[FLUO_NEW_VERSION] = "0.0.0"
            annotations[FLUO_REBOOT_NEEDED] = "false"
            annotations[FLUO_STATUS] = "UPDATE_STATUS_IDLE"
            info = node["status"]["nodeInfo"]
            info["kernelVersion"] = kernel
            info["osImage"] = f"Flatcar Container Linux by Kinvolk {version} (Oklo)"
            info["bootID"] = f"boot-after-{len(self.rebooted) + 1}"

        self._change(name, reboot)
        self.rebooted.append(name)
        self._on_reboot(name)

    def _change(self, name: str, change: Callable[[dict[str, Any]], object]) -> None:
        node = copy.deepcopy(self._fleet.node(name))
        change(node)
        self._fleet.add_nodes(node)


def _labels(node: dict[str, Any]) -> dict[str, str]:
    labels: dict[str, str] = node["metadata"].setdefault("labels", {})
    return labels


def _annotations(node: dict[str, Any]) -> dict[str, str]:
    annotations: dict[str, str] = node["metadata"].setdefault("annotations", {})
    return annotations


def _label(node: dict[str, Any], key: str) -> bool:
    return _labels(node).get(key) == "true"


def _annotation(node: dict[str, Any], key: str) -> str | None:
    return _annotations(node).get(key)
