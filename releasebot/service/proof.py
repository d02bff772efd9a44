"""Use case: the after-reboot proof, one step per cycle (``fleet.proof``).

For every Flatcar node FLUO wants to reboot (``before-reboot``) it notes what the node has
(``proof.arm``: its GPUs, its boot); for every node FLUO brought back (``after-reboot``) it
reads the GPU Operator's pods on that node (one list call per node: FLUO reboots one node
at a time) and asks ``proof.decide_proof``; then it applies the decision: the proof
annotation through the ``NodeAnnotator``, the record, the image's ``proven`` mark or
``refused`` state and the Slack event, in one store transaction. A refusal's driver log is
read once, bounded and masked by the adapter. Records of nodes no longer listed go.

Nothing is released on doubt: pods that cannot be read (RBAC, the API server down) are a
line and a wait. Deliberately not here: the rules (``domain/fleet/proof.py``), the before-reboot
gate (``domain/fleet/gate.py``; it reads ``canaries`` from here), reading Nodes.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime

from releasebot.domain.fleet.nodes import FleetNode, ParsedNode
from releasebot.domain.fleet.plan import FleetPlan, NodeNeeds
from releasebot.domain.fleet.proof import (
    Expected,
    OperatorPod,
    ProofDecision,
    ProofRecord,
    ProofRules,
    ProofState,
    Verdict,
    arm,
    decide_proof,
)
from releasebot.domain.ports import NodeAnnotator, PodSource, StateStore
from releasebot.domain.shared.errors import ReleasebotError
from releasebot.domain.targets.builds import BuildState
from releasebot.domain.targets.events import Event, proven_event, refused_event
from releasebot.domain.targets.models import TargetRecord, TargetState

log = logging.getLogger("releasebot.proof")


@dataclass
class ProofOutcome:
    """What one step found and did, for the report and the metrics."""

    decisions: list[tuple[str, ProofDecision]] = field(default_factory=list)
    changed: dict[str, TargetRecord] = field(default_factory=dict)
    """Targets proven or refused this step, by tag."""
    records: list[ProofRecord] = field(default_factory=list)
    """Every node's record after this step."""
    errors: list[str] = field(default_factory=list)
    calls: int = 0
    """API calls made (pod lists, log reads, annotation patches)."""


