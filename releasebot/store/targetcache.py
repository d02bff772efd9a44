"""Decoded target rows kept between reads, for as long as the ``targets`` table's change
counter says nothing was written.

Every cycle, the metrics and the page read the targets; at 10,000 targets decoding every
row (versions parsed, timestamps checked, every column through ``decode``) was most of a
steady cycle's CPU. ``TargetCache`` keeps the last read of the whole table with the
counter it was read at (``revisions.py``): a read at the same counter is answered from it
without touching a row; a read after the counter moved fetches every row again but decodes
only a row whose raw values differ from what was kept (raw-row comparison, by the hash of
the row's values: keeping every raw row beside its record cost megabytes at 10,000
targets, and a collision, one in 2**64, would last until the next full pass), so a cycle
that changed one target decodes one target.

What it cannot see: an edit behind releasebot's back (SQL typed by a person) moves no
counter. ``forget`` drops everything; the cycle calls it for its periodic full pass, and a
new process starts empty. Deliberately not here: what a row means (``sql._target_record``).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, Row, select

from releasebot.domain.targets.models import TargetRecord, TargetState
from releasebot.store import revisions
from releasebot.store.tables import targets

__all__ = ["TargetCache", "TargetRows"]

TABLE = targets.name


@dataclass(frozen=True)
class TargetRows:
    """Every stored target as read at ``revision``: by tag, and sorted by tag."""

    revision: int
    by_tag: dict[str, TargetRecord]
    raw: dict[str, int]
    """Each row's hash of its raw values, as read."""
    every: tuple[TargetRecord, ...]
    required: tuple[TargetRecord, ...]

    def select(self, *, required_only: bool, state: TargetState | None) -> list[TargetRecord]:
        source = self.required if required_only else self.every
        if state is None:
            return list(source)
        return [record for record in source if record.state is state]


class TargetCache:
    """The last whole read of ``targets``, valid while its counter stays where it was."""

    def __init__(self, decode: Callable[[Row[Any]], TargetRecord]) -> None:
        self._decode = decode
        self._lock = threading.Lock()
        self._kept: TargetRows | None = None

    def read(self, conn: Connection) -> TargetRows:
        """Every target, from what was kept if the counter has not moved, else read again.

        The counter is read BEFORE the rows: on PostgreSQL each statement of a read
        transaction may see a newer commit, and rows newer than their counter only cost a
        read more next time, while rows older than it would be kept as current.
        """
        revision = revisions.read(conn).get(TABLE, 0)
        kept = self._kept
        if kept is not None and kept.revision == revision:
            return kept
        fresh = self._reread(conn.execute(select(targets)), revision, kept)
        with self._lock:
            current = self._kept
            if current is None or current.revision <= revision:
                self._kept = fresh
        return fresh

    def forget(self) -> None:
        """Drop what was kept: the next read decodes every row (the periodic full pass)."""
        with self._lock:
            self._kept = None

    def _reread(
        self, rows: Iterable[Row[Any]], revision: int, kept: TargetRows | None
    ) -> TargetRows:
        by_tag: dict[str, TargetRecord] = {}
        raw: dict[str, int] = {}
        old_raw = {} if kept is None else kept.raw
        old = {} if kept is None else kept.by_tag
        for row in rows:
            values = hash(tuple(row))
            tag = row.tag
            record = old.get(tag)
            if record is None or old_raw.get(tag) != values:
                record = self._decode(row)
            by_tag[tag] = record
            raw[tag] = values
        every = tuple(by_tag[tag] for tag in sorted(by_tag))
        required = tuple(record for record in every if record.required)
        return TargetRows(revision, by_tag, raw, every, required)
