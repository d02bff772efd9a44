"""The typed events and their JSON (``domain/targets/events.py``): one class per kind, each through
the outbox's JSON and back unchanged, the stored shape of a build's events kept as older
releases wrote it, and the tolerant reader (a field missing, of another type or unreadable
takes its default; a key no field names is ignored; a payload that is not an object reads
as an empty one; only an unknown kind is refused).
"""

from __future__ import annotations

import json
from dataclasses import fields, replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from releasebot.domain.shared.versions import Arch
from releasebot.domain.targets.builds import BuildRecord, BuildState, FailureReason
from releasebot.domain.targets.events import (
    BUILD_EVENT_TYPES,
    EVENT_TYPES,
    BuildIncompatible,
    BuildRetrying,
    Event,
    EventKind,
    FeedFailing,
    FleetExposed,
    ImageRefused,
    build_event,
    read_event,
    refused_event,
)
from releasebot.domain.targets.models import TargetRecord, TargetState
from tests.support.targets import make_target

T0 = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
HEAD = {"message_key", "subject", "created_at"}
SAMPLES: dict[str, Any] = {
    "str | None": "some text",
    "int | None": 7,
    "tuple[str, ...]": ("a", "b"),
    "datetime | None": T0 - timedelta(hours=3),
    "bool": True,
}
BUILD_KEYS = {  # what every build event's JSON holds, as releases since signing wrote it
    "tag",
    "attempt",
    "max_attempts",
    "driver_version",
    "flatcar_version",
    "flatcar_channel",
    "kernel_release",
    "arches",
    "jobs",
    "digest",
    "arch_digests",
    "error",
    "reasons",
    "log_tail",
    "next_attempt_at",
    "signed_by",
}


def full(cls: type[Event]) -> Event:
    """An event of ``cls`` with every field set to a value other than its default."""
    values = {f.name: SAMPLES[str(f.type)] for f in fields(cls) if f.name not in HEAD}
    return cls(message_key="k#1", subject="s", created_at=T0, **values)


def through_the_outbox(event: Event) -> Event:
    payload = json.loads(json.dumps(event.marshal()))
    return read_event(event.kind, event.message_key, event.subject, event.created_at, payload)


def test_every_kind_has_its_class() -> None:
    assert set(EVENT_TYPES) == set(EventKind)
    assert all(cls.kind is kind for kind, cls in EVENT_TYPES.items())
    assert set(BUILD_EVENT_TYPES) == {
        EventKind.BUILD_STARTED,
        EventKind.TAG_PUBLISHED,
        EventKind.BUILD_RETRYING,
        EventKind.BUILD_FAILED,
        EventKind.RETRIES_EXHAUSTED,
        EventKind.BUILD_INCOMPATIBLE,
    }


@pytest.mark.parametrize("kind", list(EventKind))
def test_each_event_goes_through_its_json_unchanged(kind: EventKind) -> None:
    event = full(EVENT_TYPES[kind])
    assert through_the_outbox(event) == event
    assert set(event.marshal()) == {f.name for f in fields(event)} - HEAD


def test_times_tuples_and_flags_have_their_json_form() -> None:
    refused = refused_event(
        node="gpu-0", tag=None, reason="r", image=False, log_tail=None, started_at=T0, now=T0
    )
    assert refused.marshal()["image_refused"] == "no"
    assert full(ImageRefused).marshal()["image_refused"] == "yes"
    exposed = full(FleetExposed).marshal()
    assert exposed["exposed_since"] == (T0 - timedelta(hours=3)).isoformat()
    assert exposed["running"] == ["a", "b"]


def test_a_builds_json_keeps_the_shape_older_releases_wrote() -> None:
    record = replace(
        TargetRecord.new(make_target(), now=T0),
        state=TargetState.RETRYING,
        attempts=2,
        next_attempt_at=T0 + timedelta(minutes=5),
    )
    failed = BuildRecord(
        tag=record.tag,
        arch=Arch.AMD64,
        attempt=2,
        job_name="rb-job-amd64-2",
        destination_tag="d",
        state=BuildState.FAILED,
        created_at=T0,
        reason=FailureReason.OOM_KILLED,
        log_tail="Killed",
    )
    event = build_event(EventKind.BUILD_RETRYING, record, T0, [failed], 3, "oom")
    assert isinstance(event, BuildRetrying)
    payload = event.marshal()
    assert set(payload) == BUILD_KEYS
    assert payload["next_attempt_at"] == (T0 + timedelta(minutes=5)).isoformat()
    assert payload["reasons"] == ["OOMKilled"]
    assert payload["jobs"] == ["rb-job-amd64-2"]
    assert (payload["attempt"], payload["log_tail"], payload["error"]) == (2, "Killed", "oom")
    incompatible = build_event(EventKind.BUILD_INCOMPATIBLE, record, T0, [], 3, "no")
    assert isinstance(incompatible, BuildIncompatible)
    assert set(incompatible.marshal()) == BUILD_KEYS | {"alternative_branch", "alternative_tag"}


def test_the_reader_takes_what_it_can_and_defaults_the_rest() -> None:
    payload = {
        "feed": "stable",
        "error": 503,  # a number where text belongs
        "failing_since": "last week",  # no time
        "consecutive_failures": "72",  # text where a number belongs
        "later": ["a key no field names"],
    }
    event = read_event("feed_failing", "feed:stable", "stable", T0, payload)
    assert event == FeedFailing(
        message_key="feed:stable", subject="stable", created_at=T0, feed="stable"
    )
    bools = read_event("fleet_exposed", "k", "s", T0, {"running_count": True, "running": "gpu-0"})
    assert isinstance(bools, FleetExposed)
    assert (bools.running_count, bools.running) == (None, ())
    assert read_event("fleet_covered", "k", "s", T0, ["not", "an", "object"]).marshal() == {
        "flatcar_version": None,
        "exposed_since": None,
    }


def test_only_an_unknown_kind_is_refused() -> None:
    with pytest.raises(ValueError, match="tag_teleported"):
        read_event("tag_teleported", "k", "s", T0, {})
