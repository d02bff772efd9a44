"""The coverage page's view: the driver x Flatcar matrix, the banner, feeds, one target.

Pure functions from what the store keeps (targets, builds, the fleet's latest records,
Flatcar releases, feed states, outbox events) to JSON-ready dictionaries, the one shape
the API answers and the page draws. Nothing here reads anything or knows HTTP.

The fleet part judges each GPU node from the store alone, so the page needs no cluster
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

Time to publish ("published after 3 h") is the time from the Flatcar release to the
publication by releasebot's own build; a tag found already in the registry (no build of
releasebot's published it) has none: when releasebot first saw it says nothing about when
it was made, and the registry's tag listing does not say either.

The reboot gate's column says what the gate decides from these verdicts (open once every
image of the pending version is verified, held otherwise); the store does not keep the
Nodes' annotations, so it is the decision, not a reading of the annotation.

"Since when" is the later of when the node entered its state (its fleet record's
``first_seen_at``) and when the image stopped being verified (the target's
``first_planned_at`` if it was never published, else its ``updated_at``).

Every text from outside (feed errors, log tails, node names, registry digests) passes
through ``untrusted.clean`` with a limit: the page escapes on top of that.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from urllib.parse import urlsplit, urlunsplit

from releasebot.domain.builds import BuildRecord, BuildState
from releasebot.domain.coverage import (
    PENDING_EXPOSED,
    RUNNING_EXPOSED,
    Verdict,
    state_verdict,
    worst,
)
from releasebot.domain.events import EventKind, MessageRef, StoredEvent
from releasebot.domain.fleet_records import FleetRecord
from releasebot.domain.models import (
    FeedState,
    FlatcarRelease,
    TargetReason,
    TargetRecord,
    TargetState,
)
from releasebot.domain.untrusted import clean
from releasebot.domain.versions import FlatcarVersion

Json = dict[str, object]

LOG_TAIL_MAX_CHARS = 4000
"""The log tail shown in a target's detail; the store keeps a bounded tail already."""
ERROR_MAX_CHARS = 500
NAME_MAX_CHARS = 253

STATE_WORDS: Mapping[TargetState, str] = {
    TargetState.UNKNOWN: "not checked yet",
    TargetState.MISSING: "missing",
    TargetState.WAITING: "waiting for inputs",
    TargetState.BUILDING: "building",
    TargetState.RETRYING: "retrying",
    TargetState.PUBLISHED: "published",
    TargetState.STALE: "stale: rebuilding",
    TargetState.FAILED: "failed",
    TargetState.INCOMPATIBLE: "incompatible: does not compile",
}
"""Each state in words, so a cell never says it by colour alone."""


def text(value: object, limit: int = ERROR_MAX_CHARS) -> str | None:
    """``value`` as one printable line (``untrusted.clean``): for every stored text."""
    return clean(value, limit=limit)


def _block(value: str | None, limit: int = LOG_TAIL_MAX_CHARS) -> str | None:
    """A multi-line text (a log tail): lines kept, control characters dropped, bounded."""
    if value is None:
        return None
    lines = [clean(line, limit=limit) or "" for line in value[-limit:].splitlines()]
    return "\n".join(lines).strip("\n") or None


def _time(value: datetime | None) -> str | None:
    return None if value is None else value.isoformat()


# -- the fleet as the store last saw it ------------------------------------------------


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


def _verdict(needed: Sequence[TargetRecord]) -> Verdict:
    return worst(state_verdict(record.state) for record in needed) if needed else Verdict.MISSING


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
            "since": _time(entry.since),
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
        "first_seen_at": _time(node.record.first_seen_at),
        "last_seen_at": _time(node.record.last_seen_at),
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


# -- the matrix -------------------------------------------------------------------------


def releases_by_version(releases: Iterable[FlatcarRelease]) -> dict[str, FlatcarRelease]:
    """Each Flatcar version once (a version in two feeds: its first release wins)."""
    found: dict[str, FlatcarRelease] = {}
    for release in releases:
        found.setdefault(release.version.text, release)
    return found


