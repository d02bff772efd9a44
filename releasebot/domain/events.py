"""Events worth telling a human, kept in the store's outbox until delivered.

An event is written in the SAME transaction as the state change it describes, so a crash
can neither lose it nor announce a change that was rolled back; delivery happens later,
from the outbox, and never blocks a build.

``message_key`` groups the events of one build (a target's attempt): they edit one chat
message in place, the first event posts it. Events of a feed group under the feed's name.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime

Payload = Mapping[str, "str | int | list[str] | None"]


class EventKind(enum.StrEnum):
    BUILD_STARTED = "build_started"
    TAG_PUBLISHED = "tag_published"
    BUILD_RETRYING = "build_retrying"
    BUILD_FAILED = "build_failed"
    """A permanent failure: waits for a human."""
    RETRIES_EXHAUSTED = "retries_exhausted"
    FEED_FAILING = "feed_failing"
    """A feed has failed for longer than the configured threshold."""
    FEED_RECOVERED = "feed_recovered"


@dataclass(frozen=True)
class Event:
    kind: EventKind
    message_key: str
    """Events with the same key edit one message (``<tag>#<attempt>`` or ``feed:<name>``)."""
    subject: str
    """The tag or feed the event is about."""
    created_at: datetime
    payload: Payload = field(default_factory=dict)


@dataclass(frozen=True)
class StoredEvent:
    """An outbox row: the event plus its delivery bookkeeping."""

    id: int
    event: Event
    attempts: int = 0
    next_attempt_at: datetime | None = None
    last_error: str | None = None
    delivered_at: datetime | None = None


@dataclass(frozen=True)
class MessageRef:
    """Where the chat message of one ``message_key`` lives (to edit it and thread under it)."""

    message_key: str
    channel: str
    ts: str


def build_key(tag: str, attempt: int) -> str:
    return f"{tag}#{attempt}"


def feed_key(feed: str) -> str:
    return f"feed:{feed}"
