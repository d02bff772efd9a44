"""Told once: every edge-triggered store flag and its transitions, as pure functions.

An alert is told once when its condition starts and once when it ends, however many cycles
it lasts; the retention schedule runs once per period, whichever replica leads. What was
told lives in a store flag (``Flag``), and each function here takes what the flag says,
the time and the condition, and returns the ``FlagChange``s to write: the flag's new value
and, in the SAME transaction (``StateStore.set_flag`` with the events), the event to tell,
so a crash neither loses nor repeats one. The services only read the flags and apply the
changes, as they do for the lifecycle (``domain/targets/lifecycle.py``)::

    feed_failed       no streak                          -> feed-failing:<feed> = now
                      failing >= feed_alert_after, untold -> feed-alerted:<feed> + FeedFailing
    feed_answered     a streak                           -> feed-failing:<feed> deleted
                      told                               -> feed-alerted:<feed> deleted
                                                            + FeedRecovered
    listing_failed    untold                             -> fleet-unreadable = now
                                                            + FleetUnreadable
    listing_worked    told                               -> fleet-unreadable deleted
                                                            + FleetReadable
    exposures_seen    a version exposed, untold          -> fleet-exposed[version] = now
                                                            + FleetExposed
                      a told version gone, view whole     -> fleet-exposed[version] gone
                                                            + FleetCovered
    retention_due     the flag's time, else this process's own; unreadable: due now
    retention_ran     now + the wait                     -> retention_next_at

A flag that does not read as releasebot wrote it is taken as absent (and overwritten),
never an error. ``paused`` is a person's switch, not an edge: it is named here only so
every flag has one name. Deliberately not here: I/O, the clock, rendering.
"""

from __future__ import annotations

import enum
import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from releasebot.domain.fleet.coverage import Exposure
from releasebot.domain.targets.events import (
    Event,
    FeedFailing,
    FeedRecovered,
    FleetCovered,
    FleetExposed,
    FleetReadable,
    FleetUnreadable,
    feed_key,
)


class Flag(enum.StrEnum):
    """Every store flag's name (the ``flags`` table); the feed flags end in the feed's."""

    FEED_FAILING = "feed-failing:"
    """Per feed: when its current streak of failed polls began (ISO 8601)."""
    FEED_ALERTED = "feed-alerted:"
    """Per feed: the streak's start, once its failing alert was told."""
    FLEET_EXPOSED = "fleet-exposed"
    """A JSON map of each exposed Flatcar version told to when its exposure began."""
    FLEET_UNREADABLE = "fleet-unreadable"
    """When the fleet's listing began to fail, once told."""
    RETENTION_NEXT_AT = "retention_next_at"
    """When retention is due next (ISO 8601, UTC), shared by every replica."""
    PAUSED = "paused"
    """Who paused the builds (``/releasebot pause``); not an edge."""


NODES_SHOWN = 20
"""Node names an exposure alert carries; the rest are counted (a chat message is not a
report)."""
EXPOSED_MAX_VERSIONS = 200
"""Versions kept in the exposed flag: far more than a fleet runs at once."""
FLEET_SUBJECT = "the fleet"


@dataclass(frozen=True)
class FlagChange:
    """Write ``value`` under ``name`` (``None`` deletes it), with ``events`` in the same
    transaction."""

    name: str
    value: str | None
    events: tuple[Event, ...] = ()


def feed_flag(flag: Flag, feed: str) -> str:
    """The name of one feed's flag (``feed-failing:<feed>``, ``feed-alerted:<feed>``)."""
    return f"{flag.value}{feed}"


def read_time(value: str | None) -> datetime | None:
    """A flag's time, or ``None`` when it holds none (absent, not ISO 8601, no zone)."""
    if value is None:
        return None
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        return None
    return moment if moment.tzinfo is not None else None


# -- feeds ------------------------------------------------------------------------------------


def feed_failed(
    feed: str,
    *,
    failing: str | None,
    alerted: str | None,
    now: datetime,
    alert_after: timedelta,
    error: str,
    failures: int,
) -> tuple[FlagChange, ...]:
    """A poll of ``feed`` failed (its ``failures``-th in a row): start the streak, and tell
    once when it has lasted ``alert_after``. ``failing`` and ``alerted`` are the flags."""
    changes: list[FlagChange] = []
    since, since_text = read_time(failing), failing
    if since is None or since_text is None:
        since, since_text = now, now.isoformat()
        changes.append(FlagChange(feed_flag(Flag.FEED_FAILING, feed), since_text))
    if now - since < alert_after or alerted:
        return tuple(changes)
    event = FeedFailing(
        message_key=_feed_alert_key(feed, since_text),
        subject=feed,
        created_at=now,
        feed=feed,
        error=error,
        failing_since=since,
        consecutive_failures=failures,
    )
    changes.append(FlagChange(feed_flag(Flag.FEED_ALERTED, feed), since_text, (event,)))
    return tuple(changes)


