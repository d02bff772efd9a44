"""Retention in the ``StateStore``: the same suite on memory, SQLite and PostgreSQL.

``flatcar_listings`` says, per Flatcar feed and release, whether the feed still lists it
and when it last did (what a feed body that drops a release changes, and what a repeated
body does not); ``record_deletion`` keeps each deletion with its Slack event in one
transaction, in order, with aware UTC times, and without the event when no notifier is
configured; an unreadable timestamp is one ``StoreError`` naming the row; the dry-run
store reads the real store's listings and records nothing.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from releasebot.domain.fleet.retention import DeletionRecord, Listing
from releasebot.domain.ports import StateStore
from releasebot.domain.shared.errors import StoreError
from releasebot.domain.targets.events import EventKind, deletion_key, read_event
from releasebot.store.dryrun import DryRunStore
from tests.contract.conftest import Backend
from tests.contract.test_store_contract import SEEN, URL, flatcar

T0 = datetime(2026, 11, 1, 12, 0, tzinfo=UTC)
DIGEST = "sha256:" + "e" * 64


def by_key(listings: list[Listing]) -> dict[tuple[str, str], Listing]:
    return {(listing.feed, listing.version): listing for listing in listings}


def test_listings_say_when_a_feed_last_listed_a_release(store: StateStore) -> None:
    assert store.flatcar_listings() == []
    store.record_flatcar_feed("stable", URL, [flatcar("4593.2.4"), flatcar("4593.2.5")], SEEN, T0)
    later = T0 + timedelta(days=7)
    store.record_flatcar_feed("stable", URL, [flatcar("4593.2.5")], SEEN, later)
    store.record_flatcar_feed("lts", URL, [flatcar("4081.3.10", channel="lts")], SEEN, later)
    listings = by_key(store.flatcar_listings())
    assert set(listings) == {("stable", "4593.2.4"), ("stable", "4593.2.5"), ("lts", "4081.3.10")}
    dropped = listings["stable", "4593.2.4"]
    assert (dropped.present, dropped.last_seen_at) == (False, T0)
    assert dropped.last_seen_at.tzinfo is not None
    assert listings["stable", "4593.2.5"].present


def test_a_release_listed_again_is_present_again(store: StateStore) -> None:
    store.record_flatcar_feed("stable", URL, [flatcar("4593.2.4")], SEEN, T0)
    store.record_flatcar_feed("stable", URL, [], SEEN, T0 + timedelta(days=1))
    back = T0 + timedelta(days=2)
    store.record_flatcar_feed("stable", URL, [flatcar("4593.2.4")], SEEN, back)
    (listing,) = store.flatcar_listings()
    assert (listing.present, listing.last_seen_at) == (True, back)


def deletion(tag: str, at: datetime, reason: str = "left every feed") -> DeletionRecord:
    return DeletionRecord(tag, DIGEST, "4230.2.4", reason, at, attachments=2)


def test_a_deletion_is_recorded_with_its_event(store: StateStore) -> None:
    first = deletion("580.105.08-flatcar4230.2.4", T0)
    event = read_event(EventKind.TAG_DELETED, deletion_key(first.tag, DIGEST), first.tag, T0, {})
    store.record_deletion(first, events=[event])
    second = deletion("580.105.08-flatcar4230.2.4-amd64", T0 + timedelta(minutes=1), "x" * 5000)
    store.record_deletion(second)
    recorded = store.deletions()
    assert [r.tag for r in recorded] == [first.tag, second.tag]
    assert recorded[0] == first
    assert len(recorded[1].reason) <= 1000  # trimmed to the column, never refused
    (pending,) = store.pending_events(T0 + timedelta(hours=1))
    assert pending.event.kind is EventKind.TAG_DELETED
    assert pending.event.message_key == f"retention:{first.tag}@{DIGEST}"


def test_a_store_without_a_notifier_records_the_deletion_but_no_event(
    backend: Backend,
) -> None:
    store = backend.without_events()
    first = deletion("580.105.08-flatcar4230.2.4", T0)
    event = read_event(EventKind.TAG_DELETED, deletion_key(first.tag, DIGEST), first.tag, T0, {})
    store.record_deletion(first, events=[event])
    assert store.deletions() == [first]
    assert store.pending_events(T0 + timedelta(hours=1)) == []
    assert store.outbox_backlog() == 0


@pytest.mark.parametrize(
    ("table", "column"),
    [("flatcar_feed_entries", "last_seen_at"), ("retention_deletions", "deleted_at")],
)
def test_an_unreadable_timestamp_is_one_store_error(
    sql_backend: Backend, table: str, column: str
) -> None:
    # SQLite keeps any text in a timestamp column; PostgreSQL keeps 'infinity', which no
    # Python datetime can hold
    bad = "yesterday" if sql_backend.name == "sqlite" else "infinity"
    store = sql_backend.store
    store.record_flatcar_feed("stable", URL, [flatcar("4593.2.4")], SEEN, T0)
    store.record_deletion(deletion("580.105.08-flatcar4230.2.4", T0))
    assert sql_backend.engine is not None
    with sql_backend.engine.begin() as conn:
        conn.exec_driver_sql(f"UPDATE {table} SET {column} = '{bad}'")
    read = store.flatcar_listings if table == "flatcar_feed_entries" else store.deletions
    with pytest.raises(StoreError) as caught:
        read()
    assert f"table {table}" in str(caught.value)
    assert column in str(caught.value)
    assert "correct or delete that row" in str(caught.value)


def test_a_naive_deletion_time_is_refused(store: StateStore) -> None:
    with pytest.raises(StoreError):
        store.record_deletion(deletion("580.105.08-flatcar4230.2.4", datetime(2026, 11, 1)))  # noqa: DTZ001
    assert store.deletions() == []


def test_the_dry_run_store_reads_listings_and_records_nothing(store: StateStore) -> None:
    store.record_flatcar_feed("stable", URL, [flatcar("4593.2.4")], SEEN, T0)
    dry = DryRunStore(store)
    assert dry.flatcar_listings() == store.flatcar_listings()
    dry.record_flatcar_feed("stable", URL, [], SEEN, T0 + timedelta(days=1))
    (polled,) = dry.flatcar_listings()
    assert (polled.present, polled.last_seen_at) == (False, T0)  # what the dry run polled wins
    dry.record_deletion(deletion("580.105.08-flatcar4593.2.4", T0))
    assert store.deletions() == []
    assert dry.deletions() == []
    (listing,) = store.flatcar_listings()
    assert listing.present is True
