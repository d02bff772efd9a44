"""``DryRunStore``: the real store read, nothing written, for ``--dry-run``.

Reads go to the real store; what a dry run would write lands in an in-memory overlay
(``MemoryStateStore``) so the rest of the cycle sees it: a feed body that changed is parsed
and its releases planned, exactly as a real cycle would, yet the database never changes.
A fleet listing is overlaid too (``fleet_nodes`` shows it once the dry run listed the
fleet). Events, deliveries and flags are not overlaid: a dry run announces nothing and
pauses nothing, so those writes are simply dropped; so is a retention deletion's record.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime

from releasebot.domain.bases import BaseRecord
from releasebot.domain.builds import BuildRecord
from releasebot.domain.events import Event, MessageRef, StoredEvent
from releasebot.domain.fleet import ParsedNode
from releasebot.domain.fleet_records import FleetRecord
from releasebot.domain.models import (
    DriverRelease,
    FeedState,
    FlatcarRelease,
    Target,
    TargetRecord,
    TargetState,
    Validators,
)
from releasebot.domain.ports import StateStore
from releasebot.domain.proof import ProofRecord
from releasebot.domain.retention import DeletionRecord, Listing
from releasebot.store.memory import MemoryStateStore


class DryRunStore:
    """A ``StateStore`` that reads ``inner`` and never writes to it."""

    def __init__(self, inner: StateStore) -> None:
        self._inner = inner
        self._overlay = MemoryStateStore()
        self._planned: dict[str, TargetRecord] = {}
        self._polled: dict[str, set[str]] = {}
        """The versions of the latest Flatcar body this dry run read, per feed."""

    def revisions(self) -> dict[str, int]:
        """The real store's counters plus the overlay's: either moving moves the sum."""
        counters = self._inner.revisions()
        for table, value in self._overlay.revisions().items():
            counters[table] = counters.get(table, 0) + value
        return counters

    def feed_state(self, feed: str) -> FeedState | None:
        return self._inner.feed_state(feed)

    def feed_states(self) -> list[FeedState]:
        return self._inner.feed_states()

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
        merged = {r.version: r for r in self._inner.flatcar_releases(feed)}
        merged.update((r.version, r) for r in self._overlay.flatcar_releases(feed))
        return sorted(merged.values(), key=lambda release: release.version)

    def driver_releases(self, feed: str) -> list[DriverRelease]:
        merged = {r.version: r for r in self._inner.driver_releases(feed)}
        merged.update((r.version, r) for r in self._overlay.driver_releases(feed))
        return sorted(merged.values(), key=lambda driver: driver.version)

    def sync_targets(self, planned: Sequence[Target], now: datetime) -> list[TargetRecord]:
        result = []
        for target in planned:
            record = TargetRecord.new(target, now=now)
            stored = self._inner.target(record.tag)
            result.append(record if stored is None else stored.replanned(record, now))
        self._planned = {record.tag: record for record in result}
        return result

    def targets(
        self, *, required_only: bool = True, state: TargetState | None = None
    ) -> list[TargetRecord]:
        return self._inner.targets(required_only=required_only, state=state)

    def target(self, tag: str) -> TargetRecord | None:
        return self._inner.target(tag) or self._planned.get(tag)

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
