"""``domain/fleet/told.py``: every transition of every edge-triggered flag, as pure functions.

Covers, per flag: what is written and what is told when the condition starts, lasts, ends
and comes back; that nothing is written when nothing changed; that a flag which does not
read as releasebot wrote it is taken as absent (and overwritten), never an error; and that
the flags keep the names older releases stored them under.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

from releasebot.domain.fleet.coverage import Exposure, ImageCoverage, Verdict
from releasebot.domain.fleet.told import (
    EXPOSED_MAX_VERSIONS,
    NODES_SHOWN,
    Flag,
    FlagChange,
    exposures_seen,
    feed_answered,
    feed_failed,
    listing_failed,
    listing_worked,
    retention_due,
    retention_ran,
)
from releasebot.domain.shared.versions import FlatcarVersion
from releasebot.domain.targets.events import (
    FeedFailing,
    FeedRecovered,
    FleetCovered,
    FleetExposed,
    FleetReadable,
    FleetUnreadable,
)

T0 = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
HOUR = timedelta(hours=1)


def failed(failing: str | None, alerted: str | None, now: datetime) -> tuple[FlagChange, ...]:
    return feed_failed(
        "stable",
        failing=failing,
        alerted=alerted,
        now=now,
        alert_after=HOUR,
        error="HTTP 503",
        failures=4,
    )


def exposure(version: str, pending: int = 1) -> Exposure:
    flatcar = FlatcarVersion.parse(version)
    image = ImageCoverage(f"580.178.04-flatcar{version}", flatcar, True, Verdict.MISSING)
    nodes = tuple(f"gpu-{n}" for n in range(pending))
    return Exposure(flatcar, Verdict.MISSING, (), nodes, (image,))


def test_the_flags_keep_their_stored_names() -> None:
    assert {flag.value for flag in Flag} == {
        "feed-failing:",
        "feed-alerted:",
        "fleet-exposed",
        "fleet-unreadable",
        "retention_next_at",
        "paused",
    }


def test_a_feeds_first_failure_starts_its_streak_and_tells_nothing() -> None:
    assert failed(None, None, T0) == (FlagChange("feed-failing:stable", T0.isoformat()),)
    assert failed(T0.isoformat(), None, T0 + HOUR / 2) == ()  # not long enough yet


def test_a_streak_as_long_as_alert_after_is_told_once() -> None:
    since = T0.isoformat()
    [change] = failed(since, None, T0 + HOUR)
    assert (change.name, change.value) == ("feed-alerted:stable", since)
    [event] = change.events
    assert isinstance(event, FeedFailing)
    assert (event.message_key, event.subject, event.created_at) == (
        f"feed:stable@{since}",
        "stable",
        T0 + HOUR,
    )
    assert (event.error, event.failing_since, event.consecutive_failures) == ("HTTP 503", T0, 4)
    assert failed(since, since, T0 + 2 * HOUR) == ()  # told already


def test_a_zero_threshold_tells_the_first_failure_after_starting_the_streak() -> None:
    changes = feed_failed(
        "stable",
        failing=None,
        alerted=None,
        now=T0,
        alert_after=timedelta(0),
        error="e",
        failures=1,
    )
    assert [(c.name, c.value, len(c.events)) for c in changes] == [
        ("feed-failing:stable", T0.isoformat(), 0),
        ("feed-alerted:stable", T0.isoformat(), 1),
    ]


def test_a_failing_flag_that_holds_no_time_starts_the_streak_again() -> None:
    for garbage in ("x", "2026-11-30T12:00:00"):  # no time; no zone
        assert failed(garbage, None, T0) == (FlagChange("feed-failing:stable", T0.isoformat()),)


def test_a_feed_that_answers_forgets_its_streak_and_tells_the_end_if_told() -> None:
    since = T0.isoformat()
    assert feed_answered("stable", failing=None, alerted=None, now=T0) == ()
    assert feed_answered("stable", failing=since, alerted=None, now=T0) == (
        FlagChange("feed-failing:stable", None),
    )
    forgot, told = feed_answered("stable", failing=since, alerted=since, now=T0 + HOUR)
    assert forgot == FlagChange("feed-failing:stable", None)
    assert (told.name, told.value) == ("feed-alerted:stable", None)
    [event] = told.events
    assert isinstance(event, FeedRecovered)
    assert (event.message_key, event.failing_since) == (f"feed:stable@{since}", T0)


def test_the_fleet_listing_is_told_once_when_it_fails_and_once_when_it_works() -> None:
    change = listing_failed(None, T0, "forbidden")
    assert change is not None
    assert (change.name, change.value) == (Flag.FLEET_UNREADABLE, T0.isoformat())
    [event] = change.events
    assert isinstance(event, FleetUnreadable)
    assert (event.error, event.failing_since) == ("forbidden", T0)
    assert listing_failed(T0.isoformat(), T0 + HOUR, "forbidden") is None
    assert listing_worked(None, T0) is None
    ended = listing_worked(T0.isoformat(), T0 + HOUR)
    assert ended is not None
    assert (ended.name, ended.value) == (Flag.FLEET_UNREADABLE, None)
    [end] = ended.events
    assert isinstance(end, FleetReadable)
    assert (end.message_key, end.failing_since) == (event.message_key, T0)


def test_a_listing_flag_that_holds_no_time_still_ends_under_its_own_key() -> None:
    ended = listing_worked("garbage", T0)
    assert ended is not None
    [end] = ended.events
    assert isinstance(end, FleetReadable)
    assert (end.message_key, end.failing_since) == ("fleet:listing@garbage", None)


def test_an_exposure_is_told_when_it_starts_and_when_it_ends() -> None:
    started = exposures_seen(None, T0, [exposure("4757.1.0")], complete=True)
    assert started is not None
    assert json.loads(started.value or "") == {"4757.1.0": T0.isoformat()}
    [event] = started.events
    assert isinstance(event, FleetExposed)
    assert (event.subject, event.pending, event.exposed_since) == (
        "Flatcar 4757.1.0",
        ("gpu-0",),
        T0,
    )
    assert exposures_seen(started.value, T0 + HOUR, [exposure("4757.1.0")], complete=True) is None
    ended = exposures_seen(started.value, T0 + HOUR, [], complete=True)
    assert ended is not None
    assert ended.value is None  # nothing told any more: the flag goes
    [end] = ended.events
    assert isinstance(end, FleetCovered)
    assert (end.message_key, end.exposed_since) == (event.message_key, T0)


def test_an_exposure_is_not_told_ended_from_a_view_that_is_not_whole() -> None:
    started = exposures_seen(None, T0, [exposure("4757.1.0")], complete=True)
    assert started is not None
    assert exposures_seen(started.value, T0 + HOUR, [], complete=False) is None


def test_an_exposure_names_some_nodes_and_counts_all() -> None:
    change = exposures_seen(None, T0, [exposure("4757.1.0", pending=50)], complete=True)
    assert change is not None
    [event] = change.events
    assert isinstance(event, FleetExposed)
    assert (len(event.pending), event.pending_count) == (NODES_SHOWN, 50)


def test_the_exposed_flag_is_bounded_and_garbage_reads_as_empty() -> None:
    many = {f"{n}.0.0": T0.isoformat() for n in range(1000, 1000 + EXPOSED_MAX_VERSIONS)}
    change = exposures_seen(json.dumps(many), T0, [exposure("4757.1.0")], complete=False)
    assert change is not None
    assert len(json.loads(change.value or "")) == EXPOSED_MAX_VERSIONS
    for garbage in ("{", "[1]", '{"4757.1.0": 3}'):
        again = exposures_seen(garbage, T0, [exposure("4757.1.0")], complete=True)
        assert again is not None
        assert [type(e) for e in again.events] == [FleetExposed]


def test_retention_is_due_by_the_store_else_by_the_process() -> None:
    own = T0 + HOUR
    assert retention_due(None, own).at == own
    assert retention_due(None, None).at is None  # never ran: now
    assert retention_due((T0 + 2 * HOUR).isoformat(), own).at == T0 + 2 * HOUR
    for garbage in ("not a time", "2026-11-30T12:00:00"):
        due = retention_due(garbage, own)
        assert (due.at, due.unreadable) == (None, True)  # run now, then overwrite it


def test_a_retention_run_sets_when_it_is_due_next() -> None:
    change = retention_ran(T0, timedelta(days=1))
    assert change == FlagChange(Flag.RETENTION_NEXT_AT, (T0 + timedelta(days=1)).isoformat())
    assert retention_due(change.value, None).at == T0 + timedelta(days=1)
