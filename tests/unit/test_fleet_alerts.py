"""``FleetAlerts`` on the in-memory store: each alert told once when it starts, once when it
ends, in the same transaction as its flag.

Covers: an exposure told once however many cycles it lasts, and its end once; two versions
told apart; an exposure is never told ended from a fleet view that is not whole (a Node
skipped, a listing cut short); an exposure that ends and comes back is a new message (a
new key); a flag that does not read as releasebot wrote it is taken as empty, not as an
error; the listing alert's start and end.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from releasebot.domain.fleet.coverage import Exposure, ImageCoverage, Verdict
from releasebot.domain.shared.versions import FlatcarVersion
from releasebot.domain.targets.events import EventKind
from releasebot.service.fleet_alerts import EXPOSED_FLAG, FleetAlerts
from releasebot.store.memory import MemoryStateStore
from tests.support.builds import Clock


def exposure(version: str) -> Exposure:
    flatcar = FlatcarVersion.parse(version)
    image = ImageCoverage(f"580.178.04-flatcar{version}", flatcar, True, Verdict.MISSING)
    return Exposure(flatcar, Verdict.MISSING, (), ("gpu-0",), (image,))


def told(store: MemoryStateStore) -> list[tuple[str, str]]:
    return [
        (event.event.kind.value, event.event.subject)
        for event in store.pending_events(datetime(2100, 1, 1, tzinfo=UTC), 100)
    ]


def test_an_exposure_is_told_once_and_its_end_once() -> None:
    store, clock = MemoryStateStore(), Clock()
    alerts = FleetAlerts(store, clock)
    for _ in range(3):
        alerts.exposures([exposure("4757.1.0"), exposure("4593.2.5")])
        clock.advance(timedelta(minutes=5))
    alerts.exposures([exposure("4593.2.5")])
    alerts.exposures([exposure("4593.2.5")])
    assert told(store) == [
        ("fleet_exposed", "Flatcar 4757.1.0"),
        ("fleet_exposed", "Flatcar 4593.2.5"),
        ("fleet_covered", "Flatcar 4757.1.0"),
    ]
    events = store.pending_events(datetime(2100, 1, 1, tzinfo=UTC), 100)
    assert events[0].event.message_key == events[2].event.message_key  # one message, edited
    assert events[0].event.payload["pending"] == ["gpu-0"]


def test_an_exposure_is_not_told_ended_from_a_view_that_is_not_whole() -> None:
    store, clock = MemoryStateStore(), Clock()
    alerts = FleetAlerts(store, clock)
    alerts.exposures([exposure("4757.1.0")])
    alerts.exposures([exposure("4593.2.5")], complete=False)  # its node may be unread
    assert told(store) == [
        ("fleet_exposed", "Flatcar 4757.1.0"),
        ("fleet_exposed", "Flatcar 4593.2.5"),
    ]
    alerts.exposures([exposure("4593.2.5")])
    assert told(store)[-1] == ("fleet_covered", "Flatcar 4757.1.0")


def test_an_exposure_that_comes_back_is_a_new_message() -> None:
    store, clock = MemoryStateStore(), Clock()
    alerts = FleetAlerts(store, clock)
    alerts.exposures([exposure("4757.1.0")])
    alerts.exposures([])
    clock.advance(timedelta(hours=1))
    alerts.exposures([exposure("4757.1.0")])
    keys = [e.event.message_key for e in store.pending_events(clock.now + timedelta(days=1))]
    assert len(keys) == 3
    assert keys[0] == keys[1] != keys[2]


def test_a_flag_that_does_not_read_is_taken_as_empty() -> None:
    store, clock = MemoryStateStore(), Clock()
    for garbage in ("{not json", '["a list"]', '{"4757.1.0": 7}'):
        store.set_flag(EXPOSED_FLAG, garbage, clock.now)
        events = FleetAlerts(store, clock).exposures([exposure("4757.1.0")])
        assert [event.kind for event in events] == [EventKind.FLEET_EXPOSED]
        store.set_flag(EXPOSED_FLAG, None, clock.now)


def test_the_listing_alert_starts_and_ends_once() -> None:
    store, clock = MemoryStateStore(), Clock()
    alerts = FleetAlerts(store, clock)
    alerts.listing_worked()
    for _ in range(3):
        alerts.listing_failed("fleet: cannot list Nodes: forbidden")
    alerts.listing_worked()
    alerts.listing_worked()
    assert told(store) == [("fleet_unreadable", "the fleet"), ("fleet_readable", "the fleet")]
