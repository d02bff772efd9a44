"""Events worth telling a human, kept in the store's outbox until delivered.

An event is written in the SAME transaction as the state change it describes, so a crash
can neither lose it nor announce a change that was rolled back; delivery happens later,
from the outbox, and never blocks a build.

One frozen dataclass per kind (``EventKind`` names the kind, ``EVENT_TYPES`` maps it to its
class), so the code that makes an event and ``notify.render``, which draws it, are checked
against each other by mypy. Every event serialises itself: ``marshal`` gives the outbox's
JSON object (its fields by name: times as ISO 8601, tuples as lists, a flag as ``yes`` or
``no``), ``read_event`` makes the event back from a row. That reader is tolerant, as rows
written by an older releasebot or edited behind its back must still deliver: a field
missing, of another type or unreadable takes its default (nothing, an empty tuple), a key
no field names is ignored; only an unknown kind is refused (the store names the row).

``message_key`` groups the events of one build (a target's attempt): they edit one chat
message in place, the first event posts it. Events of a feed group under the feed's name,
the fleet's under the alert's subject and start. The feed and fleet alerts are made by
``domain.fleet.told`` (told once), a build's by ``build_event`` here.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, fields, replace
from datetime import datetime
from typing import Any, ClassVar, Self

from releasebot.domain.targets.builds import BuildRecord, BuildState
from releasebot.domain.targets.models import TargetRecord

Json = str | int | list[str] | None
"""A value of an event's JSON object (the outbox's ``payload`` column)."""
Payload = Mapping[str, Json]


class EventKind(enum.StrEnum):
    BUILD_STARTED = "build_started"
    TAG_PUBLISHED = "tag_published"
    BUILD_RETRYING = "build_retrying"
    BUILD_FAILED = "build_failed"
    """A permanent failure: waits for a human."""
    RETRIES_EXHAUSTED = "retries_exhausted"
    BUILD_INCOMPATIBLE = "build_incompatible"
    """NVIDIA's driver does not compile for the kernel: told once, never retried."""
    FEED_FAILING = "feed_failing"
    """A feed has failed for longer than the configured threshold."""
    FEED_RECOVERED = "feed_recovered"
    FLEET_EXPOSED = "fleet_exposed"
    """GPU nodes run, or will reboot into, a Flatcar version without a driver image."""
    FLEET_COVERED = "fleet_covered"
    FLEET_UNREADABLE = "fleet_unreadable"
    """The fleet could not be listed: planning follows the channel policy meanwhile."""
    FLEET_READABLE = "fleet_readable"
    TAG_DELETED = "tag_deleted"
    """Retention deleted a registry tag no node, feed or target needs any more."""
    IMAGE_PROVEN = "image_proven"
    """A GPU node rebooted into the image and proved it: edits the build's message."""
    IMAGE_REFUSED = "image_refused"
    """A GPU node rebooted into the image and could not prove it: the rollout halts there."""
    BASE_FAILED = "base_failed"
    """A driver base failed for good: every image of its driver and arch waits for it
    (``domain/targets/bases.py``); told once, not once per waiting target."""


# -- the shape every event shares, and its JSON ----------------------------------------------

_HEAD = frozenset({"message_key", "subject", "created_at"})
"""The fields every event has; they are the outbox row's own columns, not its JSON."""


@dataclass(frozen=True, kw_only=True)
class Event:
    """What every event says; the kinds below add what their message shows."""

    kind: ClassVar[EventKind]
    message_key: str
    """Events with the same key edit one message (``<tag>#<attempt>`` or ``feed:<name>``)."""
    subject: str
    """The tag or feed the event is about."""
    created_at: datetime

    def marshal(self) -> dict[str, Json]:
        """The JSON object the outbox stores: every field but the head, by name."""
        return {
            item.name: _to_json(getattr(self, item.name))
            for item in fields(self)
            if item.name not in _HEAD
        }

    @property
    def payload(self) -> dict[str, Json]:
        """``marshal()``: the event as the outbox keeps it (tests and logs read it)."""
        return self.marshal()

    @classmethod
    def unmarshal(
        cls, message_key: str, subject: str, created_at: datetime, payload: Mapping[str, object]
    ) -> Self:
        """The event back from its row, each field read by its type (the tolerant rule in
        the module's docstring)."""
        values = {
            item.name: _READERS[str(item.type)](payload.get(item.name))
            for item in fields(cls)
            if item.name not in _HEAD
        }
        return cls(message_key=message_key, subject=subject, created_at=created_at, **values)


def _to_json(value: object) -> Json:
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, tuple):
        return [str(item) for item in value]
    if value is None or isinstance(value, str | int):
        return value
    raise TypeError(f"an event field of type {type(value).__name__} has no JSON form")


def _read_text(value: object) -> str | None:
    return value if isinstance(value, str) else None


def _read_int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _read_texts(value: object) -> tuple[str, ...]:
    return tuple(str(item) for item in value) if isinstance(value, list | tuple) else ()


def _read_time(value: object) -> datetime | None:
    try:
        return datetime.fromisoformat(value) if isinstance(value, str) and value else None
    except ValueError:
        return None


