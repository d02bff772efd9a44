"""The outbox, message refs and flags in SQL: the statements behind ``SqlStateStore``.

Each function runs on a connection the store already opened in a transaction, so events
are appended in the SAME transaction as the target and build rows of ``save``, and a
delivery is marked together with the message ref it produced. Payloads are stored as JSON
text (portable between SQLite and PostgreSQL); ``id`` gives the order of delivery.

This module does not open transactions or translate errors (``sql.py`` does both), and
does not decide when to deliver (``service/notifications.py``).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, Row, delete, func, insert, or_, select, update

from releasebot.domain.targets.events import Event, MessageRef, Payload, StoredEvent, read_event
from releasebot.store.decode import row_mapper
from releasebot.store.limits import fit_error, mask_payload
from releasebot.store.tables import flags, message_refs, outbox


def insert_events(conn: Connection, events: Sequence[Event]) -> None:
    if events:
        conn.execute(insert(outbox), [_event_values(event) for event in events])


def pending_events(conn: Connection, now: datetime, limit: int) -> list[StoredEvent]:
    # The partial scan stays cheap: ix_outbox_delivered_at finds the few undelivered rows.
    query = (
        select(outbox)
        .where(outbox.c.delivered_at.is_(None))
        .where(or_(outbox.c.next_attempt_at.is_(None), outbox.c.next_attempt_at <= now))
        .order_by(outbox.c.id)
        .limit(limit)
    )
    return [_stored_event(row) for row in conn.execute(query)]


def outbox_events(conn: Connection, message_key: str) -> list[StoredEvent]:
    query = select(outbox).where(outbox.c.message_key == message_key).order_by(outbox.c.id)
    return [_stored_event(row) for row in conn.execute(query)]


def outbox_backlog(conn: Connection) -> int:
    query = select(func.count()).select_from(outbox).where(outbox.c.delivered_at.is_(None))
    return int(conn.execute(query).scalar_one())


def mark_delivered(conn: Connection, event_id: int, now: datetime, ref: MessageRef | None) -> None:
    # Only an undelivered row moves: marking twice keeps the first delivery time.
    conn.execute(
        update(outbox)
        .where(outbox.c.id == event_id, outbox.c.delivered_at.is_(None))
        .values(delivered_at=now, next_attempt_at=None)
    )
    if ref is None:
        return
    values = {"channel": ref.channel, "ts": ref.ts}
    found = conn.execute(
        update(message_refs).where(message_refs.c.message_key == ref.message_key).values(values)
    )
    if found.rowcount == 0:
        conn.execute(
            insert(message_refs).values(message_key=ref.message_key, created_at=now, **values)
        )


def mark_undelivered(
    conn: Connection, event_id: int, error: str, next_attempt_at: datetime
) -> None:
    conn.execute(
        update(outbox)
        .where(outbox.c.id == event_id, outbox.c.delivered_at.is_(None))
        .values(
            attempts=outbox.c.attempts + 1,
            last_error=fit_error(error),
            next_attempt_at=next_attempt_at,
        )
    )


def message_ref(conn: Connection, message_key: str) -> MessageRef | None:
    query = select(message_refs).where(message_refs.c.message_key == message_key)
    row = conn.execute(query).one_or_none()
    return None if row is None else MessageRef(row.message_key, row.channel, row.ts)


def flag(conn: Connection, name: str) -> str | None:
    value = conn.execute(select(flags.c.value).where(flags.c.name == name)).scalar_one_or_none()
    return None if value is None else str(value)


def set_flag(conn: Connection, name: str, value: str | None, now: datetime) -> None:
    if value is None:
        conn.execute(delete(flags).where(flags.c.name == name))
        return
    found = conn.execute(
        update(flags).where(flags.c.name == name).values(value=value, updated_at=now)
    )
    if found.rowcount == 0:
        conn.execute(insert(flags).values(name=name, value=value, updated_at=now))


def encode_payload(payload: Payload) -> str:
    """The payload as stored: its texts masked (``limits.mask_payload``), JSON text, keys
    sorted so equal payloads store equal text."""
    return json.dumps(mask_payload(payload), sort_keys=True, ensure_ascii=False)


def decode_payload(text: str) -> object:
    """The stored JSON; its shape is ``events.read_event``'s to judge (tolerantly)."""
    return json.loads(text)


def _event_values(event: Event) -> dict[str, Any]:
    return {
        "kind": event.kind.value,
        "message_key": event.message_key,
        "subject": event.subject,
        # JSON escapes control characters, so even a NUL reaches PostgreSQL as text.
        "payload": encode_payload(event.marshal()),
        "created_at": event.created_at,
    }


@row_mapper(outbox)
def _stored_event(row: Row[Any]) -> StoredEvent:
    return StoredEvent(
        id=row.id,
        event=read_event(
            row.kind, row.message_key, row.subject, row.created_at, decode_payload(row.payload)
        ),
        attempts=row.attempts,
        next_attempt_at=row.next_attempt_at,
        last_error=row.last_error,
        delivered_at=row.delivered_at,
    )
