"""The fleet's two alerts, each told once when it starts and once when it ends.

- **Exposed**: GPU nodes run a Flatcar version without a verified driver image, or will
  reboot into one with no prospect of an image (``coverage.Exposure``). One alert per
  version, the unit a person fixes, whatever the number of nodes.
- **Unreadable**: the fleet (Nodes, or the GPU Operator's objects) could not be listed;
  planning falls back to the channel policy meanwhile.

What is being told lives in two flags: ``fleet-exposed`` (a JSON map of version to the time
the exposure began) and ``fleet-unreadable`` (when the failures began); when to tell and
what is ``domain.fleet.told``'s (pure). This module reads the flags and writes each change with
its events in one transaction (``set_flag`` with the events), as the feed alerts are, so a
crash neither loses nor repeats one. Deliberately not here: deciding who is exposed
(``domain.fleet.coverage``), when an alert starts or ends (``domain.fleet.told``) and rendering
(``notify.render``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from datetime import datetime

from releasebot.domain.fleet.coverage import Exposure
from releasebot.domain.fleet.told import (
    EXPOSED_MAX_VERSIONS,
    NODES_SHOWN,
    Flag,
    FlagChange,
    exposures_seen,
    listing_failed,
    listing_worked,
)
from releasebot.domain.ports import StateStore
from releasebot.domain.targets.events import Event

log = logging.getLogger("releasebot.fleet")

EXPOSED_FLAG = Flag.FLEET_EXPOSED
UNREADABLE_FLAG = Flag.FLEET_UNREADABLE
FLAG_MAX_VERSIONS = EXPOSED_MAX_VERSIONS
__all__ = ["EXPOSED_FLAG", "FLAG_MAX_VERSIONS", "NODES_SHOWN", "UNREADABLE_FLAG", "FleetAlerts"]


class FleetAlerts:
    """Tells the start and the end of the fleet's alerts through the store's outbox."""

    def __init__(self, store: StateStore, clock: Callable[[], datetime]) -> None:
        self._store = store
        self._clock = clock

    def listing_failed(self, problem: str) -> None:
        now = self._clock()
        self._apply(listing_failed(self._store.flag(UNREADABLE_FLAG), now, problem), now)

    def listing_worked(self) -> None:
        now = self._clock()
        self._apply(listing_worked(self._store.flag(UNREADABLE_FLAG), now), now)

    def exposures(self, exposures: Sequence[Exposure], *, complete: bool = True) -> list[Event]:
        """Tell the exposures that began and those that ended since the last call
        (``told.exposures_seen``); returns the events written (none when nothing
        changed)."""
        now = self._clock()
        change = exposures_seen(self._store.flag(EXPOSED_FLAG), now, exposures, complete=complete)
        self._apply(change, now)
        events = [] if change is None else list(change.events)
        for event in events:
            log.warning("fleet alert: %s %s", event.kind.value, event.subject)
        return events

    def _apply(self, change: FlagChange | None, now: datetime) -> None:
        if change is not None:  # the flag and its events in one transaction
            self._store.set_flag(change.name, change.value, now, events=change.events)
