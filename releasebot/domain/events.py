"""Events worth telling a human, kept in the store's outbox until delivered.

An event is written in the SAME transaction as the state change it describes, so a crash
can neither lose it nor announce a change that was rolled back; delivery happens later,
from the outbox, and never blocks a build.

``message_key`` groups the events of one build (a target's attempt): they edit one chat
message in place, the first event posts it. Events of a feed group under the feed's name,
the fleet's under the alert's subject and start.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from releasebot.domain.builds import BuildRecord, BuildState
from releasebot.domain.models import TargetRecord

Payload = Mapping[str, "str | int | list[str] | None"]


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
    (``domain/bases.py``); told once, not once per waiting target."""


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


def deletion_key(tag: str, digest: str) -> str:
    return f"retention:{tag}@{digest}"


def refusal_key(node: str, tag: str | None, started_at: datetime | None) -> str:
    since = "" if started_at is None else f"@{started_at.isoformat()}"
    return f"proof:{node}:{tag or '-'}{since}"


def proven_event(record: TargetRecord, node: str, now: datetime) -> Event:
    """The image of ``record`` was proven on ``node``: its build message says so."""
    payload: dict[str, str | int | list[str] | None] = {
        "tag": record.tag,
        "proven_node": node,
        "proven_at": now.isoformat(),
    }
    return Event(
        EventKind.IMAGE_PROVEN, build_key(record.tag, record.attempts), record.tag, now, payload
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
) -> Event:
    """``node`` could not prove ``tag`` after its reboot: FLUO halts there. ``image`` says
    whether the image is to blame (it is ``refused``: no other node's gate opens for it)."""
    payload: dict[str, str | int | list[str] | None] = {
        "tag": tag,
        "node": node,
        "error": reason,
        "image_refused": "yes" if image else "no",
        "log_tail": log_tail,
    }
    subject = tag or node
    return Event(EventKind.IMAGE_REFUSED, refusal_key(node, tag, started_at), subject, now, payload)


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
) -> Event:
    """An event about ``record``'s current attempt, with what a chat message needs to show:
    the one payload shape of a build's events (``notify.render`` reads it). ``signed_by``
    is the fingerprint of the key whose signature was verified before publishing;
    ``alternative`` (incompatible only) the newest published target of another selected
    branch on the same kernel."""
    target = record.target
    failed = [build for build in builds if build.state is BuildState.FAILED]
    payload: dict[str, str | int | list[str] | None] = {
        "tag": target.tag,
        "attempt": record.attempts,
        # The last attempt the current budget allows (a person's retry starts a new one).
        "max_attempts": record.budget_start + max_attempts,
        "driver_version": target.driver_version.text,
        "flatcar_version": target.flatcar_version.text,
        "flatcar_channel": target.flatcar_channel,
        "kernel_release": target.kernel_release,
        "arches": [arch.value for arch in target.arches],
        "jobs": [build.job_name for build in builds],
        "digest": record.digest,
        "arch_digests": [
            f"{b.arch.value} {b.digest}" for b in builds if b.digest and len(builds) > 1
        ],
        "error": error,
        "reasons": sorted({b.reason.value for b in failed if b.reason is not None}),
        "log_tail": next((b.log_tail for b in failed if b.log_tail), None),
        "next_attempt_at": None
        if record.next_attempt_at is None
        else record.next_attempt_at.isoformat(),
        "signed_by": signed_by,
    }
    if kind is EventKind.BUILD_INCOMPATIBLE:
        # The newest selected driver that did build for this kernel, if any: what to use.
        payload["alternative_branch"] = (
            None if alternative is None else alternative.target.driver_branch
        )
        payload["alternative_tag"] = None if alternative is None else alternative.tag
    return Event(kind, build_key(record.tag, record.attempts), record.tag, now, payload)
