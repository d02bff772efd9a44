"""The coverage page's view: the driver x Flatcar matrix, the banner, feeds, one target.

Pure functions from what the store keeps (targets, builds, the fleet's latest records,
Flatcar releases, feed states, outbox events) to JSON-ready dictionaries, the one shape
the API answers and the page draws. Nothing here reads anything or knows HTTP.

Time to publish ("published after 3 h") is the time from the Flatcar release to the
publication by releasebot's own build; a tag found already in the registry (no build of
releasebot's published it) has none: when releasebot first saw it says nothing about when
it was made, and the registry's tag listing does not say either.

Every text from outside (feed errors, log tails, node names, registry digests) passes
through ``untrusted.clean`` with a limit: the page escapes on top of that.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from urllib.parse import urlsplit, urlunsplit

from releasebot.domain.fleet.records import FleetRecord
from releasebot.domain.shared.untrusted import clean
from releasebot.domain.shared.versions import FlatcarVersion
from releasebot.domain.targets.builds import BuildRecord, BuildState
from releasebot.domain.targets.events import MessageRef, StoredEvent, TagPublished
from releasebot.domain.targets.models import (
    FeedState,
    FlatcarRelease,
    TargetRecord,
    TargetState,
    ordered_reasons,
)
from releasebot.domain.views.overview_fleet import node_counts
from releasebot.domain.views.overview_words import Json, cell_words, iso_time, text, text_block

RECHECK_AFTER_SECONDS = 900.0
"""How long a view kept by the store's change counters is trusted without reading it again:
an edit made behind releasebot's back (SQL typed by a person, a restored backup) moves no
counter, so it shows on the page within 15 minutes. Each recheck builds again what is asked
(at 10,000 targets the matrix and the fleet cost about 2 s of CPU together, as much as
half an hour of one tab's 304s): every 15 minutes, a fraction of what the tab costs, and
still well inside the cycle's hourly full pass."""

# -- the matrix -------------------------------------------------------------------------


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
    running, pending = node_counts(fleet)
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
                "released_at": None if release is None else iso_time(release.released_at),
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
        "reasons": ordered_reasons(record.target.reasons),
        "published_after_seconds": delay,
        "found_in_registry": found,
    }


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
        if isinstance(stored.event, TagPublished) and stored.event.signed_by is not None:
            signed_by = text(stored.event.signed_by, 200)
    attempts: dict[int, list[Json]] = {}
    for build in builds:
        attempts.setdefault(build.attempt, []).append(
            {
                "job_name": text(build.job_name, 63),
                "arch": build.arch.value,
                "state": build.state.value,
                "reason": None if build.reason is None else build.reason.value,
                "message": text(build.message),
                "log_tail": text_block(build.log_tail),
                "digest": text(build.digest, 100),
                "created_at": iso_time(build.created_at),
                "finished_at": iso_time(build.finished_at),
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
        "reasons": ordered_reasons(target.reasons),
        "required": record.required,
        "state": record.state.value,
        "words": cell_words(record),
        "attempts": record.attempts,
        "next_attempt_at": iso_time(record.next_attempt_at),
        "last_error": text(record.last_error),
        "first_planned_at": iso_time(record.first_planned_at),
        "updated_at": iso_time(record.updated_at),
        "released_at": None if release is None else iso_time(release.released_at),
        "published_at": iso_time(record.published_at),
        "found_in_registry": found_in_registry(record, builds),
        "proven_at": iso_time(record.proven_at),
        "proven_node": text(record.proven_node, 253),
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
        "started_at": iso_time(started),
        "finished_at": iso_time(finished),
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
                "last_polled_at": iso_time(feed.last_polled_at),
                "last_success_at": iso_time(feed.last_success_at),
                "last_changed_at": iso_time(feed.last_changed_at),
                "last_error": text(feed.last_error),
                "last_error_at": iso_time(feed.last_error_at),
                "consecutive_failures": feed.consecutive_failures,
                "healthy": feed.consecutive_failures == 0,
            }
            for feed in sorted(feeds, key=lambda f: f.name)
        ]
    }