def _read_yes(value: object) -> bool:
    return value == "yes"


_READERS: dict[str, Callable[[object], Any]] = {
    "str | None": _read_text,
    "int | None": _read_int,
    "tuple[str, ...]": _read_texts,
    "datetime | None": _read_time,
    "bool": _read_yes,
}
"""How a field of each declared type reads from JSON. An event field of another type is a
``KeyError`` the first time its class is read (``tests/unit/test_events.py`` reads each)."""


# -- a build attempt: one message, edited in place --------------------------------------------


@dataclass(frozen=True, kw_only=True)
class BuildEvent(Event):
    """What a build's message shows, in every event of the attempt (``build_event``).
    ``notify.render`` folds the events of one attempt: a later empty field keeps the
    earlier value (a failure does not repeat the jobs its start listed)."""

    tag: str | None = None
    attempt: int | None = None
    max_attempts: int | None = None
    """The last attempt the current budget allows (a person's retry starts a new one)."""
    driver_version: str | None = None
    flatcar_version: str | None = None
    flatcar_channel: str | None = None
    kernel_release: str | None = None
    arches: tuple[str, ...] = ()
    jobs: tuple[str, ...] = ()
    digest: str | None = None
    arch_digests: tuple[str, ...] = ()
    """``"<arch> <digest>"`` per arch, for a multi-arch index only."""
    error: str | None = None
    reasons: tuple[str, ...] = ()
    log_tail: str | None = None
    next_attempt_at: datetime | None = None
    signed_by: str | None = None
    """The fingerprint of the key whose signature was verified before publishing."""


@dataclass(frozen=True, kw_only=True)
class BuildStarted(BuildEvent):
    kind = EventKind.BUILD_STARTED


@dataclass(frozen=True, kw_only=True)
class TagPublished(BuildEvent):
    kind = EventKind.TAG_PUBLISHED


@dataclass(frozen=True, kw_only=True)
class BuildRetrying(BuildEvent):
    kind = EventKind.BUILD_RETRYING


@dataclass(frozen=True, kw_only=True)
class BuildFailed(BuildEvent):
    kind = EventKind.BUILD_FAILED


@dataclass(frozen=True, kw_only=True)
class RetriesExhausted(BuildEvent):
    kind = EventKind.RETRIES_EXHAUSTED


@dataclass(frozen=True, kw_only=True)
class BuildIncompatible(BuildEvent):
    kind = EventKind.BUILD_INCOMPATIBLE
    alternative_branch: str | None = None
    """The newest selected branch with a published image for this kernel: what to use."""
    alternative_tag: str | None = None


@dataclass(frozen=True, kw_only=True)
class ImageProven(Event):
    """The image was proven on a GPU node: edits the build's message (its key)."""

    kind = EventKind.IMAGE_PROVEN
    tag: str | None = None
    proven_node: str | None = None
    proven_at: datetime | None = None


@dataclass(frozen=True, kw_only=True)
class ImageRefused(Event):
    """A node could not prove its image after the reboot: FLUO halts there."""

    kind = EventKind.IMAGE_REFUSED
    tag: str | None = None
    node: str | None = None
    error: str | None = None
    image_refused: bool = False
    """The image is to blame (it is ``refused``: no other node's gate opens for it)."""
    log_tail: str | None = None


# -- alerts: feeds, the fleet, retention, driver bases ----------------------------------------


@dataclass(frozen=True, kw_only=True)
class FeedFailing(Event):
    kind = EventKind.FEED_FAILING
    feed: str | None = None
    error: str | None = None
    failing_since: datetime | None = None
    consecutive_failures: int | None = None


@dataclass(frozen=True, kw_only=True)
class FeedRecovered(Event):
    kind = EventKind.FEED_RECOVERED
    feed: str | None = None
    failing_since: datetime | None = None


@dataclass(frozen=True, kw_only=True)
class FleetExposed(Event):
    """GPU nodes of one Flatcar version lack their image (``coverage.Exposure``)."""

    kind = EventKind.FLEET_EXPOSED
    flatcar_version: str | None = None
    verdict: str | None = None
    running: tuple[str, ...] = ()
    """The first node names (the rest counted): a chat message is not a report."""
    running_count: int | None = None
    pending: tuple[str, ...] = ()
    pending_count: int | None = None
    images: tuple[str, ...] = ()
    """``"<tag> <verdict>"`` per image the nodes need."""
    error: str | None = None
    exposed_since: datetime | None = None


@dataclass(frozen=True, kw_only=True)
class FleetCovered(Event):
    kind = EventKind.FLEET_COVERED
    flatcar_version: str | None = None
    exposed_since: datetime | None = None


@dataclass(frozen=True, kw_only=True)
class FleetUnreadable(Event):
    kind = EventKind.FLEET_UNREADABLE
    error: str | None = None
    failing_since: datetime | None = None


@dataclass(frozen=True, kw_only=True)
class FleetReadable(Event):
    kind = EventKind.FLEET_READABLE
    failing_since: datetime | None = None