class ProofService:
    """Proves images on the nodes FLUO reboots; one per process."""

    def __init__(
        self,
        *,
        pods: PodSource,
        annotator: NodeAnnotator | None,
        store: StateStore,
        clock: Callable[[], datetime],
        rules: ProofRules,
        dry_run: bool = False,
    ) -> None:
        self._pods = pods
        self._annotator = annotator
        self._store = store
        self._clock = clock
        self._rules = rules
        self._dry_run = dry_run

    def step(
        self,
        plan: FleetPlan,
        nodes: Sequence[ParsedNode],
        records: Mapping[str, TargetRecord],
        *,
        complete: bool = True,
    ) -> ProofOutcome:
        """One cycle's worth of proof for ``nodes`` (as listed) and the targets as stored.

        A node's record goes when the node is no longer listed, but only after a
        ``complete`` listing: one with items skipped or cut short by a bound says nothing
        about the nodes it does not show."""
        now = self._clock()
        outcome = ProofOutcome()
        stored = {record.node: record for record in self._store.proofs()}
        listed = {node.name for node in nodes}
        entries = {entry.name: entry for entry in plan.nodes}
        removed = sorted(name for name in stored if name not in listed) if complete else []
        for name in removed:
            if stored[name].state in (ProofState.ARMED, ProofState.PROVING):
                log.info("proof of %s: the node is gone; its record goes", name)
        saved: list[ProofRecord] = []
        events: list[Event] = []
        changed: dict[str, TargetRecord] = {}
        kept = {name: record for name, record in stored.items() if name not in removed}
        for node in nodes:
            if not isinstance(node, FleetNode):
                continue
            record = kept.get(node.name)
            if node.address != node.name:
                continue  # not addressable (the listing said why): nothing read or written
            if node.fluo.after_reboot:
                later = self._after_reboot(
                    node, record, entries.get(node.name), records, outcome, plan.operator_known
                )
                if later is None:
                    continue
                decision, refusal_events, target = later
                outcome.decisions.append((node.name, decision))
                events += refusal_events
                if target is not None:
                    changed[target.tag] = target
                if decision.record != record:
                    saved.append(decision.record)
                kept[node.name] = decision.record
            elif record is not None and record.state in (ProofState.PROVING, ProofState.REFUSED):
                # FLUO went on without releasebot's proof: someone set the annotation.
                why = "FLUO went on without releasebot's proof (the annotation was set by hand)"
                log.info("proof of %s: %s", node.name, why)
                gone = replace(record, state=ProofState.RELEASED, reason=why, updated_at=now)
                saved.append(gone)
                kept[node.name] = gone
            elif node.fluo.before_reboot or node.pending_version is not None:
                # Noted from the moment an update waits for its reboot, not only when FLUO
                # asks for it: without a before-reboot annotation FLUO does not wait.
                expected = _expected(entries.get(node.name), records, pending=True)
                armed = arm(node, record, expected, now)
                if record is None or replace(record, updated_at=now) != armed:
                    saved.append(armed)
                kept[node.name] = armed
        outcome.records = [kept[name] for name in sorted(kept)]
        outcome.changed = changed
        if not self._dry_run and (saved or removed or changed or events):
            self._store.save_proofs(
                proofs=saved, removed=removed, targets=list(changed.values()), events=events
            )
        return outcome

    def _after_reboot(
        self,
        node: FleetNode,
        record: ProofRecord | None,
        entry: NodeNeeds | None,
        records: Mapping[str, TargetRecord],
        outcome: ProofOutcome,
        operator_known: bool = True,
    ) -> tuple[ProofDecision, list[Event], TargetRecord | None] | None:
        now = self._clock()
        done = (ProofState.PROVEN, ProofState.RELEASED, ProofState.NOT_JUDGED)
        if node.proof == "true" and (record is None or record.state in done):
            return None  # proven (or its owner's): nothing to do until the next reboot
        expected = _expected(entry, records, pending=False, arch_digests=self._digests(node))
        pods: Sequence[OperatorPod] | str = ()
        if node.is_gpu and not operator_known:  # which image the node needs is a guess
            pods = "the GPU Operator's objects could not be read"
        elif node.is_gpu and expected.ours and not _final(record, node):
            pods = self._read_pods(node, outcome)
        decision = decide_proof(node, record, pods, expected, rules=self._rules, now=now)
        if decision.annotate and not self._dry_run and self._annotator is not None:
            written = False
            try:
                outcome.calls += 1
                # On the Node as it was judged: a second reboot, lost GPUs or upgrade-failed
                # since the listing make the API server refuse it (409); judged again then.
                written = self._annotator.set_proof(node.name, node.resource_version)
            except ReleasebotError as error:
                outcome.errors.append(f"proof of {node.name}: {error}")
                log.warning("proof of %s: cannot set the annotation: %s", node.name, error)
            if not written and decision.newly:  # not proven until written: judged again
                log.info("proof of %s: the node changed since it was read", node.name)
                held = replace(decision.record, state=ProofState.PROVING, reason=decision.why)
                return ProofDecision(held, Verdict.WAIT, decision.why), [], None
        events: list[Event] = []
        target: TargetRecord | None = None
        if decision.newly:
            level = logging.WARNING if decision.verdict is Verdict.REFUSED else logging.INFO
            log.log(level, "proof of %s: %s: %s", node.name, decision.verdict, decision.why)
        if decision.newly and decision.verdict is Verdict.PROVEN and expected.tag:
            known = records.get(expected.tag)
            if known is not None and node.is_gpu and node.arch not in known.proven_arches:
                first = known.proven_at is None
                target = replace(
                    known,
                    proven_at=known.proven_at or now,
                    proven_node=known.proven_node or node.name,
                    proven_arches=known.proven_arches | {node.arch},
                    updated_at=now,
                )
                if first:  # the build's message says it once
                    events.append(proven_event(target, node.name, now))
        if decision.newly and decision.refusal is not None:
            refusal = decision.refusal
            tail = self._log_tail(decision, outcome)
            decision = replace(decision, record=replace(decision.record, log_tail=tail))
            known = None if refusal.tag is None else records.get(refusal.tag)
            if refusal.image and known is not None and known.state is TargetState.PUBLISHED:
                target = replace(
                    known,
                    state=TargetState.REFUSED,
                    last_error=f"refused on node {node.name}: {refusal.reason}",
                    updated_at=now,
                )
            events.append(
                refused_event(
                    node=node.name,
                    tag=refusal.tag,
                    reason=refusal.reason,
                    image=target is not None,
                    log_tail=tail,
                    started_at=decision.record.started_at,
                    now=now,
                )
            )
        return decision, events, target

    def _read_pods(self, node: FleetNode, outcome: ProofOutcome) -> Sequence[OperatorPod] | str:
        try:
            outcome.calls += 1
            return self._pods.pods_on(node.name)
        except ReleasebotError as error:
            outcome.errors.append(f"proof of {node.name}: {error}")
            log.warning("proof of %s: cannot read the GPU Operator's pods: %s", node.name, error)
            return str(error)

    def _log_tail(self, decision: ProofDecision, outcome: ProofOutcome) -> str | None:
        refusal = decision.refusal
        if refusal is None or refusal.pod is None or "/" not in refusal.pod:
            return None
        namespace, _, pod = refusal.pod.partition("/")
        try:
            outcome.calls += 1
            tail = self._pods.log_tail(namespace, pod, refusal.container, previous=refusal.previous)
        except ReleasebotError as error:
            log.warning("proof: cannot read the log of %s: %s", refusal.pod, error)
            return None
        return tail or None

    def _digests(self, node: FleetNode) -> Callable[[TargetRecord], frozenset[str]]:
        """The digests of the node's arch that the published tag's own attempt built (an
        index's child): an older attempt's image is not what was verified."""

        def digests(record: TargetRecord) -> frozenset[str]:
            return frozenset(
                build.digest
                for build in self._store.builds(tag=record.tag)
                if build.digest is not None
                and build.arch is node.arch
                and build.attempt == record.attempts
                and build.state is BuildState.SUCCEEDED
            )

        return digests


