"""The after-reboot proof in SQL: the statements behind ``SqlStateStore``'s proof methods.

``proofs`` reads every node's record; ``save_proofs`` upserts records by node and deletes
those of nodes that are gone. Each function runs on a connection the store opened in a
transaction; this module neither opens transactions nor translates errors (``sql.py``);
rows are read through ``decode.row_mapper``, so an unreadable value is one ``StoreError``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import Connection, Row, delete, insert, select, update

from releasebot.domain.fleet.proof import ProofRecord, ProofState
from releasebot.domain.shared.versions import Arch, FlatcarVersion
from releasebot.store.decode import row_mapper
from releasebot.store.limits import fit_error, fit_log
from releasebot.store.tables import proofs as _proofs


def proofs(conn: Connection) -> list[ProofRecord]:
    rows = conn.execute(select(_proofs).order_by(_proofs.c.node))
    return [_proof(row) for row in rows]


def save_proofs(conn: Connection, records: Sequence[ProofRecord], removed: Sequence[str]) -> None:
    if removed:
        conn.execute(delete(_proofs).where(_proofs.c.node.in_(list(removed))))
    if not records:
        return
    names = [record.node for record in records]
    existing = {
        row.node for row in conn.execute(select(_proofs.c.node).where(_proofs.c.node.in_(names)))
    }
    for record in records:
        values = _values(record)
        if record.node in existing:
            conn.execute(update(_proofs).where(_proofs.c.node == record.node).values(values))
        else:
            conn.execute(insert(_proofs).values(values))


def _values(record: ProofRecord) -> dict[str, Any]:
    return {
        "node": record.node,
        "state": record.state.value,
        "updated_at": record.updated_at,
        "version": None if record.version is None else record.version.text,
        "tag": record.tag,
        "arch": None if record.arch is None else record.arch.value,
        "gpus_before": record.gpus_before,
        "boot_id": record.boot_id,
        "armed_at": record.armed_at,
        "started_at": record.started_at,
        "healthy_since": record.healthy_since,
        "reason": None if record.reason is None else fit_error(record.reason),
        "pod": record.pod,
        "log_tail": fit_log(record.log_tail),
    }


@row_mapper(_proofs)
def _proof(row: Row[Any]) -> ProofRecord:
    return ProofRecord(
        node=row.node,
        state=ProofState(row.state),
        updated_at=row.updated_at,
        version=None if row.version is None else FlatcarVersion.parse(row.version),
        tag=row.tag,
        arch=None if row.arch is None else Arch(row.arch),
        gpus_before=row.gpus_before,
        boot_id=row.boot_id,
        armed_at=row.armed_at,
        started_at=row.started_at,
        healthy_since=row.healthy_since,
        reason=row.reason,
        pod=row.pod,
        log_tail=row.log_tail,
    )