def matrix_view(
    targets: Sequence[TargetRecord],
    fleet: Sequence[FleetRecord],
    releases: Mapping[str, FlatcarRelease],
    *,
    builds: Sequence[BuildRecord] = (),
    state: TargetState | None = None,
    flatcar: str | None = None,
    driver: str | None = None,
) -> Json:
    """``/api/targets``: rows of Flatcar versions (newest first), columns of drivers (newest
    first), a cell per required target; optionally only cells in ``state`` and only the
    row ``flatcar`` or the column ``driver``. ``builds``: every build, to tell the tags
    releasebot published from those it found in the registry."""
    required = [record for record in targets if record.required]
    builds_of: dict[str, list[BuildRecord]] = {}
    for build in builds:
        builds_of.setdefault(build.tag, []).append(build)
    nodes, _ignored = judge_nodes(fleet, targets)
    running: dict[str, int] = {}
    pending: dict[str, int] = {}
    for node in nodes:
        version = node.record.state.version
        if version is not None:
            running[version] = running.get(version, 0) + 1
        if node.record.state.pending_version is not None:
            key = node.record.state.pending_version
            pending[key] = pending.get(key, 0) + 1
    drivers = sorted({r.target.driver_version for r in required}, reverse=True)
    columns = [d.text for d in drivers if driver is None or d.text == driver]
    cells: dict[tuple[str, str], TargetRecord] = {}
    version_keys: dict[str, FlatcarVersion] = {}
    for record in required:
        target = record.target
        cells[(target.flatcar_version.text, target.driver_version.text)] = record
        version_keys[target.flatcar_version.text] = target.flatcar_version
    rows = []
    all_versions = set(version_keys) | set(running) | set(pending)
    for version in sorted(all_versions, key=_version_key, reverse=True):
        if flatcar is not None and version != flatcar:
            continue
        release = releases.get(version)
        row_cells: list[Json | None] = []
        for column in columns:
            cell = cells.get((version, column))
            if cell is None or (state is not None and cell.state is not state):
                row_cells.append(None)
            else:
                row_cells.append(_cell_json(cell, release, builds_of.get(cell.tag, ())))
        if state is not None and not any(row_cells):
            continue
        channel = (
            release.channel
            if release is not None
            else next(
                (r.target.flatcar_channel for (v, _d), r in cells.items() if v == version), None
            )
        )
        rows.append(
            {
                "flatcar_version": version,
                "channel": channel,
                "released_at": None if release is None else _time(release.released_at),
                "known": release is not None,
                "nodes_running": running.get(version, 0),
                "nodes_pending": pending.get(version, 0),
                "cells": row_cells,
            }
        )
    counts = {s.value: 0 for s in TargetState}
    for record in required:
        counts[record.state.value] += 1
    return {"drivers": columns, "rows": rows, "counts": counts}


def _version_key(version: str) -> tuple[int, ...]:
    """Flatcar versions in integer order (4081.3.10 after 4081.3.9)."""
    return tuple(
        int(part) if part.isascii() and part.isdigit() and len(part) <= 9 else -1
        for part in version.split(".")
    )


def found_in_registry(record: TargetRecord, builds: Iterable[BuildRecord]) -> bool:
    """Whether the tag is published but no build of releasebot's published it: it was in the
    registry when releasebot first looked (``lifecycle.check_registry``). A build publishes
    by finishing its attempt with every arch succeeded; the attempt is the record's last."""
    if record.state is not TargetState.PUBLISHED:
        return False
    current = [build for build in builds if build.attempt == record.attempts]
    built = record.attempts > 0 and bool(current)
    return not (built and all(build.state is BuildState.SUCCEEDED for build in current))


def _cell_json(
    record: TargetRecord, release: FlatcarRelease | None, builds: Iterable[BuildRecord]
) -> Json:
    released_at = None if release is None else release.released_at
    found = found_in_registry(record, builds)
    delay = None
    if record.published_at is not None and released_at is not None and not found:
        delay = max(0, int((record.published_at - released_at).total_seconds()))
    return {
        "tag": record.tag,
        "state": record.state.value,
        "words": cell_words(record),
        "attempts": record.attempts,
        "reasons": sorted(reason.value for reason in record.target.reasons),
        "published_after_seconds": delay,
        "found_in_registry": found,
    }


def cell_words(record: TargetRecord) -> str:
    """The state in words, with the attempt when there was more than one."""
    words = STATE_WORDS[record.state]
    if record.state in (TargetState.RETRYING, TargetState.BUILDING) and record.attempts > 1:
        words += f" (attempt {record.attempts})"
    return words


# -- one target --------------------------------------------------------------------------


def slack_link(ref: MessageRef | None) -> str | None:
    """The permalink shape Slack answers for a message (``/archives/C.../p<ts>``)."""
    if ref is None:
        return None
    channel = clean(ref.channel, limit=40) or ""
    ts = (ref.ts or "").replace(".", "")
    if not (channel.isascii() and channel.isalnum() and ts.isascii() and ts.isdigit()):
        return None
    return f"https://slack.com/archives/{channel}/p{ts}"


