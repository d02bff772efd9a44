"""The coverage page's fleet: each GPU node judged from the store, and the banner.

It judges each GPU node from the store alone, so the page needs no cluster
access and changes as soon as a target's state changes: a node needs its own images, the
required targets of the Flatcar version it runs (and of the one it will reboot into) built
for its arch that the fleet asked for (reason ``fleet`` or ``pending-reboot``: the drivers
the GPU Operator gives the nodes), or every required target of the version when the fleet
asked for none (the fleet view off, older rows); its verdict is the worst of theirs
(``coverage.state_verdict``, ``coverage.worst``: the same rules ``releasebot fleet``
applies). A driver only the channel policy wants is not a node's image: its failure does
not make the node uncovered. Where the GPU Operator gives two nodes on one version
different drivers, the store cannot tell whose is whose and the page asks for both on
both: it may call a node uncovered that the cycle's coverage calls covered, never the other
way round. The banner names each image that is not there (its tag, state and what to do)
and counts the nodes without theirs, not all nodes.

The reboot gate's column says what the gate decides from these verdicts (open once every
image of the pending version is verified, held otherwise); the store does not keep the
Nodes' annotations, so it is the decision, not a reading of the annotation.

"Since when" is the later of when the node entered its state (its fleet record's
``first_seen_at``) and when the image stopped being verified (the target's
``first_planned_at`` if it was never published, else its ``updated_at``).

Pure, as ``overview.py`` is: the page's matrix counts nodes with ``node_counts``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from releasebot.domain.fleet.coverage import (
    PENDING_EXPOSED,
    RUNNING_EXPOSED,
    Verdict,
    state_verdict,
    worst,
)
from releasebot.domain.fleet.records import FleetRecord
from releasebot.domain.targets.models import TargetReason, TargetRecord, TargetState
from releasebot.domain.views.overview_words import NAME_MAX_CHARS, Json, cell_words, iso_time, text


@dataclass(frozen=True)
class NodeView:
    """A Flatcar GPU node of the latest listing, judged from the stored targets."""

    record: FleetRecord
    verdict: Verdict
    pending_verdict: Verdict | None
    tags: tuple[str, ...]
    pending_tags: tuple[str, ...]


def current_fleet(records: Sequence[FleetRecord]) -> list[FleetRecord]:
    """The nodes of the latest listing: every listing moves ``last_seen_at`` of each node it
    lists to its own time, so a node gone from the cluster keeps an older one."""
    if not records:
        return []
    latest = max(record.last_seen_at for record in records)
    return [record for record in records if record.last_seen_at == latest]


_FLEET_REASONS = frozenset({TargetReason.FLEET, TargetReason.PENDING_REBOOT})
"""The reasons a target is some node's own image (``fleet_plan``: the driver it is given)."""


def _needs(
    version: str,
    arch: str | None,
    by_version: Mapping[str, Sequence[TargetRecord]],
    memo: dict[tuple[str, str | None], list[TargetRecord]],
) -> list[TargetRecord]:
    """A node's own images on ``version`` for ``arch``: the required targets the fleet asked
    for, else every required one of the version (memoised: nodes share)."""
    key = (version, arch)
    if key not in memo:
        matching = [
            record
            for record in by_version.get(version, ())
            if arch is None or any(a.value == arch for a in record.target.arches)
        ]
        own = [record for record in matching if record.target.reasons & _FLEET_REASONS]
        memo[key] = own or matching
    return memo[key]


def fleet_versions(fleet: Sequence[FleetRecord]) -> frozenset[str]:
    """The Flatcar versions the GPU nodes of the latest listing run or will reboot into:
    the only versions whose targets ``fleet_view`` looks at (none without GPU nodes)."""
    versions: set[str] = set()
    for seen in current_fleet(fleet):
        state = seen.state
        if state.gpu and state.version is not None:
            versions.add(state.version)
            if state.pending_version is not None:
                versions.add(state.pending_version)
    return frozenset(versions)