def _final(record: ProofRecord | None, node: FleetNode) -> bool:
    """A proof already decided for this boot needs no pods."""
    if record is None or record.state not in (ProofState.PROVEN, ProofState.REFUSED):
        return False
    return record.boot_id is not None and record.boot_id == node.boot_id


def _expected(
    entry: NodeNeeds | None,
    records: Mapping[str, TargetRecord],
    *,
    pending: bool,
    arch_digests: Callable[[TargetRecord], frozenset[str]] | None = None,
) -> Expected:
    """What the node needs for the version it reboots into (``pending``) or, back from its
    reboot, runs: by the pool the operator puts it in (``fleet_plan``)."""
    if entry is None:
        return Expected(None, why="the node needs no driver image")
    foreign = entry.pending_foreign if pending else entry.foreign
    if foreign is not None:
        return Expected(None, ours=False, why=f"it pulls {foreign}, which releasebot did not build")
    needs = [need for need in entry.needs if need.pending is pending]
    tagged = [need for need in needs if need.tag is not None]
    if not tagged:
        why = next((need.problem for need in needs if need.problem), None)
        return Expected(None, ours=not any(need.pinned for need in needs), why=why)
    by_digest: dict[str, str] = {}
    published = False
    why = None
    for need in tagged:
        assert need.tag is not None
        record = records.get(need.tag)
        if record is None:
            why = why or f"{need.tag} is not planned yet"
            continue
        if record.state is TargetState.PUBLISHED:
            published = True
            # Only what was verified: the published digest and its own attempt's images.
            verified = {record.digest} if record.digest else set()
            if arch_digests is not None:
                verified |= arch_digests(record)
            by_digest.update(dict.fromkeys(verified, need.tag))
        elif record.state is TargetState.REFUSED:
            why = why or f"{need.tag} was refused on {record.last_error or 'another node'}"
        else:
            why = why or f"{need.tag} is {record.state.value}, not published and verified"
    return Expected(
        tagged[0].tag,
        frozenset(by_digest),
        published=published,
        why=None if published else why,
        by_digest=by_digest,
    )
