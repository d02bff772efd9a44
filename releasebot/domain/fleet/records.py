"""Fleet history: what each node ran, and when, as the store keeps it.

Every listing of the fleet is recorded. A node seen in the same state as last time
(version, kernel, arch, GPU, pending version, ignored reason) only moves that record's
``last_seen_at``; a node seen in a new state gets a new record, so the history reads "node
gpu-7 ran 4593.2.4 from Monday to Wednesday, then 4593.2.5, and was pending 4628.0.0 since
Thursday". Nodes that leave the cluster keep their records: ``last_seen_at`` says when.

``diff_fleet`` is the one rule both stores apply (as ``targets.diff_targets`` is for
targets), so the SQL and in-memory stores cannot drift apart. Nothing here reads a store.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

from releasebot.domain.fleet.nodes import NAME_MAX_CHARS, FleetNode, ParsedNode

KERNEL_MAX_CHARS = 80
ARCH_MAX_CHARS = 32
REASON_MAX_CHARS = 1000


@dataclass(frozen=True)
class FleetObservation:
    """One node's state in one listing: the fields whose change starts a new record."""

    name: str
    version: str | None
    kernel: str | None
    arch: str | None
    gpu: bool
    pending_version: str | None
    ignored_reason: str | None

    @classmethod
    def of(cls, node: ParsedNode) -> FleetObservation:
        if isinstance(node, FleetNode):
            return cls(
                name=node.name[:NAME_MAX_CHARS],
                version=node.version.text,
                kernel=_cut(node.kernel, KERNEL_MAX_CHARS),
                arch=node.arch.value,
                gpu=node.is_gpu,
                pending_version=None if node.pending_version is None else node.pending_version.text,
                ignored_reason=None,
            )
        return cls(
            name=node.name[:NAME_MAX_CHARS],
            version=None,
            kernel=_cut(node.kernel, KERNEL_MAX_CHARS),
            arch=_cut(node.arch, ARCH_MAX_CHARS),
            gpu=node.is_gpu,
            pending_version=None,
            ignored_reason=_cut(node.reason, REASON_MAX_CHARS),
        )


@dataclass(frozen=True)
class FleetRecord:
    """A stretch of time during which a node was seen in one state."""

    state: FleetObservation
    first_seen_at: datetime
    last_seen_at: datetime

    @property
    def name(self) -> str:
        return self.state.name


@dataclass(frozen=True)
class FleetDiff:
    inserts: tuple[FleetObservation, ...]
    """Nodes never seen, or seen in a new state: a new record each, first = last = now."""
    touched: tuple[str, ...]
    """Names whose latest record is unchanged: only its ``last_seen_at`` moves to now."""


def diff_fleet(latest: Mapping[str, FleetObservation], nodes: Sequence[ParsedNode]) -> FleetDiff:
    """What recording ``nodes`` writes, given each name's ``latest`` recorded state.

    A name listed twice (a real API server never does) counts once, its last entry wins.
    """
    observed = {observation.name: observation for observation in map(FleetObservation.of, nodes)}
    inserts = tuple(obs for name, obs in observed.items() if latest.get(name) != obs)
    touched = tuple(name for name, obs in observed.items() if latest.get(name) == obs)
    return FleetDiff(inserts, touched)


def _cut(text: str | None, limit: int) -> str | None:
    if text is None or len(text) <= limit:
        return text
    return text[: limit - 1] + "…"
