"""The reboot gate: when releasebot lets the Flatcar update operator reboot a node.

FLUO, started with ``--before-reboot-annotations=releasebot.io/driver-image-ready``, labels
a node ``before-reboot=true`` when it wants to reboot it and waits until that annotation
is ``"true"``; then it deletes the label and the annotation and reboots the node
(flatcar-linux-update-operator ``pkg/operator/operator.go``, ``checkReboot``). releasebot
answers for each node ``decide_gates`` says:

- open (annotation ``"true"``, and ``GATE_VERSION_ANNOTATION`` = the pending version) once
  every image the node needs for the version it reboots into is verified, for every driver
  it needs; a node without GPU labels needs none and is opened at once;
- leave it closed, and say why, while an image is building, missing or failed, while the
  pending version is unknown (no ``new-version``), in no feed, or pulled from a repository
  that is not releasebot's, and while the GPU Operator's objects cannot be read: the gate
  never opens on doubt;
- close it (remove both annotations) when it no longer holds: the pending version changed
  since it was opened, an image it vouched for is gone, or FLUO is not waiting any more.
  A gate annotation without the version annotation was set by a person: it is theirs, and
  left alone (FLUO deletes it when it reboots the node).

Deliberately not here: writing the annotations (the ``NodeAnnotator`` adapter) and the
order builds run in (``lifecycle.launch_order`` puts these images first).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from releasebot.domain.fleet.coverage import Coverage, NodeCoverage, Verdict
from releasebot.domain.fleet.nodes import FleetNode, ParsedNode
from releasebot.domain.shared.versions import Arch

NO_VERSION = "-"
"""The version annotation of a node opened without a known pending version (no GPU)."""


class GateMove(enum.StrEnum):
    OPEN = "open"
    CLOSE = "close"


@dataclass(frozen=True)
class GateDecision:
    """What to do with one node's gate; ``move`` ``None``: leave it as it is."""

    node: str
    move: GateMove | None
    why: str
    version: str = NO_VERSION
    """What the version annotation says after opening."""
    resource_version: str | None = None
    """The node as it was read: an open is sent on this condition (409 if it changed)."""


def decide_gates(
    nodes: Sequence[ParsedNode],
    coverage: Coverage,
    *,
    operator_known: bool,
    requires_proof: bool = False,
    proving: Mapping[tuple[str, Arch], str] | None = None,
    hold: str | None = None,
) -> tuple[GateDecision, ...]:
    """A decision for every Flatcar node FLUO waits on or whose gate is set, by name.

    With ``requires_proof`` an image no node proved yet lets one node through, the canary:
    ``proving`` names, per tag and arch, the node that is proving it now (after its reboot); a node
    whose gate is open for an unproven image is the canary too. Every other node waits.

    ``hold`` says why the fleet view is too unsure to open any gate (the Node listing was
    cut short...): no gate opens, and a gate releasebot opened is left as it is unless it
    no longer holds. A node releasebot cannot address safely (``FleetNode.address``: a
    name that is not a valid Node name, or one several listed Nodes share) gets no move at
    all: a decision is only ever written to the node it was made for."""
    covered = {node.name: node for node in coverage.nodes}
    canaries = dict(proving or {})
    if requires_proof:
        for node in nodes:
            entry = covered.get(node.name)
            if isinstance(node, FleetNode) and node.gate == "true" and entry is not None:
                for image in entry.images:
                    if image.pending and image.tag and not image.proven:
                        canaries.setdefault((image.tag, node.arch), node.name)
    decisions = []
    for node in sorted(nodes, key=lambda node: node.name):
        if not isinstance(node, FleetNode):
            continue  # not Flatcar or not understood: FLUO does not manage it, or doubt
        is_set = node.gate == "true"
        if not node.fluo.before_reboot and not is_set and node.gate_version is None:
            continue
        version = NO_VERSION if node.pending_version is None else node.pending_version.text
        if node.address != node.name:
            why = (
                "its listed name is not a valid Node name, or other listed Nodes share it: "
                "releasebot writes nothing to it"
            )
            decisions.append(GateDecision(node.name, None, why, version))
            continue
        ready, why = _ready(node, covered.get(node.name), operator_known)
        if ready and requires_proof:
            ready, why = _canary(node, covered.get(node.name), canaries, why)
        if ready and hold is not None:
            decisions.append(GateDecision(node.name, None, hold, version))
        elif ready and not (is_set and node.gate_version == version):
            decisions.append(
                GateDecision(node.name, GateMove.OPEN, why, version, node.resource_version)
            )
        elif not ready and node.gate_version is not None:  # releasebot's own: it goes
            decisions.append(GateDecision(node.name, GateMove.CLOSE, why))
        else:
            decisions.append(GateDecision(node.name, None, why, version))
    return tuple(decisions)


def _ready(node: FleetNode, covered: NodeCoverage | None, operator_known: bool) -> tuple[bool, str]:
    """Whether the node may reboot now, and why (one line)."""
    if not node.fluo.before_reboot:
        return False, "FLUO is not waiting to reboot it"
    if not node.is_gpu:
        return True, "no GPU labels: the node needs no driver image"
    pending = node.pending_version
    if pending is None:
        return False, "FLUO's new-version annotation does not say which version it reboots into"
    if covered is None or covered.pending_version != pending:
        return False, f"no coverage known for Flatcar {pending}"
    if not operator_known:
        return False, "the GPU Operator's objects could not be read: its driver is unknown"
    images = [image for image in covered.images if image.pending]
    if covered.pending_verdict is Verdict.FOREIGN:
        return False, "it pulls from a repository that is not releasebot's"
    if not images:
        return False, f"no driver is known for Flatcar {pending}"
    waiting = [image for image in images if image.verdict is not Verdict.VERIFIED]
    if waiting:
        waiting.sort(key=lambda image: image.tag is not None)  # a doubt about the pool first
        first = waiting[0]
        what = first.tag or f"Flatcar {pending}"
        more = f" (+{len(waiting) - 1} more)" if len(waiting) > 1 else ""
        why = first.problem if first.tag is None and first.problem else first.verdict
        return False, f"{what}: {why}{more}"
    tags = ", ".join(image.tag or "" for image in images)
    return True, f"verified for Flatcar {pending}: {tags}"


def _canary(
    node: FleetNode,
    covered: NodeCoverage | None,
    canaries: dict[tuple[str, Arch], str],
    why: str,
) -> tuple[bool, str]:
    """With ``gate_requires_proof``: an unproven image goes to one node first."""
    if not node.is_gpu or covered is None:
        return True, why
    unproven = [i for i in covered.images if i.pending and i.tag and not i.proven]
    for image in unproven:
        assert image.tag is not None
        canary = canaries.get((image.tag, node.arch))
        if canary is not None and canary != node.name:
            return False, f"{image.tag}: waiting for {canary} to prove it first"
    for image in unproven:
        assert image.tag is not None
        canaries[(image.tag, node.arch)] = node.name
    if unproven:
        return True, why + " (the canary: no node proved it yet)"
    return True, why + ", proven"
