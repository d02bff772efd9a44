"""``MemoryStateStore``: the ``StateStore`` port in plain dicts, for dry runs and tests.

It behaves as ``SqlStateStore`` does, and the same contract suite checks both: releases are
keyed by version and never forgotten, each feed remembers which versions it listed and
whether it still does, targets keep their state and first-planned time across plans. Times
are normalised to UTC as the database adapter reads them back, and a naive time is refused
with the same ``StoreError``. Each method holds one lock, as each SQL method is one
transaction. Nothing is persisted: the state is gone when the process ends.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import TypeVar

from releasebot.domain.fleet.nodes import ParsedNode
from releasebot.domain.fleet.proof import ProofRecord
from releasebot.domain.fleet.records import FleetRecord
from releasebot.domain.fleet.retention import DeletionRecord, Listing
from releasebot.domain.shared.errors import StoreError
from releasebot.domain.shared.versions import Arch
from releasebot.domain.targets.bases import BaseRecord
from releasebot.domain.targets.builds import BuildRecord
from releasebot.domain.targets.diff import diff_targets, requested_target
from releasebot.domain.targets.events import Event, MessageRef, StoredEvent, read_event
from releasebot.domain.targets.models import (
    DriverRelease,
    FeedState,
    FlatcarRelease,
    Target,
    TargetRecord,
    TargetState,
    Validators,
)
from releasebot.store.fleet_memory import FleetHistory
from releasebot.store.limits import fit_error, fit_log, kept_validators, mask_payload

Release = TypeVar("Release", FlatcarRelease, DriverRelease)


@dataclass
class _Entry:
    """That a feed lists (or listed) a version; mirrors a ``*_feed_entries`` row."""

    first_seen_at: datetime
    last_seen_at: datetime
    present: bool


@dataclass
class _Row:
    """One outbox row, as the SQL store's ``outbox`` table keeps it."""

    id: int
    event: Event
    attempts: int = 0
    next_attempt_at: datetime | None = None
    last_error: str | None = None
    delivered_at: datetime | None = None

    def stored(self) -> StoredEvent:
        return StoredEvent(
            id=self.id,
            event=self.event,
            attempts=self.attempts,
            next_attempt_at=self.next_attempt_at,
            last_error=self.last_error,
            delivered_at=self.delivered_at,
        )


