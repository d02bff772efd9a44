"""Fleet history in memory: the rows ``MemoryStateStore`` keeps for its fleet methods.

The same rule as the SQL store's (``fleet_records.diff_fleet``): a node seen unchanged only
moves its latest record's ``last_seen_at``, a new node or state gets a new record. Not
thread-safe on its own: the store calls it under its lock.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime

from releasebot.domain.fleet.nodes import ParsedNode
from releasebot.domain.fleet.records import FleetRecord, diff_fleet
from releasebot.store.limits import fit_error


class FleetHistory:
    """Every record of every node, in insertion order (as the SQL table's ids give them)."""

    def __init__(self) -> None:
        self._records: list[FleetRecord] = []
        self._latest: dict[str, int] = {}
        """Each name's latest record, by position."""

    def record(self, nodes: Sequence[ParsedNode], now: datetime) -> None:
        latest = {name: self._records[index].state for name, index in self._latest.items()}
        diff = diff_fleet(latest, nodes)
        for name in diff.touched:
            index = self._latest[name]
            self._records[index] = replace(self._records[index], last_seen_at=now)
        for state in diff.inserts:
            if state.ignored_reason is not None:
                state = replace(state, ignored_reason=fit_error(state.ignored_reason))
            self._latest[state.name] = len(self._records)
            self._records.append(FleetRecord(state, now, now))

    def latest(self) -> list[FleetRecord]:
        return [self._records[self._latest[name]] for name in sorted(self._latest)]

    def of(self, name: str) -> list[FleetRecord]:
        return [record for record in self._records if record.name == name]
