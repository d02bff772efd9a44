"""Fleet history in SQL: the statements behind ``SqlStateStore``'s fleet methods.

Recording one listing of 5,000 nodes costs three statements, whatever changed: one SELECT
of every node's latest row, one multi-row INSERT of the new states (usually none), and
UPDATEs of ``last_seen_at`` by id in chunks. Each function runs on a connection the store
opened in a transaction; this module does not open transactions or translate errors
(``sql.py`` does both) and decides nothing (``fleet_records.diff_fleet`` does).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, Row, func, insert, select, update

from releasebot.domain.fleet.nodes import ParsedNode
from releasebot.domain.fleet.records import FleetObservation, FleetRecord, diff_fleet
from releasebot.store.decode import row_mapper
from releasebot.store.limits import fit_error
from releasebot.store.tables import fleet_nodes

UPDATE_CHUNK = 500
"""Ids per ``UPDATE ... WHERE id IN (...)``: far below SQLite's and PostgreSQL's parameter
limits, few enough statements for a 5,000-node fleet."""


def record_fleet(conn: Connection, nodes: Sequence[ParsedNode], now: datetime) -> None:
    latest = {row.name: row for row in conn.execute(_latest_rows())}
    diff = diff_fleet({name: _observation(row) for name, row in latest.items()}, nodes)
    if diff.inserts:
        conn.execute(insert(fleet_nodes), [_values(obs, now) for obs in diff.inserts])
    ids = [latest[name].id for name in diff.touched]
    for start in range(0, len(ids), UPDATE_CHUNK):
        chunk = ids[start : start + UPDATE_CHUNK]
        conn.execute(
            update(fleet_nodes).where(fleet_nodes.c.id.in_(chunk)).values(last_seen_at=now)
        )


def fleet_nodes_latest(conn: Connection) -> list[FleetRecord]:
    records = [_record(row) for row in conn.execute(_latest_rows())]
    return sorted(records, key=lambda record: record.name)


def fleet_history(conn: Connection, name: str) -> list[FleetRecord]:
    query = select(fleet_nodes).where(fleet_nodes.c.name == name).order_by(fleet_nodes.c.id)
    return [_record(row) for row in conn.execute(query)]


def _latest_rows() -> Any:
    newest = select(func.max(fleet_nodes.c.id)).group_by(fleet_nodes.c.name)
    return select(fleet_nodes).where(fleet_nodes.c.id.in_(newest))


def _values(obs: FleetObservation, now: datetime) -> dict[str, Any]:
    return {
        "name": obs.name,
        "version": obs.version,
        "kernel": obs.kernel,
        "arch": obs.arch,
        "gpu": obs.gpu,
        "pending_version": obs.pending_version,
        "ignored_reason": None if obs.ignored_reason is None else fit_error(obs.ignored_reason),
        "first_seen_at": now,
        "last_seen_at": now,
    }


def _observation(row: Row[Any]) -> FleetObservation:
    return FleetObservation(
        name=row.name,
        version=row.version,
        kernel=row.kernel,
        arch=row.arch,
        gpu=row.gpu,
        pending_version=row.pending_version,
        ignored_reason=row.ignored_reason,
    )


@row_mapper(fleet_nodes)
def _record(row: Row[Any]) -> FleetRecord:
    return FleetRecord(_observation(row), row.first_seen_at, row.last_seen_at)
