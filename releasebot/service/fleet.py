"""Use case: the fleet in a cycle: read it, plan for it, and after the launches, judge it.

``snapshot`` lists the Nodes and the GPU Operator's objects through the ``FleetSource``
and records the listing in the store's fleet history. A listing that fails (RBAC, the API
server unreachable) is one line and an alert, never a failed cycle: without Nodes the plan
is the channel policy's, without the operator's objects each node gets the selected
drivers. CRDs that are not installed are no failure (the GPU Operator is optional). A Node
listing that is read but not whole (an item skipped, a bound hit) is planned for as far as
it goes; each of its problems is one line, and the snapshot says it is ``unsure`` (and
``cut``), which ``gate_hold`` turns into a reason for the gate to open nothing new.

``plan`` hands the snapshot to ``domain.fleet.plan``. ``settle`` runs after the cycle's
launches, on the targets as they are then: the coverage (``domain.fleet.coverage``), its alerts
(``FleetAlerts``) and, when the gate is on, the reboot gate (``domain.fleet.gate``, written
through the ``NodeAnnotator``). It is skipped when the registry could not be read, since
every state might then be stale: the gate never opens on doubt.

Deliberately not here: polling the nodes' channel feeds (``service.plan`` does, with the
other feeds), the metrics (``runtime.metrics`` reads ``FleetOutcome``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from releasebot.domain.fleet.coverage import Coverage, fleet_coverage
from releasebot.domain.fleet.gate import GateDecision, GateMove, decide_gates
from releasebot.domain.fleet.nodes import ParsedNode
from releasebot.domain.fleet.operator import DriverMode, OperatorView, driver_mode
from releasebot.domain.fleet.plan import FleetPlan, plan_fleet
from releasebot.domain.fleet.proof import ProofState
from releasebot.domain.ports import FleetSource, NodeAnnotator, StateStore
from releasebot.domain.shared.errors import ClusterForbiddenError, ReleasebotError
from releasebot.domain.shared.versions import Arch, FlatcarVersion
from releasebot.domain.targets.models import DriverRelease, FlatcarRelease, Target, TargetRecord
from releasebot.domain.targets.policy import Policy
from releasebot.service.fleet_alerts import FleetAlerts
from releasebot.service.proof import ProofOutcome, ProofService

log = logging.getLogger("releasebot.fleet")


@dataclass(frozen=True)
class FleetSnapshot:
    """One listing of the fleet."""

    nodes: tuple[ParsedNode, ...] | None
    """``None``: the Nodes could not be listed (``problems`` says why)."""
    operator: OperatorView | None
    """``None``: the GPU Operator's objects could not be read."""
    problems: tuple[str, ...] = ()
    """One line per listing that failed, or CRD not installed, or Node skipped."""
    unsure: str | None = None
    """Why ``nodes`` may not be every selected Node (``NodeListing.unsure``): retention
    deletes nothing while it is set."""
    cut: bool = False
    """The Node listing stopped at a bound: the reboot gate opens nothing new."""


@dataclass
class FleetOutcome:
    """What ``settle`` found and did, for the report, the metrics and the CLI."""

    coverage: Coverage
    gates: tuple[GateDecision, ...] = ()
    """Every gate decided this cycle (moves and holds)."""
    applied: list[GateDecision] = field(default_factory=list)
    """The moves written to the Nodes."""
    errors: list[str] = field(default_factory=list)
    proof: ProofOutcome | None = None
    """The after-reboot proof's step, when ``fleet.proof`` is on."""