def feed_answered(
    feed: str, *, failing: str | None, alerted: str | None, now: datetime
) -> tuple[FlagChange, ...]:
    """A poll of ``feed`` worked: forget its streak; tell the end if its start was told."""
    changes: list[FlagChange] = []
    if failing is not None:
        changes.append(FlagChange(feed_flag(Flag.FEED_FAILING, feed), None))
    if alerted is not None:
        event = FeedRecovered(
            message_key=_feed_alert_key(feed, alerted),
            subject=feed,
            created_at=now,
            feed=feed,
            failing_since=read_time(alerted),
        )
        changes.append(FlagChange(feed_flag(Flag.FEED_ALERTED, feed), None, (event,)))
    return tuple(changes)


def _feed_alert_key(feed: str, since: str) -> str:
    """One chat message per failure streak: the start and the end of it edit it."""
    return f"{feed_key(feed)}@{since}"


# -- the fleet --------------------------------------------------------------------------------


def listing_failed(flag: str | None, now: datetime, problem: str) -> FlagChange | None:
    """The fleet could not be listed: told once, when the failures begin."""
    if flag is not None:
        return None
    since = now.isoformat()
    event = FleetUnreadable(
        message_key=_fleet_key("listing", since),
        subject=FLEET_SUBJECT,
        created_at=now,
        error=problem,
        failing_since=now,
    )
    return FlagChange(Flag.FLEET_UNREADABLE, since, (event,))


def listing_worked(flag: str | None, now: datetime) -> FlagChange | None:
    """The fleet was listed: the end of a told failure, once."""
    if flag is None:
        return None
    event = FleetReadable(
        message_key=_fleet_key("listing", flag),
        subject=FLEET_SUBJECT,
        created_at=now,
        failing_since=read_time(flag),
    )
    return FlagChange(Flag.FLEET_UNREADABLE, None, (event,))


def exposures_seen(
    flag: str | None, now: datetime, exposures: Sequence[Exposure], *, complete: bool
) -> FlagChange | None:
    """The exposures that began and those that ended since the flag was written; ``None``
    when nothing changed. From a fleet view that is not ``complete`` (a Node skipped, the
    listing cut short) none is told ended: the node that was exposed may be the one not
    seen."""
    told = _read_exposed(flag)
    current = {exposure.key: exposure for exposure in exposures}
    events: list[Event] = []
    for version, exposure in current.items():
        if version not in told:
            told[version] = now.isoformat()
            events.append(_exposed(exposure, told[version], now))
    for version in sorted(set(told) - set(current)) if complete else ():
        since = told.pop(version)
        events.append(
            FleetCovered(
                message_key=_fleet_key(version, since),
                subject=f"Flatcar {version}",
                created_at=now,
                flatcar_version=version,
                exposed_since=read_time(since),
            )
        )
    if not events:
        return None
    kept = dict(sorted(told.items())[-EXPOSED_MAX_VERSIONS:])
    value = json.dumps(kept, sort_keys=True) if kept else None
    return FlagChange(Flag.FLEET_EXPOSED, value, tuple(events))


def _exposed(exposure: Exposure, since: str, now: datetime) -> FleetExposed:
    problem = next((image.problem for image in exposure.images if image.problem), None)
    return FleetExposed(
        message_key=_fleet_key(exposure.key, since),
        subject=f"Flatcar {exposure.version.text}",
        created_at=now,
        flatcar_version=exposure.version.text,
        verdict=exposure.verdict.value,
        running=exposure.running[:NODES_SHOWN],
        running_count=len(exposure.running),
        pending=exposure.pending[:NODES_SHOWN],
        pending_count=len(exposure.pending),
        images=tuple(
            f"{image.tag or 'no image'} {image.verdict.value}" for image in exposure.images
        ),
        error=problem,
        exposed_since=read_time(since),
    )


def _fleet_key(what: str, since: str) -> str:
    """One chat message per alert: its subject plus when it began."""
    return f"fleet:{what}@{since}"


def _read_exposed(value: str | None) -> dict[str, str]:
    if value is None:
        return {}
    try:
        data = json.loads(value)
    except ValueError:
        return {}
    if not isinstance(data, dict):
        return {}
    return {k: v for k, v in data.items() if isinstance(k, str) and isinstance(v, str)}


# -- the retention schedule -------------------------------------------------------------------


@dataclass(frozen=True)
class RetentionDue:
    """When retention is due next (``None``: now), and whether the flag was unreadable."""

    at: datetime | None
    unreadable: bool = False


def retention_due(flag: str | None, own: datetime | None) -> RetentionDue:
    """The store's word (shared by every replica, kept over restarts), else this process's
    own ``own``; a flag that holds no time is due now, then overwritten."""
    if flag is None:
        return RetentionDue(own)
    due = read_time(flag)
    return RetentionDue(None, unreadable=True) if due is None else RetentionDue(due)


def retention_ran(now: datetime, wait: timedelta) -> FlagChange:
    """Retention ran (or failed) at ``now``: it is due again ``wait`` later."""
    return FlagChange(Flag.RETENTION_NEXT_AT, (now + wait).isoformat())
