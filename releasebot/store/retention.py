"""Retention in SQL: the statements behind ``SqlStateStore``'s retention methods.

``flatcar_listings`` reads when each Flatcar feed last listed each release (the
``flatcar_feed_entries`` rows the feed polls keep); ``record_deletion`` appends one row to
``retention_deletions``. Each function runs on a connection the store opened in a
transaction; this module neither opens transactions nor translates errors (``sql.py``);
rows are read through ``decode.row_mapper``, so an unreadable value is one ``StoreError``.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Connection, Row, insert, select

from releasebot.domain.fleet.retention import DeletionRecord, Listing
from releasebot.store.decode import row_mapper
from releasebot.store.limits import fit_error
from releasebot.store.tables import flatcar_feed_entries, retention_deletions


def flatcar_listings(conn: Connection) -> list[Listing]:
    entries = flatcar_feed_entries.c
    query = select(flatcar_feed_entries).order_by(entries.version, entries.feed)
    return [_listing(row) for row in conn.execute(query)]


@row_mapper(flatcar_feed_entries)
def _listing(row: Row[Any]) -> Listing:
    return Listing(row.feed, row.version, bool(row.present), row.last_seen_at)


def record_deletion(conn: Connection, deletion: DeletionRecord) -> None:
    conn.execute(
        insert(retention_deletions).values(
            tag=deletion.tag,
            digest=deletion.digest,
            flatcar_version=deletion.flatcar_version,
            reason=fit_error(deletion.reason),
            attachments=deletion.attachments,
            deleted_at=deletion.deleted_at,
        )
    )


def deletions(conn: Connection) -> list[DeletionRecord]:
    table = retention_deletions.c
    rows = conn.execute(select(retention_deletions).order_by(table.id))
    return [_deletion(row) for row in rows]


@row_mapper(retention_deletions)
def _deletion(row: Row[Any]) -> DeletionRecord:
    return DeletionRecord(
        row.tag, row.digest, row.flatcar_version, row.reason, row.deleted_at, row.attachments
    )