def target_detail(
    record: TargetRecord,
    builds: Sequence[BuildRecord],
    events: Sequence[StoredEvent],
    ref: MessageRef | None,
    *,
    repository: str,
    release: FlatcarRelease | None,
) -> Json:
    """``/api/targets/{tag}``: the target, each attempt's Jobs with their failure reasons
    and log tails, the digest and pull reference, Slack's message, the signature."""
    target = record.target
    signed_by = None
    for stored in events:
        if stored.event.kind is EventKind.TAG_PUBLISHED:
            value = stored.event.payload.get("signed_by")
            signed_by = text(value, 200) if isinstance(value, str) else signed_by
    attempts: dict[int, list[Json]] = {}
    for build in builds:
        attempts.setdefault(build.attempt, []).append(
            {
                "job_name": text(build.job_name, 63),
                "arch": build.arch.value,
                "state": build.state.value,
                "reason": None if build.reason is None else build.reason.value,
                "message": text(build.message),
                "log_tail": _block(build.log_tail),
                "digest": text(build.digest, 100),
                "created_at": _time(build.created_at),
                "finished_at": _time(build.finished_at),
            }
        )
    digest = text(record.digest, 100)
    pull = f"{repository}@{digest}" if digest else f"{repository}:{record.tag}"
    by_attempt: dict[int, list[BuildRecord]] = {}
    for build in builds:
        by_attempt.setdefault(build.attempt, []).append(build)
    return {
        "tag": record.tag,
        "driver_version": target.driver_version.text,
        "driver_branch": text(target.driver_branch, 40),
        "flatcar_version": target.flatcar_version.text,
        "flatcar_channel": text(target.flatcar_channel, 40),
        "kernel": text(target.kernel, 80),
        "arches": [arch.value for arch in target.arches],
        "reasons": sorted(reason.value for reason in target.reasons),
        "required": record.required,
        "state": record.state.value,
        "words": cell_words(record),
        "attempts": record.attempts,
        "next_attempt_at": _time(record.next_attempt_at),
        "last_error": text(record.last_error),
        "first_planned_at": _time(record.first_planned_at),
        "updated_at": _time(record.updated_at),
        "released_at": None if release is None else _time(release.released_at),
        "published_at": _time(record.published_at),
        "found_in_registry": found_in_registry(record, builds),
        "digest": digest,
        "pull": pull,
        "slack": slack_link(ref),
        "signed": signed_by is not None,
        "key_fingerprint": signed_by,
        "builds": [
            {"attempt": attempt, **_attempt_times(by_attempt[attempt]), "jobs": jobs}
            for attempt, jobs in sorted(attempts.items())
        ],
    }


def _attempt_times(builds: Sequence[BuildRecord]) -> Json:
    """When an attempt started (its first Job), when it ended (its last, once all did) and
    how long it took; ``None`` for what is not over yet."""
    started = min(build.created_at for build in builds)
    ends = [build.finished_at for build in builds]
    finished = None if any(end is None for end in ends) else max(e for e in ends if e)
    duration = None if finished is None else max(0, int((finished - started).total_seconds()))
    return {
        "started_at": _time(started),
        "finished_at": _time(finished),
        "duration_seconds": duration,
    }


# -- feeds ------------------------------------------------------------------------------


def public_url(url: str) -> str:
    """``url`` without what may carry a credential: user info, query and fragment."""
    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
        port = f":{parts.port}" if parts.port else ""
    except ValueError:
        return "(an address that does not parse)"
    if ":" in host:
        host = f"[{host}]"
    return urlunsplit((parts.scheme, host + port, parts.path, "", ""))


def feeds_view(feeds: Sequence[FeedState]) -> Json:
    """``/api/feeds``: per feed the last poll, last success, last change and last error."""
    return {
        "feeds": [
            {
                "name": text(feed.name, 100),
                "url": text(public_url(feed.url), 300),
                "last_polled_at": _time(feed.last_polled_at),
                "last_success_at": _time(feed.last_success_at),
                "last_changed_at": _time(feed.last_changed_at),
                "last_error": text(feed.last_error),
                "last_error_at": _time(feed.last_error_at),
                "consecutive_failures": feed.consecutive_failures,
                "healthy": feed.consecutive_failures == 0,
            }
            for feed in sorted(feeds, key=lambda f: f.name)
        ]
    }
