"""Change counters: one per table, moved by the store's own write transactions.

A reader that keeps what it read last time asks ``read`` (one small SELECT) and reads a
table again only when its counter moved: the steady cycle and the page do not decode
10,000 target rows to learn that nothing changed.

How writes are counted: while a store write transaction is open, a ``before_execute``
listener on the engine notes the table of every INSERT, UPDATE and DELETE the connection
runs (``track``); just before the transaction commits, ``bump`` adds one to the counter of
each noted table, under the store's write lock, so counters never go backwards and two
writers never both take the same value. A statement that matched no row still counts: a
counter that moved means "read again", never "something surely changed".

What the counters cannot see: rows edited behind releasebot's back (SQL typed by a person,
a restored backup). Readers therefore still read everything now and then (a restart, a new
leader, a periodic full pass), and never trust a counter across processes for more than
that.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from sqlalchemy import Connection, Engine, event, insert, select, update
from sqlalchemy.sql.dml import UpdateBase

from releasebot.store.tables import store_revisions

__all__ = ["install", "read", "tracked_writes"]

_TOUCHED = "releasebot.touched_tables"
_UNCOUNTED = frozenset({store_revisions.name, "locks", "alembic_version"})


def install(engine: Engine) -> None:
    """Listen for writes on ``engine`` (once per engine; idempotent)."""
    if not event.contains(engine, "before_execute", _note_write):
        event.listen(engine, "before_execute", _note_write)


@contextmanager
def tracked_writes(conn: Connection) -> Iterator[None]:
    """Count the tables ``conn`` writes inside the block; bump their counters at its end.

    Use it inside the write transaction (after the write lock is taken), around all of the
    transaction's statements: the bump runs only if the block succeeds, so a rolled-back
    transaction moves no counter.
    """
    touched: set[str] = set()
    conn.info[_TOUCHED] = touched
    try:
        yield
        _bump(conn, touched)
    finally:
        # ``info`` belongs to the pooled DBAPI connection: it outlives this checkout.
        conn.info.pop(_TOUCHED, None)


def read(conn: Connection) -> dict[str, int]:
    """Every table's counter; a table never counted is absent (take it as 0)."""
    rows = conn.execute(select(store_revisions.c.name, store_revisions.c.value))
    return {str(name): int(value) for name, value in rows}


def _bump(conn: Connection, touched: set[str]) -> None:
    """At most three statements, however many tables were written."""
    if not touched:
        return
    conn.info.pop(_TOUCHED, None)  # the bump's own statements are not counted
    known = touched & set(read(conn))
    if known:
        conn.execute(
            update(store_revisions)
            .where(store_revisions.c.name.in_(sorted(known)))
            .values(value=store_revisions.c.value + 1)
        )
    if new := touched - known:
        conn.execute(insert(store_revisions), [{"name": n, "value": 1} for n in sorted(new)])


def _note_write(
    conn: Connection, clause: Any, multiparams: Any, params: Any, options: Mapping[str, Any]
) -> None:
    touched = conn.info.get(_TOUCHED)
    if touched is None or not isinstance(clause, UpdateBase):
        return
    name = getattr(clause.table, "name", None)
    if isinstance(name, str) and name not in _UNCOUNTED:
        touched.add(name)