class MemoryStateStore:
    """The state store in memory; every instance starts empty."""

    def __init__(self, *, keep_events: bool = True) -> None:
        self._keep_events = keep_events  # as SqlStateStore's: False drops every event
        self._lock = threading.Lock()
        self._feeds: dict[str, FeedState] = {}
        self._flatcar: dict[str, FlatcarRelease] = {}
        self._drivers: dict[str, DriverRelease] = {}
        self._flatcar_entries: dict[str, dict[str, _Entry]] = {}
        self._driver_entries: dict[str, dict[str, _Entry]] = {}
        self._targets: dict[str, TargetRecord] = {}
        self._builds: dict[tuple[str, Arch, int], BuildRecord] = {}
        self._outbox: list[_Row] = []
        self._refs: dict[str, MessageRef] = {}
        self._flags: dict[str, str] = {}
        self._fleet = FleetHistory()
        self._proofs: dict[str, ProofRecord] = {}
        self._bases: dict[str, BaseRecord] = {}
        self._deletions: list[DeletionRecord] = []
        self._revisions: dict[str, int] = {}

    def feed_state(self, feed: str) -> FeedState | None:
        with self._lock:
            return self._feeds.get(feed)

    def feed_states(self) -> list[FeedState]:
        with self._lock:
            return [self._feeds[name] for name in sorted(self._feeds)]

    def record_flatcar_feed(
        self,
        feed: str,
        url: str,
        releases: Sequence[FlatcarRelease],
        validators: Validators,
        now: datetime,
    ) -> None:
        now = _utc(now)
        listed = {
            release.version.text: replace(release, released_at=_utc_or_none(release.released_at))
            for release in releases
        }
        with self._lock:
            self._touch("feeds", "flatcar_releases", "flatcar_feed_entries")
            seen_before = self._record_body(feed, url, validators, now)
            entries = self._flatcar_entries.setdefault(feed, {})
            _merge(self._flatcar, entries, listed, now, seen_before)

    def record_driver_feed(
        self,
        feed: str,
        url: str,
        drivers: Sequence[DriverRelease],
        validators: Validators,
        now: datetime,
    ) -> None:
        now = _utc(now)
        listed = {driver.version.text: driver for driver in drivers}
        with self._lock:
            self._touch("feeds", "driver_releases", "driver_feed_entries")
            seen_before = self._record_body(feed, url, validators, now)
            entries = self._driver_entries.setdefault(feed, {})
            _merge(self._drivers, entries, listed, now, seen_before)

    def record_feed_unchanged(
        self, feed: str, url: str, validators: Validators, now: datetime
    ) -> None:
        now = _utc(now)
        with self._lock:
            self._touch("feeds")
            old = self._feeds.get(feed) or _new_feed(feed, url)
            self._feeds[feed] = replace(
                old,
                validators=kept_validators(old.validators, validators),
                last_polled_at=now,
                last_success_at=now,
                consecutive_failures=0,
            )

    def record_feed_failure(self, feed: str, url: str, error: str, now: datetime) -> None:
        now = _utc(now)
        with self._lock:
            self._touch("feeds")
            old = self._feeds.get(feed) or _new_feed(feed, url)
            self._feeds[feed] = replace(
                old,
                last_polled_at=now,
                last_error=fit_error(error),
                last_error_at=now,
                consecutive_failures=old.consecutive_failures + 1,
            )

    def flatcar_releases(self, feed: str) -> list[FlatcarRelease]:
        with self._lock:
            entries = self._flatcar_entries.get(feed, {})
            return sorted((self._flatcar[v] for v in entries), key=lambda r: r.version)

    def driver_releases(self, feed: str) -> list[DriverRelease]:
        with self._lock:
            entries = self._driver_entries.get(feed, {})
            return sorted((self._drivers[v] for v in entries), key=lambda r: r.version)

    def sync_targets(self, planned: Sequence[Target], now: datetime) -> list[TargetRecord]:
        now = _utc(now)
        with self._lock:
            self._touch("targets")
            diff = diff_targets(self._targets, planned, now)
            for record in (*diff.inserts, *diff.updates):
                self._targets[record.tag] = record
            return list(diff.result)

    def targets(
        self, *, required_only: bool = True, state: TargetState | None = None
    ) -> list[TargetRecord]:
        with self._lock:
            return [
                record
                for tag in sorted(self._targets)
                if ((record := self._targets[tag]).required or not required_only)
                and (state is None or record.state is state)
            ]

    def target(self, tag: str) -> TargetRecord | None:
        with self._lock:
            return self._targets.get(tag)

    def ensure_target(self, target: Target, now: datetime) -> TargetRecord:
        record = requested_target(target, _utc(now))
        with self._lock:
            self._touch("targets")
            return self._targets.setdefault(record.tag, record)

    def builds(self, *, tag: str | None = None, active_only: bool = False) -> list[BuildRecord]:
        with self._lock:
            found = [
                build
                for build in self._builds.values()
                if (tag is None or build.tag == tag) and (not active_only or build.state.active)
            ]
        return sorted(found, key=lambda build: build.order)

    def save(
        self,
        *,
        targets: Sequence[TargetRecord] = (),
        builds: Sequence[BuildRecord] = (),
        events: Sequence[Event] = (),
    ) -> None:
        # Everything is checked before anything is written: one transaction, as in SQL.
        stored = _as_stored(events if self._keep_events else ())
        with self._lock:
            self._touch(*self._written(targets=targets, builds=builds, events=events))
            for build in builds:
                if build.tag not in self._targets:
                    # As the SQL stores' foreign key says it (engine.translate_error).
                    raise StoreError(
                        f"state store refused the data: build for unknown target {build.tag}"
                    )
            for record in targets:
                old = self._targets.get(record.tag)
                if old is None:  # as an SQL UPDATE: a target that is not there is not written
                    continue
                self._targets[record.tag] = replace(
                    old,
                    state=record.state,
                    digest=record.digest,
                    attempts=record.attempts,
                    budget_start=record.budget_start,
                    next_attempt_at=_utc_or_none(record.next_attempt_at),
                    last_error=None if record.last_error is None else fit_error(record.last_error),
                    published_at=_utc_or_none(record.published_at),
                    updated_at=_utc(record.updated_at),
                    proven_at=_utc_or_none(record.proven_at),
                    proven_node=record.proven_node,
                    proven_arches=record.proven_arches,
                )
            for build in builds:
                self._builds[(build.tag, build.arch, build.attempt)] = replace(
                    build,
                    created_at=_utc(build.created_at),
                    finished_at=_utc_or_none(build.finished_at),
                    message=None if build.message is None else fit_error(build.message),
                    log_tail=fit_log(build.log_tail),
                )
            for event in stored:
                self._outbox.append(_Row(len(self._outbox) + 1, event))

    # -- the outbox, message refs and flags ----------------------------------------------

    def pending_events(self, now: datetime, limit: int = 50) -> list[StoredEvent]:
        now = _utc(now)
        with self._lock:
            due = [
                row.stored()
                for row in self._outbox
                if row.delivered_at is None
                and (row.next_attempt_at is None or row.next_attempt_at <= now)
            ]
        return due[:limit]

    def outbox_events(self, message_key: str) -> list[StoredEvent]:
        with self._lock:
            return [row.stored() for row in self._outbox if row.event.message_key == message_key]

    def outbox_backlog(self) -> int:
        with self._lock:
            return sum(1 for row in self._outbox if row.delivered_at is None)

    def mark_delivered(self, event_id: int, now: datetime, ref: MessageRef | None = None) -> None:
        now = _utc(now)
        with self._lock:
            self._touch("outbox", "message_refs")
            row = self._row(event_id)
            if row is not None and row.delivered_at is None:
                row.delivered_at, row.next_attempt_at = now, None
            if ref is not None:
                self._refs[ref.message_key] = ref

    def mark_undelivered(
        self, event_id: int, error: str, next_attempt_at: datetime, now: datetime
    ) -> None:
        next_attempt_at = _utc(next_attempt_at)
        with self._lock:
            self._touch("outbox")
            row = self._row(event_id)
            if row is not None and row.delivered_at is None:
                row.attempts += 1
                row.last_error = fit_error(error)
                row.next_attempt_at = next_attempt_at

    def message_ref(self, message_key: str) -> MessageRef | None:
        with self._lock:
            return self._refs.get(message_key)

    def flag(self, name: str) -> str | None:
        with self._lock:
            return self._flags.get(name)

    def set_flag(
        self, name: str, value: str | None, now: datetime, events: Sequence[Event] = ()
    ) -> None:
        _utc(now)
        stored = _as_stored(events if self._keep_events else ())
        with self._lock:
            self._touch("flags", *(("outbox",) if events else ()))
            if value is None:
                self._flags.pop(name, None)
            else:
                self._flags[name] = value
            for event in stored:
                self._outbox.append(_Row(len(self._outbox) + 1, event))

    # -- fleet history (the rows in fleet_memory.py) ------------------------------------

    def record_fleet(self, nodes: Sequence[ParsedNode], now: datetime) -> None:
        with self._lock:
            self._touch("fleet_nodes")
            self._fleet.record(nodes, _utc(now))

    def fleet_nodes(self) -> list[FleetRecord]:
        with self._lock:
            return self._fleet.latest()

    def fleet_history(self, name: str) -> list[FleetRecord]:
        with self._lock:
            return self._fleet.of(name)

    # -- retention ----------------------------------------------------------------------

    def flatcar_listings(self) -> list[Listing]:
        with self._lock:
            return [
                Listing(feed, version, entry.present, entry.last_seen_at)
                for feed, entries in self._flatcar_entries.items()
                for version, entry in entries.items()
            ]

    def record_deletion(self, deletion: DeletionRecord, events: Sequence[Event] = ()) -> None:
        stored = _as_stored(events if self._keep_events else ())
        kept = replace(
            deletion, deleted_at=_utc(deletion.deleted_at), reason=fit_error(deletion.reason)
        )
        with self._lock:
            self._touch("retention_deletions", *(("outbox",) if events else ()))
            self._deletions.append(kept)
            for event in stored:
                self._outbox.append(_Row(len(self._outbox) + 1, event))

    def deletions(self) -> list[DeletionRecord]:
        with self._lock:
            return list(self._deletions)

    def proofs(self) -> list[ProofRecord]:
        with self._lock:
            return [self._proofs[name] for name in sorted(self._proofs)]

    def save_proofs(
        self,
        *,
        proofs: Sequence[ProofRecord] = (),
        removed: Sequence[str] = (),
        targets: Sequence[TargetRecord] = (),
        events: Sequence[Event] = (),
    ) -> None:
        kept = [
            replace(
                record,
                updated_at=_utc(record.updated_at),
                armed_at=_utc_or_none(record.armed_at),
                started_at=_utc_or_none(record.started_at),
                healthy_since=_utc_or_none(record.healthy_since),
                reason=None if record.reason is None else fit_error(record.reason),
                log_tail=fit_log(record.log_tail),
            )
            for record in proofs
        ]
        self.save(targets=targets, events=events)  # checked first: it may refuse them
        with self._lock:
            self._touch("proofs", *self._written(targets=targets, events=events))
            for name in removed:
                self._proofs.pop(name, None)
            for record in kept:
                self._proofs[record.node] = record

    def revisions(self) -> dict[str, int]:
        with self._lock:
            return dict(self._revisions)

    def forget(self) -> None:
        """Nothing to drop: the records are the state itself, never a copy of it."""

    # -- driver bases ------------------------------------------------------------------

    def bases(self) -> list[BaseRecord]:
        with self._lock:
            return [self._bases[tag] for tag in sorted(self._bases)]

    def save_bases(
        self,
        *,
        bases: Sequence[BaseRecord] = (),
        targets: Sequence[TargetRecord] = (),
        events: Sequence[Event] = (),
    ) -> None:
        kept = [
            replace(
                record,
                last_error=None if record.last_error is None else fit_error(record.last_error),
                log_tail=fit_log(record.log_tail),
                created_at=_utc(record.created_at),
                updated_at=_utc(record.updated_at),
                started_at=_utc_or_none(record.started_at),
                next_attempt_at=_utc_or_none(record.next_attempt_at),
                published_at=_utc_or_none(record.published_at),
            )
            for record in bases
        ]
        self.save(targets=targets, events=events)  # checked first: it may refuse them
        with self._lock:
            if kept:
                self._touch("driver_bases")
            for record in kept:
                self._bases[record.tag] = record

    def _touch(self, *tables: str) -> None:
        """Move the change counters as ``SqlStateStore`` does (``store/revisions.py``)."""
        for table in tables:
            self._revisions[table] = self._revisions.get(table, 0) + 1

    @staticmethod
    def _written(
        *,
        targets: Sequence[TargetRecord] = (),
        builds: Sequence[BuildRecord] = (),
        events: Sequence[Event] = (),
    ) -> tuple[str, ...]:
        named = (("targets", targets), ("builds", builds), ("outbox", events))
        return tuple(table for table, rows in named if rows)

    def _row(self, event_id: int) -> _Row | None:
        """The outbox row with ``event_id`` (ids are positions plus one, never reused)."""
        if 1 <= event_id <= len(self._outbox):
            return self._outbox[event_id - 1]
        return None

    def _record_body(self, feed: str, url: str, validators: Validators, now: datetime) -> datetime:
        """Update the feed's state for a changed body; return its previous last success."""
        old = self._feeds.get(feed) or _new_feed(feed, url)
        self._feeds[feed] = replace(
            old,
            url=url,
            validators=validators,
            last_polled_at=now,
            last_success_at=now,
            last_changed_at=now,
            consecutive_failures=0,
        )
        return old.last_success_at or now