def node_counts(fleet: Sequence[FleetRecord]) -> tuple[dict[str, int], dict[str, int]]:
    """Per Flatcar version, the GPU nodes of the latest listing running it and those about
    to reboot into it (the matrix's rows say so). Counts only: a listing that changes
    nothing but the nodes' ``last_seen_at`` changes nothing here."""
    running: dict[str, int] = {}
    pending: dict[str, int] = {}
    for seen in current_fleet(fleet):
        state = seen.state
        if not state.gpu or state.version is None:
            continue
        running[state.version] = running.get(state.version, 0) + 1
        if state.pending_version is not None:
            pending[state.pending_version] = pending.get(state.pending_version, 0) + 1
    return running, pending


def _verdict(needed: Sequence[TargetRecord]) -> Verdict:
    """Coverage's own judgement of these images (``missing`` when there is none)."""
    return worst(state_verdict(record.state) for record in needed)


def judge_nodes(
    fleet: Sequence[FleetRecord], targets: Sequence[TargetRecord]
) -> tuple[list[NodeView], list[FleetRecord]]:
    """The Flatcar GPU nodes judged, and the GPU nodes releasebot ignores (not Flatcar...)."""
    by_version: dict[str, list[TargetRecord]] = {}
    for record in targets:
        if record.required:
            by_version.setdefault(record.target.flatcar_version.text, []).append(record)
    nodes: list[NodeView] = []
    ignored: list[FleetRecord] = []
    memo: dict[tuple[str, str | None], list[TargetRecord]] = {}
    for seen in current_fleet(fleet):
        state = seen.state
        if not state.gpu:
            continue
        if state.version is None:
            ignored.append(seen)
            continue
        running = _needs(state.version, state.arch, by_version, memo)
        pending = (
            []
            if state.pending_version is None
            else _needs(state.pending_version, state.arch, by_version, memo)
        )
        nodes.append(
            NodeView(
                seen,
                _verdict(running),
                None if state.pending_version is None else _verdict(pending),
                tuple(r.tag for r in running),
                tuple(r.tag for r in pending),
            )
        )
    nodes.sort(key=lambda node: node.record.name)
    return nodes, ignored


def _uncovered_since(node: FleetRecord, needed: Iterable[TargetRecord]) -> datetime:
    since = node.first_seen_at
    for record in needed:
        if record.state is TargetState.PUBLISHED:
            continue
        image_since = record.first_planned_at if record.published_at is None else record.updated_at
        since = max(since, image_since)
    return since


@dataclass
class _Uncovered:
    version: str
    pending: bool
    since: datetime
    verdicts: set[Verdict] = field(default_factory=set)
    nodes: list[str] = field(default_factory=list)
    tags: dict[str, TargetRecord] = field(default_factory=dict)


def fleet_view(
    fleet: Sequence[FleetRecord],
    targets: Sequence[TargetRecord],
    *,
    gate: bool,
) -> Json:
    """``/api/fleet``: the banner, every GPU node with its verdicts, the ignored ones and,
    with the reboot gate on, what the gate does for each node with a pending version."""
    nodes, ignored = judge_nodes(fleet, targets)
    by_tag = {record.tag: record for record in targets}
    problems: dict[tuple[str, bool], _Uncovered] = {}
    for node in nodes:
        state = node.record.state
        checks = [(state.version, False, node.verdict, node.tags, RUNNING_EXPOSED)]
        if state.pending_version is not None and node.pending_verdict is not None:
            pending_check = (state.pending_version, True, node.pending_verdict)
            checks.append((*pending_check, node.pending_tags, PENDING_EXPOSED))
        for version, pending, verdict, tags, exposed in checks:
            if version is None or verdict not in exposed:
                continue
            since = _uncovered_since(node.record, (by_tag[t] for t in tags))
            entry = problems.setdefault((version, pending), _Uncovered(version, pending, since))
            entry.verdicts.add(verdict)
            entry.nodes.append(state.name)
            entry.since = min(entry.since, since)
            for tag in tags:
                if state_verdict(by_tag[tag].state) in exposed:
                    entry.tags.setdefault(tag, by_tag[tag])
    versions = {node.record.state.version for node in nodes}
    uncovered = [
        {
            "flatcar_version": entry.version,
            "pending": entry.pending,
            "verdict": worst(entry.verdicts).value,
            "nodes": [text(name, NAME_MAX_CHARS) for name in entry.nodes],
            "since": iso_time(entry.since),
            "tags": [_missing_tag(record) for _tag, record in sorted(entry.tags.items())],
        }
        for _key, entry in sorted(problems.items(), key=lambda item: item[0], reverse=True)
    ]
    without = len({name for entry in problems.values() for name in entry.nodes})
    return {
        "banner": {
            "covered": not uncovered,
            "text": banner_text(len(nodes), len(versions), uncovered),
            "uncovered": uncovered,
            "uncovered_nodes": without,
            "help": None if not uncovered else BANNER_HELP,
        },
        "gpu_nodes": len(nodes),
        "flatcar_versions": len(versions),
        "gate": gate,
        "nodes": [_node_json(node, gate=gate) for node in nodes],
        "ignored": [
            {"name": text(r.name, NAME_MAX_CHARS), "reason": text(r.state.ignored_reason)}
            for r in ignored
        ],
    }


