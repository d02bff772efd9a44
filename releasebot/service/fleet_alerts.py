"""The fleet's two alerts, each told once when it starts and once when it ends.

- **Exposed**: GPU nodes run a Flatcar version without a verified driver image, or will
  reboot into one with no prospect of an image (``coverage.Exposure``). One alert per
  version, the unit a person fixes, whatever the number of nodes.
- **Unreadable**: the fleet (Nodes, or the GPU Operator's objects) could not be listed;
  planning falls back to the channel policy meanwhile.

What is being told lives in two flags: ``fleet-exposed`` (a JSON map of version to the time
the exposure began) and ``fleet-unreadable`` (when the failures began). An alert and its
flag are written in one transaction (``set_flag`` with the event), as the feed alerts are,
so a crash neither loses nor repeats one; the start and the end of one alert share a
message key, so the chat edits one message. A flag that does not read as releasebot wrote
it is taken as empty. Deliberately not here: deciding who is exposed (``domain.coverage``)
and rendering (``notify.render``).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Sequence
from datetime import datetime

from releasebot.domain.coverage import Exposure
from releasebot.domain.events import (
    Event,
    FleetCovered,
    FleetExposed,
    FleetReadable,
    FleetUnreadable,
)
from releasebot.domain.ports import StateStore

log = logging.getLogger("releasebot.fleet")

EXPOSED_FLAG = "fleet-exposed"
UNREADABLE_FLAG = "fleet-unreadable"
NODES_SHOWN = 20
"""Node names an alert carries; the rest are counted (a chat message is not a report)."""
FLAG_MAX_VERSIONS = 200
"""Versions kept in the exposed flag: far more than a fleet runs at once."""


class FleetAlerts:
    """Tells the start and the end of the fleet's alerts through the store's outbox."""

    def __init__(self, store: StateStore, clock: Callable[[], datetime]) -> None:
        self._store = store
        self._clock = clock

    def listing_failed(self, problem: str) -> None:
        since = self._store.flag(UNREADABLE_FLAG)
        if since is not None:
            return
        now = self._clock()
        since = now.isoformat()
        event = FleetUnreadable(
            message_key=_key("listing", since),
            subject="the fleet",
            created_at=now,
            error=problem,
            failing_since=now,
        )
        self._store.set_flag(UNREADABLE_FLAG, since, now, events=[event])

    def listing_worked(self) -> None:
        since = self._store.flag(UNREADABLE_FLAG)
        if since is None:
            return
        now = self._clock()
        event = FleetReadable(
            message_key=_key("listing", since),
            subject="the fleet",
            created_at=now,
            failing_since=_time(since),
        )
        self._store.set_flag(UNREADABLE_FLAG, None, now, events=[event])

    def exposures(self, exposures: Sequence[Exposure], *, complete: bool = True) -> list[Event]:
        """Tell the exposures that began and those that ended since the last call; returns
        the events written (none when nothing changed). From a fleet view that is not
        ``complete`` (a Node skipped, the listing cut short) none is told ended: the node
        that was exposed may be the one not seen."""
        told = _read(self._store.flag(EXPOSED_FLAG))
        now = self._clock()
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
                    message_key=_key(version, since),
                    subject=f"Flatcar {version}",
                    created_at=now,
                    flatcar_version=version,
                    exposed_since=_time(since),
                )
            )
        if events:
            kept = dict(sorted(told.items())[-FLAG_MAX_VERSIONS:])
            value = json.dumps(kept, sort_keys=True) if kept else None
            self._store.set_flag(EXPOSED_FLAG, value, now, events=events)
            for event in events:
                log.warning("fleet alert: %s %s", event.kind.value, event.subject)
        return events


def _exposed(exposure: Exposure, since: str, now: datetime) -> FleetExposed:
    problem = next((image.problem for image in exposure.images if image.problem), None)
    return FleetExposed(
        message_key=_key(exposure.key, since),
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
        exposed_since=_time(since),
    )


def _time(since: str) -> datetime | None:
    """The time a flag holds; ``None`` when it holds none (the message says "a while")."""
    try:
        return datetime.fromisoformat(since)
    except ValueError:
        return None


def _key(what: str, since: str) -> str:
    """One chat message per alert: its subject plus when it began."""
    return f"fleet:{what}@{since}"


def _read(value: str | None) -> dict[str, str]:
    if value is None:
        return {}
    try:
        data = json.loads(value)
    except ValueError:
        return {}
    if not isinstance(data, dict):
        return {}
    return {k: v for k, v in data.items() if isinstance(k, str) and isinstance(v, str)}
