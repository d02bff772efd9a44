"""``DryRunStore``: the real store read, nothing written, for ``--dry-run``.

Reads go to the real store; what a dry run would write lands in an in-memory overlay
(``MemoryStateStore``) so the rest of the cycle sees it: a feed body that changed is parsed
and its releases planned, exactly as a real cycle would, yet the database never changes.
A fleet listing is overlaid too (``fleet_nodes`` shows it once the dry run listed the
fleet). Events, deliveries and flags are not overlaid: a dry run announces nothing and
pauses nothing, so those writes are simply dropped; so is a retention deletion's record.

What it reads from the real store it reads in bulk, one read per table, never one query
per target: planning at 10,000 targets used to send 10,000 SELECTs, each in its own
transaction, to learn each planned target's stored state. The targets, the feeds' rows and
each feed's releases are read whole once and kept while they stay current: until the real
store's change counter of their table moves (``revisions``: a write by any releasebot on
that database) or ``kept_for`` has passed (the counters do not see rows edited behind
releasebot's back, and ``releasebot run`` keeps one dry-run store for its daily retention
run, so nothing it keeps may outlive one run). A dry run's own writes never reach the real
store, so they never make what it keeps stale.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any, TypeVar, cast

from releasebot.domain.fleet.nodes import ParsedNode
from releasebot.domain.fleet.proof import ProofRecord
from releasebot.domain.fleet.records import FleetRecord
from releasebot.domain.fleet.retention import DeletionRecord, Listing
from releasebot.domain.ports import StateStore
from releasebot.domain.targets.bases import BaseRecord
from releasebot.domain.targets.builds import BuildRecord
from releasebot.domain.targets.events import Event, MessageRef, StoredEvent
from releasebot.domain.targets.models import (
    DriverRelease,
    FeedState,
    FlatcarRelease,
    Target,
    TargetRecord,
    TargetState,
    Validators,
)
from releasebot.store.memory import MemoryStateStore

T = TypeVar("T")

KEPT_FOR = timedelta(seconds=60)
"""How long a bulk read may be answered again without reading: longer than a one-shot dry
run at 30,000 targets takes (seconds), far shorter than the day between two retention
runs of one ``releasebot run``."""


@dataclass(frozen=True)
class _Kept:
    """One bulk read: what it returned, and the counters and the moment it was read at."""

    counters: tuple[int, ...]
    read_at: float
    value: Any


class DryRunStore:
    """A ``StateStore`` that reads ``inner`` and never writes to it.

    ``kept_for`` bounds how long a bulk read is reused; ``clock`` is the monotonic clock it
    is measured with (seconds), a parameter so that tests need not wait.
    """

    def __init__(
        self,
        inner: StateStore,
        *,
        kept_for: timedelta = KEPT_FOR,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._inner = inner
        self._overlay = MemoryStateStore()
        self._planned: dict[str, TargetRecord] = {}
        self._polled: dict[str, set[str]] = {}
        """The versions of the latest Flatcar body this dry run read, per feed."""
        self._kept_for = kept_for.total_seconds()
        self._clock = clock
        self._kept: dict[str, _Kept] = {}

    def _read(self, key: str, tables: tuple[str, ...], read: Callable[[], T]) -> T:
        """``read()``, or what it returned last time for ``key`` if no counter of
        ``tables`` moved since and it is younger than ``kept_for``.

        The counters are read BEFORE the data: a write landing between the two leaves a
        stamp older than the data, so the next call reads again (never the reverse).
        """
        counters = self._inner.revisions()
        stamp = tuple(counters.get(table, 0) for table in tables)
        now = self._clock()
        kept = self._kept.get(key)
        if kept is not None and kept.counters == stamp and 0 <= now - kept.read_at < self._kept_for:
            return cast(T, kept.value)
        if kept is not None and kept.counters == stamp:
            # Kept too long at the same counter: the real store may keep decoded rows under
            # that counter too, which an edit behind releasebot's back does not move.
            self._inner.forget()
        value = read()
        self._kept[key] = _Kept(stamp, now, value)
        return value

    def _stored_targets(self) -> dict[str, TargetRecord]:
        """Every stored target by tag, in the order of ``targets()`` (by tag): one read."""
        return self._read(
            "targets",
            ("targets",),
            lambda: {r.tag: r for r in self._inner.targets(required_only=False)},
        )

    def _feeds(self) -> dict[str, FeedState]:
        return self._read(
            "feeds", ("feeds",), lambda: {s.name: s for s in self._inner.feed_states()}
        )

    def revisions(self) -> dict[str, int]:
        """The real store's counters plus the overlay's: either moving moves the sum."""
        counters = self._inner.revisions()
        for table, value in self._overlay.revisions().items():
            counters[table] = counters.get(table, 0) + value
        return counters

    def forget(self) -> None:
        """This dry run's and the real store's kept reads go; the overlay is this dry run's
        own writes and stays."""
        self._kept.clear()
        self._inner.forget()

    def feed_state(self, feed: str) -> FeedState | None:
        return self._feeds().get(feed)

    def feed_states(self) -> list[FeedState]:
        return list(self._feeds().values())

    def record_flatcar_feed(
        self,
        feed: str,
        url: str,
        releases: Sequence[FlatcarRelease],
        validators: Validators,
        now: datetime,
    ) -> None:
        self._overlay.record_flatcar_feed(feed, url, releases, validators, now)
        self._polled[feed] = {release.version.text for release in releases}

    def record_driver_feed(
        self,
        feed: str,
        url: str,
        drivers: Sequence[DriverRelease],
        validators: Validators,
        now: datetime,
    ) -> None:
        self._overlay.record_driver_feed(feed, url, drivers, validators, now)

    def record_feed_unchanged(
        self, feed: str, url: str, validators: Validators, now: datetime
    ) -> None:
        pass

    def record_feed_failure(self, feed: str, url: str, error: str, now: datetime) -> None:
        pass

    def flatcar_releases(self, feed: str) -> list[FlatcarRelease]:
        stored = self._read(
            f"flatcar_releases/{feed}",
            ("flatcar_releases", "flatcar_feed_entries"),
            lambda: self._inner.flatcar_releases(feed),
        )
        merged = {r.version: r for r in stored}
        merged.update((r.version, r) for r in self._overlay.flatcar_releases(feed))
        return sorted(merged.values(), key=lambda release: release.version)

    def driver_releases(self, feed: str) -> list[DriverRelease]:
        stored = self._read(
            f"driver_releases/{feed}",
            ("driver_releases", "driver_feed_entries"),
            lambda: self._inner.driver_releases(feed),
        )
        merged = {r.version: r for r in stored}
        merged.update((r.version, r) for r in self._overlay.driver_releases(feed))
        return sorted(merged.values(), key=lambda driver: driver.version)

    def sync_targets(self, planned: Sequence[Target], now: datetime) -> list[TargetRecord]:
        stored_targets = self._stored_targets()
        result = []
        for target in planned:
            record = TargetRecord.new(target, now=now)
            stored = stored_targets.get(record.tag)
            result.append(record if stored is None else stored.replanned(record, now))
        self._planned = {record.tag: record for record in result}
        return result

    def targets(
        self, *, required_only: bool = True, state: TargetState | None = None
    ) -> list[TargetRecord]:
        return [
            record
            for record in self._stored_targets().values()
            if (record.required or not required_only) and (state is None or record.state is state)
        ]

    def target(self, tag: str) -> TargetRecord | None:
        # The whole table, as planning reads it anyway: a dry run asks for one target only
        # after it planned, and then this is a lookup, not a query.
        return self._stored_targets().get(tag) or self._planned.get(tag)

    def ensure_target(self, target: Target, now: datetime) -> TargetRecord:
        stored = self.target(target.tag)
        return stored or TargetRecord.new(target, now=now)

    def builds(self, *, tag: str | None = None, active_only: bool = False) -> list[BuildRecord]:
        return self._inner.builds(tag=tag, active_only=active_only)

    def save(
        self,
        *,
        targets: Sequence[TargetRecord] = (),
        builds: Sequence[BuildRecord] = (),
        events: Sequence[Event] = (),
    ) -> None:
        pass

    # -- the outbox and flags: reads go to the real store, writes go nowhere -------------

    def pending_events(self, now: datetime, limit: int = 50) -> list[StoredEvent]:
        return self._inner.pending_events(now, limit)

    def outbox_events(self, message_key: str) -> list[StoredEvent]:
        return self._inner.outbox_events(message_key)

    def outbox_backlog(self) -> int:
        return self._inner.outbox_backlog()

    def mark_delivered(self, event_id: int, now: datetime, ref: MessageRef | None = None) -> None:
        pass

    def mark_undelivered(
        self, event_id: int, error: str, next_attempt_at: datetime, now: datetime
    ) -> None:
        pass

    def message_ref(self, message_key: str) -> MessageRef | None:
        return self._inner.message_ref(message_key)

    def flag(self, name: str) -> str | None:
        return self._inner.flag(name)

    def set_flag(
        self, name: str, value: str | None, now: datetime, events: Sequence[Event] = ()
    ) -> None:
        pass

    def record_fleet(self, nodes: Sequence[ParsedNode], now: datetime) -> None:
        self._overlay.record_fleet(nodes, now)

    def fleet_nodes(self) -> list[FleetRecord]:
        # What this dry run listed, once it listed; before that, what the real store knows.
        return self._overlay.fleet_nodes() or self._inner.fleet_nodes()

    def fleet_history(self, name: str) -> list[FleetRecord]:
        return self._inner.fleet_history(name) + self._overlay.fleet_history(name)

    def flatcar_listings(self) -> list[Listing]:
        # A body this dry run read wins over what the real store knows, for its feed: the
        # releases it lists are present; the ones it dropped were last listed at the
        # feed's last success (as the real store would record it).
        last_success = {state.name: state.last_success_at for state in self._inner.feed_states()}
        merged: list[Listing] = []
        for listing in self._inner.flatcar_listings():
            polled = self._polled.get(listing.feed)
            if polled is not None and listing.version in polled:
                continue
            if polled is not None and listing.present:
                seen = last_success.get(listing.feed) or listing.last_seen_at
                listing = replace(listing, present=False, last_seen_at=seen)
            merged.append(listing)
        merged += [
            listing
            for listing in self._overlay.flatcar_listings()
            if listing.version in self._polled.get(listing.feed, set())
        ]
        return merged

    def record_deletion(self, deletion: DeletionRecord, events: Sequence[Event] = ()) -> None:
        pass

    def deletions(self) -> list[DeletionRecord]:
        return self._inner.deletions()

    def proofs(self) -> list[ProofRecord]:
        return self._inner.proofs()

    def save_proofs(
        self,
        *,
        proofs: Sequence[ProofRecord] = (),
        removed: Sequence[str] = (),
        targets: Sequence[TargetRecord] = (),
        events: Sequence[Event] = (),
    ) -> None:
        pass

    # -- driver bases: read through, written to the overlay --------------------------------

    def bases(self) -> list[BaseRecord]:
        merged = {record.tag: record for record in self._inner.bases()}
        merged.update((record.tag, record) for record in self._overlay.bases())
        return [merged[tag] for tag in sorted(merged)]

    def save_bases(
        self,
        *,
        bases: Sequence[BaseRecord] = (),
        targets: Sequence[TargetRecord] = (),
        events: Sequence[Event] = (),
    ) -> None:
        self._overlay.save_bases(bases=bases)
