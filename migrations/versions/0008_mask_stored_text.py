"""Mask credentials in the text older releases stored in clear.

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-02

Since this revision the store masks every text that comes from outside before it writes
it (``store/limits.py``). Rows written before then may hold a registry password quoted in
a URL, a token in a query string or an ``Authorization`` header printed by a build: this
migration masks them in place with the same rule the application uses
(``releasebot.edge.redact.redact``, by the credential's form), column by column:

- ``feeds.last_error``, ``targets.last_error``, ``outbox.last_error``;
- ``builds.message`` and ``builds.log_tail``;
- ``outbox.payload`` (each text inside the JSON; a payload that does not parse is left for
  the store's reader to name);
- ``fleet_nodes.ignored_reason`` and ``retention_deletions.reason``.

Rows are read in pages by primary key and only the ones that change are written. A masked
text longer than its column (``password=ab`` becomes ``password=***``) is cut as the store
cuts it. Offline mode (``--sql``) cannot express the masking in SQL and emits nothing.

The downgrade changes nothing: a masked credential cannot be unmasked, and the schema is
the same on both sides.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

import sqlalchemy as sa
from alembic import context, op

from releasebot.edge.redact import redact

revision: str = "0008"
down_revision: str | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

PAGE_ROWS = 500
"""Rows read per query: bounded memory whatever the size of the builds table."""
ERROR_MAX_CHARS = 1000
"""What the store keeps of an error (the ``String(1000)`` columns), as in 0001..0006."""
LOG_TAIL_MAX_CHARS = 4000


def _error(text: str) -> str:
    masked = redact(text)
    return masked if len(masked) <= ERROR_MAX_CHARS else masked[: ERROR_MAX_CHARS - 1] + "…"


def _log(text: str) -> str:
    return redact(text)[-LOG_TAIL_MAX_CHARS:]


def _payload(text: str) -> str:
    try:
        payload = json.loads(text)
    except ValueError:
        return text
    return json.dumps(_walk(payload), sort_keys=True, ensure_ascii=False)


def _walk(value: Any) -> Any:
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, dict):
        return {key: _walk(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_walk(item) for item in value]
    return value


_COLUMNS: tuple[tuple[str, tuple[str, ...], str, Callable[[str], str]], ...] = (
    ("feeds", ("name",), "last_error", _error),
    ("targets", ("tag",), "last_error", _error),
    ("builds", ("tag", "arch", "attempt"), "message", _error),
    ("builds", ("tag", "arch", "attempt"), "log_tail", _log),
    ("outbox", ("id",), "last_error", _error),
    ("outbox", ("id",), "payload", _payload),
    ("fleet_nodes", ("id",), "ignored_reason", _error),
    ("retention_deletions", ("id",), "reason", _error),
)
"""(table, primary key, column, how its text is masked)."""


def _mask_column(
    connection: sa.Connection,
    name: str,
    key: tuple[str, ...],
    column: str,
    mask: Callable[[str], str],
) -> None:
    table = sa.table(name, *(sa.column(part) for part in key), sa.column(column))
    keys = [table.c[part] for part in key]
    after: tuple[Any, ...] | None = None
    while True:
        query = sa.select(*keys, table.c[column]).where(table.c[column].is_not(None))
        if after is not None:
            query = query.where(sa.tuple_(*keys) > sa.tuple_(*after))
        rows = connection.execute(query.order_by(*keys).limit(PAGE_ROWS)).all()
        if not rows:
            return
        for row in rows:
            old = row[len(key)]
            new = mask(old)
            if new != old:
                where = sa.and_(*(part == value for part, value in zip(keys, row, strict=False)))
                connection.execute(sa.update(table).where(where).values({column: new}))
        after = tuple(rows[-1][: len(key)])


def upgrade() -> None:
    if context.is_offline_mode():
        return  # regular expressions over stored text: not expressible as a SQL script
    connection = op.get_bind()
    for name, key, column, mask in _COLUMNS:
        _mask_column(connection, name, key, column, mask)


def downgrade() -> None:
    """Nothing to undo: masked text cannot be unmasked, and the schema did not change."""