def _merge(
    known: dict[str, Release],
    entries: dict[str, _Entry],
    listed: Mapping[str, Release],
    now: datetime,
    seen_before: datetime,
) -> None:
    """Store the releases one body lists, and which of the feed's entries it still lists.

    A release is replaced only when its digest changed; an entry that vanishes keeps as
    ``last_seen_at`` the feed's last success before this body (``seen_before``).
    """
    for version, release in listed.items():
        old = known.get(version)
        if old is None or old.content_sha256 != release.content_sha256:
            known[version] = release
        entry = entries.get(version)
        if entry is None:
            entries[version] = _Entry(first_seen_at=now, last_seen_at=now, present=True)
        elif not entry.present:
            entry.present, entry.last_seen_at = True, now
    for version, entry in entries.items():
        if entry.present and version not in listed:
            entry.present, entry.last_seen_at = False, seen_before


def _new_feed(feed: str, url: str) -> FeedState:
    return FeedState(
        name=feed,
        url=url,
        validators=Validators(),
        last_polled_at=None,
        last_success_at=None,
        last_changed_at=None,
        last_error=None,
        last_error_at=None,
        consecutive_failures=0,
    )


def _as_stored(events: Sequence[Event]) -> list[Event]:
    """The events as the SQL store reads them back: through their JSON, texts masked."""
    return [
        read_event(
            event.kind,
            event.message_key,
            event.subject,
            _utc(event.created_at),
            json.loads(json.dumps(mask_payload(event.marshal()))),
        )
        for event in events
    ]


def _utc(moment: datetime) -> datetime:
    if moment.tzinfo is None or moment.utcoffset() is None:
        raise StoreError(
            f"state store: naive datetime {moment.isoformat()} given to the state store"
        )
    return moment.astimezone(UTC)


def _utc_or_none(moment: datetime | None) -> datetime | None:
    return None if moment is None else _utc(moment)
