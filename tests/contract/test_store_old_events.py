"""Outbox rows an older releasebot wrote still read as typed events, on SQLite and PostgreSQL.

The rows are inserted as SQL, the way those releases stored them (their JSON, not today's
classes): a build event from before signing (no ``signed_by``), an incompatible build from
before its alternative was told, a feed alert, and rows edited behind releasebot's back (a
field of the wrong type, a time that is no time, a key no field names, a payload that is
not an object). Each reads back as its class with what it carried, the rest defaulted, and
renders as the event made today with the same fields; an unknown kind is one
``StoreError`` naming the row, as before.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import insert

from releasebot.domain.shared.errors import StoreError
from releasebot.domain.targets.events import (
    BuildIncompatible,
    BuildStarted,
    FeedFailing,
    FleetCovered,
    TagPublished,
    build_key,
)
from releasebot.notify.render import render_message
from releasebot.store.tables import outbox
from tests.contract.conftest import Backend

T0 = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
TAG = "580.105.08-flatcar4459.2.1"
REPOSITORY = "registry.example.com/gpu/nvidia-driver"
JOB = "rb-580-105-08-4459-2-1-amd64-1"
BEFORE_SIGNING: dict[str, Any] = {  # the build payload as the first outbox release wrote it
    "tag": TAG,
    "attempt": 1,
    "max_attempts": 3,
    "driver_version": "580.105.08",
    "flatcar_version": "4459.2.1",
    "flatcar_channel": "stable",
    "kernel_release": "6.12.54-flatcar",
    "arches": ["amd64"],
    "jobs": [JOB],
    "digest": None,
    "arch_digests": [],
    "error": None,
    "reasons": [],
    "log_tail": None,
    "next_attempt_at": None,
}


def put(backend: Backend, kind: str, key: str, subject: str, payload: object, minutes: int) -> None:
    assert backend.engine is not None
    row = {
        "kind": kind,
        "message_key": key,
        "subject": subject,
        "payload": json.dumps(payload),
        "created_at": T0 + timedelta(minutes=minutes),
    }
    with backend.engine.begin() as conn:
        conn.execute(insert(outbox), [row])


def test_rows_of_older_releases_read_as_typed_events(sql_backend: Backend) -> None:
    key = build_key(TAG, 1)
    put(sql_backend, "build_started", key, TAG, BEFORE_SIGNING, 0)
    published = {**BEFORE_SIGNING, "digest": "sha256:" + "d" * 64, "jobs": []}
    put(sql_backend, "tag_published", key, TAG, published, 30)
    incompatible = {**BEFORE_SIGNING, "error": "amd64: Incompatible: exit code 1"}
    put(sql_backend, "build_incompatible", build_key(TAG, 2), TAG, incompatible, 40)
    failing = {"feed": "stable", "error": "HTTP 503", "failing_since": T0.isoformat()}
    put(sql_backend, "feed_failing", "feed:stable@x", "stable", failing, 50)

    started, done, broken, feed = (
        s.event for s in sql_backend.store.pending_events(T0 + timedelta(days=1))
    )
    assert isinstance(started, BuildStarted)
    assert (started.attempt, started.jobs, started.signed_by) == (1, (JOB,), None)
    assert isinstance(done, TagPublished)
    assert done.digest == published["digest"]
    assert isinstance(broken, BuildIncompatible)
    assert (broken.alternative_branch, broken.alternative_tag) == (None, None)
    assert broken.error == "amd64: Incompatible: exit code 1"
    assert isinstance(feed, FeedFailing)
    assert (feed.failing_since, feed.consecutive_failures) == (T0, None)

    # Rendered as the same events made today, with nothing but what the rows said.
    today = [
        BuildStarted(
            message_key=key,
            subject=TAG,
            created_at=T0,
            **typed(BEFORE_SIGNING),
        ),
        TagPublished(
            message_key=key,
            subject=TAG,
            created_at=T0 + timedelta(minutes=30),
            **typed(published),
        ),
    ]
    assert render_message([started, done], REPOSITORY) == render_message(today, REPOSITORY)


def test_rows_edited_behind_releasebots_back_read_with_defaults(sql_backend: Backend) -> None:
    odd = {
        **BEFORE_SIGNING,
        "attempt": "2",  # text where a number belongs
        "arches": "amd64",  # text where a list belongs
        "next_attempt_at": "tomorrow",  # no time
        "max_attempts": True,  # a JSON boolean is no count
        "added_later": {"nested": 1},  # a key no field names
    }
    put(sql_backend, "build_started", build_key(TAG, 1), TAG, odd, 0)
    put(sql_backend, "fleet_covered", "fleet:4459.2.1@x", "Flatcar 4459.2.1", [1, 2], 1)

    started, covered = (s.event for s in sql_backend.store.pending_events(T0 + timedelta(days=1)))
    assert isinstance(started, BuildStarted)
    assert (started.attempt, started.max_attempts, started.arches) == (None, None, ())
    assert started.next_attempt_at is None
    assert started.jobs == (JOB,)
    assert isinstance(covered, FleetCovered)
    assert (covered.flatcar_version, covered.exposed_since) == (None, None)
    assert render_message([started], REPOSITORY).text.startswith(f"Building {TAG}")


def test_an_unknown_kind_is_one_error_naming_the_row(sql_backend: Backend) -> None:
    put(sql_backend, "tag_teleported", "x#1", "x", {}, 0)
    with pytest.raises(StoreError, match="outbox"):
        sql_backend.store.pending_events(T0 + timedelta(days=1))


def typed(payload: dict[str, Any]) -> dict[str, Any]:
    """A build payload's values as the event's fields take them (lists as tuples)."""
    return {k: tuple(v) if isinstance(v, list) else v for k, v in payload.items()}