BANNER_HELP = "docs/operations.md, section “GPU nodes without a driver image”"
"""Where the person on call reads what each verdict means and what to do."""


def tag_action(record: TargetRecord) -> str:
    """What to do about one of a node's images that is not published, in a few words."""
    tag = record.tag
    if record.state is TargetState.FAILED:
        return f"fix the cause in its detail, then /releasebot retry {tag}"
    if record.state is TargetState.INCOMPATIBLE:
        return (
            "the driver does not compile for this kernel: give these nodes another driver "
            "branch (docs/operations.md, “Incompatible”)"
        )
    if record.state in (TargetState.BUILDING, TargetState.RETRYING):
        return "being built: wait for it"
    if record.state is TargetState.WAITING:
        return "waiting for the Flatcar or NVIDIA files it is built from"
    return (
        "the next cycle builds it; if none does, see docs/operations.md, "
        "“Required tags not published”"
    )


def _missing_tag(record: TargetRecord) -> Json:
    return {
        "tag": record.tag,
        "state": record.state.value,
        "words": cell_words(record),
        "action": tag_action(record),
    }


def banner_text(nodes: int, versions: int, uncovered: Sequence[Mapping[str, object]]) -> str:
    """ "12 GPU nodes on 3 Flatcar versions: all covered", or how many are not, which images
    they miss, since when."""
    on = f"on {versions} Flatcar {_plural(versions, 'version')}"
    if not uncovered:
        if not nodes:
            return "No GPU node seen yet"
        return f"{nodes} GPU {_plural(nodes, 'node')} {on}: all covered"
    without = set()
    parts = []
    for entry in uncovered:
        names = entry["nodes"]
        tags = entry["tags"]
        assert isinstance(names, list)
        assert isinstance(tags, list)
        without.update(names)
        count = len(names)
        verb = "will reboot into" if entry["pending"] else "run" if count > 1 else "runs"
        images = ", ".join(f"{tag['tag']} ({tag['words']})" for tag in tags) or (
            f"an image ({entry['verdict']}: none planned)"
        )
        parts.append(
            f"{count} {_plural(count, 'node')} {verb} {entry['flatcar_version']} without "
            f"{images} since {entry['since']}"
        )
    head = f"{len(without)} of {nodes} GPU {_plural(nodes, 'node')} {on} NOT covered"
    return f"{head}: " + "; ".join(parts)


def _plural(count: int, word: str) -> str:
    return word if count == 1 else word + "s"


def _node_json(node: NodeView, *, gate: bool) -> Json:
    state = node.record.state
    answer: Json = {
        "name": text(state.name, NAME_MAX_CHARS),
        "arch": state.arch,
        "flatcar_version": state.version,
        "kernel": text(state.kernel),
        "verdict": node.verdict.value,
        "pending_version": state.pending_version,
        "pending_verdict": None if node.pending_verdict is None else node.pending_verdict.value,
        "tags": list(node.tags),
        "pending_tags": list(node.pending_tags),
        "first_seen_at": iso_time(node.record.first_seen_at),
        "last_seen_at": iso_time(node.record.last_seen_at),
        "gate": None,
    }
    if gate and state.pending_version is not None:
        ready = node.pending_verdict is Verdict.VERIFIED
        answer["gate"] = {
            "ready": ready,
            "text": "open: the image for the next version is verified"
            if ready
            else f"held: the image for {state.pending_version} is "
            f"{(node.pending_verdict or Verdict.MISSING).value}",
        }
    return answer