class FleetService:
    """Reads the fleet, plans for it and judges it; one per process, like the planner."""

    def __init__(
        self,
        *,
        source: FleetSource,
        store: StateStore,
        clock: Callable[[], datetime],
        repository: str,
        annotator: NodeAnnotator | None = None,
        alerts: bool = False,
        dry_run: bool = False,
        prover: ProofService | None = None,
        requires_proof: bool = False,
    ) -> None:
        self._prover = prover
        self._requires_proof = requires_proof and prover is not None
        self._source = source
        self._store = store
        self._clock = clock
        self._repository = repository
        self._annotator = annotator
        self._alerts = FleetAlerts(store, clock) if alerts and not dry_run else None
        self._dry_run = dry_run

    @property
    def gate(self) -> bool:
        return self._annotator is not None

    def snapshot(self) -> FleetSnapshot:
        """List the fleet and record it; failures are lines (and an alert), not errors."""
        problems: list[str] = []
        failed: list[str] = []
        nodes: tuple[ParsedNode, ...] | None = None
        listing = None
        try:
            listing = self._source.nodes()
            nodes = listing.nodes
        except ReleasebotError as error:
            failed.append(f"fleet: cannot list Nodes, planning by the channel policy: {error}")
        if listing is not None:
            for line in listing.problems:
                log.warning("fleet: %s", line)
                problems.append(f"fleet: {line}")
        operator: OperatorView | None = None
        try:
            operator = OperatorView.of(
                self._source.cluster_policies(), self._source.nvidia_drivers()
            )
        except ReleasebotError as error:
            failed.append(f"fleet: cannot read the GPU Operator's objects: {error}")
        if operator is not None and operator.cluster_policies is None:
            problems.append(
                "fleet: the GPU Operator's CRDs are not installed: planning for the "
                "selected drivers"
            )
        for line in failed:
            log.warning("%s", line)
        if nodes is not None:
            self._store.record_fleet(nodes, self._clock())
        if self._alerts is not None:
            if failed:
                self._alerts.listing_failed("; ".join(failed))
            else:
                self._alerts.listing_worked()
        return FleetSnapshot(
            nodes,
            operator,
            (*failed, *problems),
            None if listing is None else listing.unsure,
            listing is not None and listing.cut,
        )

    def plan(
        self,
        policy: Policy,
        channel_targets: Sequence[Target],
        snapshot: FleetSnapshot,
        *,
        releases: Mapping[FlatcarVersion, FlatcarRelease],
        drivers: Sequence[DriverRelease],
        same_as: FleetPlan | None = None,
    ) -> FleetPlan | None:
        """The fleet's plan from ``snapshot``; ``None`` when the Nodes could not be listed.
        ``same_as``: as ``plan_fleet`` takes it (the same targets when nothing changed)."""
        if snapshot.nodes is None:
            return None
        return plan_fleet(
            policy,
            channel_targets,
            snapshot.nodes,
            snapshot.operator,
            repository=self._repository,
            releases=releases,
            drivers=drivers,
            same_as=same_as,
        )

    def settle(
        self, plan: FleetPlan, snapshot: FleetSnapshot, records: Mapping[str, TargetRecord]
    ) -> FleetOutcome:
        """Coverage from the targets as they stand, its alerts, and the reboot gate."""
        proof = None
        if self._prover is not None and snapshot.nodes is not None:
            complete = snapshot.unsure is None
            proof = self._prover.step(plan, snapshot.nodes, records, complete=complete)
            records = {**records, **proof.changed}
        outcome = FleetOutcome(fleet_coverage(plan, records), proof=proof)
        if self._alerts is not None:
            self._alerts.exposures(outcome.coverage.exposures, complete=snapshot.unsure is None)
        if self._annotator is not None and snapshot.nodes is not None:
            proving: dict[tuple[str, Arch], str] = {}
            if proof is not None:
                proving = {
                    (record.tag, record.arch): record.node
                    for record in proof.records
                    if record.state is ProofState.PROVING
                    and record.tag is not None
                    and record.arch is not None
                }
            outcome.gates = decide_gates(
                snapshot.nodes,
                outcome.coverage,
                operator_known=snapshot.operator is not None,
                requires_proof=self._requires_proof,
                proving=proving,
                hold=gate_hold(snapshot),
            )
            if not self._dry_run:
                self._apply(self._annotator, outcome)
        return outcome

    def _apply(self, annotator: NodeAnnotator, outcome: FleetOutcome) -> None:
        for decision in outcome.gates:
            try:
                if decision.move is GateMove.OPEN:
                    if not annotator.open_gate(
                        decision.node, decision.version, decision.resource_version
                    ):
                        log.info("reboot gate of %s: the node changed; next cycle", decision.node)
                        continue
                elif decision.move is GateMove.CLOSE:
                    annotator.close_gate(decision.node)
                else:
                    continue
            except ClusterForbiddenError as error:  # the same for every node: say it once
                outcome.errors.append(f"reboot gate: {error}")
                log.warning("reboot gate: %s", error)
                return
            except ReleasebotError as error:
                outcome.errors.append(f"reboot gate of {decision.node}: {error}")
                log.warning("reboot gate of %s: %s", decision.node, error)
                continue
            outcome.applied.append(decision)
            log.info(
                "reboot gate of %s %s: %s",
                decision.node,
                "opened" if decision.move is GateMove.OPEN else "closed",
                decision.why,
                extra={"node": decision.node, "gate": decision.move.value},
            )


def gate_hold(snapshot: FleetSnapshot) -> str | None:
    """Why no reboot gate may open this cycle however ready a node looks; ``None``: none.

    A listing cut short by a bound may miss any node, and pages that never end are no
    listing to trust. A Node that could not be read (skipped) only matters to a node it
    can change the image of: with a ClusterPolicy every GPU node may get the OS tag of ANY
    GPU node (``domain.fleet.operator``), the unread one included; with NVIDIADrivers a node's
    image is decided by its own labels, so the nodes read keep their gates."""
    if snapshot.cut:
        return "the Node listing was cut short: no reboot gate opens until it is read whole"
    view = snapshot.operator
    if snapshot.unsure is not None and (
        view is None or driver_mode(view) is DriverMode.CLUSTER_POLICY
    ):
        return (
            "a Node could not be read, and the ClusterPolicy gives every GPU node the OS tag "
            "of any of them: no reboot gate opens until every Node is read"
        )
    return None