@dataclass(frozen=True, kw_only=True)
class TagDeleted(Event):
    kind = EventKind.TAG_DELETED
    tag: str | None = None
    repository: str | None = None
    digest: str | None = None
    flatcar_version: str | None = None
    reason: str | None = None
    attachments: int | None = None
    """Signature and attestation manifests deleted with it."""


@dataclass(frozen=True, kw_only=True)
class BaseFailed(Event):
    kind = EventKind.BASE_FAILED
    driver_version: str | None = None
    arch: str | None = None
    recipe_revision: str | None = None
    attempt: int | None = None
    error: str | None = None
    reason: str | None = None
    log_tail: str | None = None
    jobs: tuple[str, ...] = ()


EVENT_TYPES: Mapping[EventKind, type[Event]] = {
    cls.kind: cls
    for cls in (
        BuildStarted,
        TagPublished,
        BuildRetrying,
        BuildFailed,
        RetriesExhausted,
        BuildIncompatible,
        ImageProven,
        ImageRefused,
        FeedFailing,
        FeedRecovered,
        FleetExposed,
        FleetCovered,
        FleetUnreadable,
        FleetReadable,
        TagDeleted,
        BaseFailed,
    )
}


def read_event(
    kind: str, message_key: str, subject: str, created_at: datetime, payload: object
) -> Event:
    """The event of an outbox row; ``ValueError`` for a kind this releasebot does not know.
    A payload that is not a JSON object reads as an empty one."""
    cls = EVENT_TYPES[EventKind(kind)]
    fields_ = payload if isinstance(payload, Mapping) else {}
    return cls.unmarshal(message_key, subject, created_at, fields_)


# -- the outbox's rows ------------------------------------------------------------------------


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


def deletion_key(tag: str, digest: str) -> str:
    return f"retention:{tag}@{digest}"


def refusal_key(node: str, tag: str | None, started_at: datetime | None) -> str:
    since = "" if started_at is None else f"@{started_at.isoformat()}"
    return f"proof:{node}:{tag or '-'}{since}"


# -- the builders of a build's events ---------------------------------------------------------


def proven_event(record: TargetRecord, node: str, now: datetime) -> ImageProven:
    """The image of ``record`` was proven on ``node``: its build message says so."""
    key = build_key(record.tag, record.attempts)
    return ImageProven(
        message_key=key,
        subject=record.tag,
        created_at=now,
        tag=record.tag,
        proven_node=node,
        proven_at=now,
    )


def refused_event(
    *,
    node: str,
    tag: str | None,
    reason: str,
    image: bool,
    log_tail: str | None,
    started_at: datetime | None,
    now: datetime,
) -> ImageRefused:
    """``node`` could not prove ``tag`` after its reboot: FLUO halts there. ``image`` says
    whether the image is to blame (it is ``refused``: no other node's gate opens for it)."""
    return ImageRefused(
        message_key=refusal_key(node, tag, started_at),
        subject=tag or node,
        created_at=now,
        tag=tag,
        node=node,
        error=reason,
        image_refused=image,
        log_tail=log_tail,
    )


BUILD_EVENT_TYPES: Mapping[EventKind, type[BuildEvent]] = {
    kind: cls for kind, cls in EVENT_TYPES.items() if issubclass(cls, BuildEvent)
}


def build_event(
    kind: EventKind,
    record: TargetRecord,
    now: datetime,
    builds: Sequence[BuildRecord],
    max_attempts: int,
    error: str | None = None,
    *,
    signed_by: str | None = None,
    alternative: TargetRecord | None = None,
) -> BuildEvent:
    """An event about ``record``'s current attempt, with what a chat message needs to show:
    the one shape of a build's events (``kind`` one of ``BUILD_EVENT_TYPES``). ``signed_by``
    is the fingerprint of the key whose signature was verified before publishing;
    ``alternative`` (incompatible only) the newest published target of another selected
    branch on the same kernel."""
    target = record.target
    failed = [build for build in builds if build.state is BuildState.FAILED]
    event = BUILD_EVENT_TYPES[kind](
        message_key=build_key(record.tag, record.attempts),
        subject=record.tag,
        created_at=now,
        tag=target.tag,
        attempt=record.attempts,
        max_attempts=record.budget_start + max_attempts,
        driver_version=target.driver_version.text,
        flatcar_version=target.flatcar_version.text,
        flatcar_channel=target.flatcar_channel,
        kernel_release=target.kernel_release,
        arches=tuple(arch.value for arch in target.arches),
        jobs=tuple(build.job_name for build in builds),
        digest=record.digest,
        arch_digests=tuple(
            f"{b.arch.value} {b.digest}" for b in builds if b.digest and len(builds) > 1
        ),
        error=error,
        reasons=tuple(sorted({b.reason.value for b in failed if b.reason is not None})),
        log_tail=next((b.log_tail for b in failed if b.log_tail), None),
        next_attempt_at=record.next_attempt_at,
        signed_by=signed_by,
    )
    if isinstance(event, BuildIncompatible):
        # The newest selected driver that did build for this kernel, if any: what to use.
        event = replace(
            event,
            alternative_branch=None if alternative is None else alternative.target.driver_branch,
            alternative_tag=None if alternative is None else alternative.tag,
        )
    return event
