"""The ``StateStore`` contract for notifications: outbox, message refs and flags, on every backend.

Covers events saved in the same transaction as targets and builds (a failing save writes
no event), the order and due time of ``pending_events``, backoff through
``mark_undelivered``, ``mark_delivered`` storing the message ref with it, ``outbox_events``
per key, flags set and cleared, and that the dry-run store writes none of it.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import text

from releasebot.domain.ports import StateStore
from releasebot.domain.shared.errors import StoreError
from releasebot.domain.targets.events import (
    Event,
    EventKind,
    FeedFailing,
    MessageRef,
    build_key,
    feed_key,
    read_event,
)
from releasebot.domain.targets.models import TargetRecord, TargetState
from releasebot.service.notifications import discard_undeliverable
from releasebot.store.dryrun import DryRunStore
from releasebot.store.limits import ERROR_MAX_CHARS
from tests.contract.conftest import Backend
from tests.contract.test_store_builds import build, planned_target

T0 = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


def event(
    kind: EventKind = EventKind.BUILD_STARTED,
    tag: str = "580.178.04-4593.2.5",
    attempt: int = 1,
    at: datetime = T0,
    **payload: str | int | list[str] | None,
) -> Event:
    return read_event(kind, build_key(tag, attempt), tag, at, payload)


def test_events_are_saved_with_the_state_change(store: StateStore) -> None:
    record = planned_target(store)
    building = replace(record, state=TargetState.BUILDING, attempts=1, updated_at=T0)
    started = event(tag=record.tag, arches=["amd64", "arm64"], jobs=["rb-a"], attempt=1)
    store.save(targets=[building], builds=[build(record)], events=[started])

    [stored] = store.pending_events(T0)
    assert stored.event == started
    assert stored.event.payload["arches"] == ["amd64", "arm64"]
    assert stored.event.created_at.tzinfo is UTC
    assert (stored.attempts, stored.next_attempt_at, stored.last_error) == (0, None, None)
    assert stored.delivered_at is None
    assert store.outbox_backlog() == 1
    saved = store.target(record.tag)
    assert saved is not None
    assert saved.state is TargetState.BUILDING


def test_a_failing_save_writes_no_event(store: StateStore) -> None:
    record = planned_target(store)
    orphan = replace(build(record), tag="580.1.1-flatcar1.2.3", job_name="rb-orphan")
    with pytest.raises(StoreError):
        store.save(builds=[build(record), orphan], events=[event(tag=record.tag)])
    assert store.pending_events(T0) == []
    assert store.outbox_backlog() == 0


def test_a_naive_event_time_is_refused_and_nothing_is_written(store: StateStore) -> None:
    record = planned_target(store)
    naive = event(tag=record.tag, at=datetime(2026, 11, 30, 12, 0))  # noqa: DTZ001
    building = replace(record, state=TargetState.BUILDING)
    with pytest.raises(StoreError):
        store.save(targets=[building], events=[naive])
    assert store.outbox_backlog() == 0
    saved = store.target(record.tag)
    assert saved is not None
    assert saved.state is TargetState.UNKNOWN


def test_pending_events_come_oldest_first_and_respect_the_limit(store: StateStore) -> None:
    kinds = [EventKind.BUILD_STARTED, EventKind.TAG_PUBLISHED, EventKind.FEED_FAILING]
    for kind in kinds:  # events alone, without any state change, are a valid save too
        store.save(events=[event(kind, at=T0 + timedelta(seconds=len(kind)))])
    pending = store.pending_events(T0)
    assert [p.event.kind for p in pending] == kinds
    assert [p.id for p in pending] == sorted(p.id for p in pending)
    assert len({p.id for p in pending}) == 3
    assert [p.event.kind for p in store.pending_events(T0, limit=2)] == kinds[:2]


def test_an_undelivered_event_waits_for_its_next_attempt(store: StateStore) -> None:
    store.save(events=[event(), event(EventKind.TAG_PUBLISHED)])
    first, second = store.pending_events(T0)
    later = T0 + timedelta(minutes=5)
    store.mark_undelivered(first.id, "slack chat.postMessage: HTTP 500", later, T0)

    assert [p.id for p in store.pending_events(T0)] == [second.id]
    assert [p.id for p in store.pending_events(later)] == [first.id, second.id]
    [again, _] = store.pending_events(later)
    assert (again.attempts, again.next_attempt_at) == (1, later)
    assert again.last_error == "slack chat.postMessage: HTTP 500"

    store.mark_undelivered(first.id, "x" * (ERROR_MAX_CHARS + 50), later, later)
    [again, _] = store.pending_events(later)
    assert again.attempts == 2
    assert again.last_error is not None
    assert len(again.last_error) == ERROR_MAX_CHARS
    assert store.outbox_backlog() == 2  # undelivered events still wait


def test_mark_delivered_stores_the_message_ref_with_it(store: StateStore) -> None:
    store.save(events=[event(), event(EventKind.TAG_PUBLISHED, at=T0 + timedelta(minutes=9))])
    first, second = store.pending_events(T0)
    key = first.event.message_key
    ref = MessageRef(key, "C0RELEASES", "1796040000.000100")
    assert store.message_ref(key) is None

    store.mark_delivered(first.id, T0, ref)
    assert store.message_ref(key) == ref
    assert [p.id for p in store.pending_events(T0)] == [second.id]
    assert store.outbox_backlog() == 1

    # A later delivery without a ref keeps it; one with a new ref (a re-post) replaces it.
    store.mark_delivered(second.id, T0 + timedelta(minutes=10))
    assert store.message_ref(key) == ref
    moved = MessageRef(key, "C0RELEASES", "1796040999.000200")
    store.mark_delivered(second.id, T0 + timedelta(minutes=11), moved)
    assert store.message_ref(key) == moved
    assert store.outbox_backlog() == 0

    history = store.outbox_events(key)
    assert [h.id for h in history] == [first.id, second.id]
    assert [h.delivered_at for h in history] == [T0, T0 + timedelta(minutes=10)]
    assert all(h.next_attempt_at is None for h in history)


def test_marking_a_delivered_event_undelivered_changes_nothing(store: StateStore) -> None:
    store.save(events=[event()])
    [stored] = store.pending_events(T0)
    store.mark_delivered(stored.id, T0)
    store.mark_undelivered(stored.id, "late failure", T0 + timedelta(hours=1), T0)
    [kept] = store.outbox_events(stored.event.message_key)
    assert (kept.delivered_at, kept.attempts, kept.last_error) == (T0, 0, None)


def test_outbox_events_are_per_key(store: StateStore) -> None:
    store.save(
        events=[
            event(attempt=1),
            read_event(
                EventKind.FEED_FAILING, feed_key("stable"), "stable", T0, {"error": "é\x00"}
            ),
            event(EventKind.BUILD_RETRYING, attempt=1),
            event(attempt=2),
        ]
    )
    build_events = store.outbox_events(build_key("580.178.04-4593.2.5", 1))
    assert [e.event.kind for e in build_events] == [
        EventKind.BUILD_STARTED,
        EventKind.BUILD_RETRYING,
    ]
    [feed] = store.outbox_events(feed_key("stable"))
    assert isinstance(feed.event, FeedFailing)
    assert feed.event.error == "é\x00"
    assert store.outbox_events("nothing#1") == []


def test_flags_are_set_replaced_and_cleared(store: StateStore) -> None:
    assert store.flag("paused") is None
    store.set_flag("paused", "U024BE7LH", T0)
    assert store.flag("paused") == "U024BE7LH"
    store.set_flag("paused", "U0OTHER", T0 + timedelta(minutes=1))
    assert store.flag("paused") == "U0OTHER"
    store.set_flag("paused", None, T0 + timedelta(minutes=2))
    assert store.flag("paused") is None
    store.set_flag("paused", None, T0)  # clearing a flag that is not set is fine
    assert store.flag("other") is None


def test_the_dry_run_store_writes_nothing_and_reads_through(store: StateStore) -> None:
    record = planned_target(store)
    store.save(events=[event(tag=record.tag)])
    store.set_flag("paused", "U1", T0)
    [stored] = store.pending_events(T0)
    dry = DryRunStore(store)

    building = replace(record, state=TargetState.BUILDING)
    dry.save(targets=[building], builds=[build(record)], events=[event(EventKind.TAG_PUBLISHED)])
    dry.mark_delivered(stored.id, T0, MessageRef(stored.event.message_key, "C1", "1.2"))
    dry.mark_undelivered(stored.id, "boom", T0 + timedelta(hours=1), T0)
    dry.set_flag("paused", None, T0)
    dry.set_flag("other", "x", T0)

    assert store.pending_events(T0) == [stored]
    assert store.message_ref(stored.event.message_key) is None
    assert (store.flag("paused"), store.flag("other")) == ("U1", None)
    assert _state(store.target(record.tag)) is TargetState.UNKNOWN
    # Reads go to the real store.
    assert dry.pending_events(T0) == [stored]
    assert dry.outbox_events(stored.event.message_key) == [stored]
    assert dry.outbox_backlog() == 1
    assert dry.flag("paused") == "U1"
    assert dry.message_ref(stored.event.message_key) is None


def test_pending_events_read_through_the_delivered_at_index(sql_backend: Backend) -> None:
    """The outbox grows forever; finding the undelivered rows must not scan it."""
    assert sql_backend.engine is not None
    query = "SELECT id FROM outbox WHERE delivered_at IS NULL ORDER BY id"
    with sql_backend.engine.begin() as conn:
        if sql_backend.name == "sqlite":
            plan = conn.execute(text(f"EXPLAIN QUERY PLAN {query}")).all()
        else:  # on a tiny table PostgreSQL scans anyway, unless told that scans are dear
            conn.execute(text("SET LOCAL enable_seqscan = off"))
            plan = conn.execute(text(f"EXPLAIN {query}")).all()
    assert any("ix_outbox_delivered_at" in str(row) for row in plan), plan


def _state(record: TargetRecord | None) -> TargetState | None:
    return None if record is None else record.state


def test_a_store_without_a_notifier_keeps_no_event_but_every_state_change(
    backend: Backend,
) -> None:
    # As the wiring builds it when Slack is off: the same store, events dropped.
    store = backend.without_events()
    record = planned_target(store)
    building = replace(record, state=TargetState.BUILDING, attempts=1, updated_at=T0)
    store.save(targets=[building], builds=[build(record)], events=[event(tag=record.tag)])
    store.set_flag("paused", "U1", T0, events=[event(EventKind.FEED_FAILING, tag="nvidia")])
    assert store.pending_events(T0 + timedelta(days=1)) == []
    assert store.outbox_backlog() == 0
    saved = store.target(record.tag)
    assert saved is not None
    assert saved.state is TargetState.BUILDING
    assert len(store.builds(tag=record.tag)) == 1
    assert store.flag("paused") == "U1"


def test_discarding_marks_every_undelivered_event_delivered(store: StateStore) -> None:
    record = planned_target(store)
    events = [event(tag=record.tag, attempt=n) for n in range(1, 5)]
    store.save(events=events)
    [first, *_] = store.pending_events(T0)
    store.mark_undelivered(first.id, "later", T0 + timedelta(hours=6), T0)  # backing off
    assert discard_undeliverable(store, T0, batch=3) == 4
    assert store.outbox_backlog() == 0
    assert discard_undeliverable(store, T0) == 0
