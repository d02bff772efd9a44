"""Rows read defensively: a stored value no version of releasebot wrote is named, not raised.

The database is outside the process like any server: a newer releasebot may have stored an
enum value this one does not know, a hand edit or another program may have left text in a
timestamp column. ``row_mapper(table)`` wraps a row's mapper so that any such value comes
out as ONE ``StoreError`` naming the table, the row's key and what is wrong, with what to
do, instead of a ``ValueError`` traceback from inside a cycle. Timestamps that cannot be
read reach the mapper as ``tables.Unreadable`` (the column type's doing), so the same
check covers them. Not here: what a row means (the mappers in ``sql``, ``outbox``,
``fleet``).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar

from sqlalchemy import Row, Table

from releasebot.domain.shared.errors import ReleasebotError, StoreError
from releasebot.edge.text import one_line
from releasebot.store.tables import Unreadable

T = TypeVar("T")

_KEY_MAX_CHARS = 120
"""Characters of a row's key quoted in the error: a tag or a name, never a body."""


def row_mapper(table: Table) -> Callable[[Callable[[Row[Any]], T]], Callable[[Row[Any]], T]]:
    """Decorate the mapper of ``table``'s rows: any unreadable value -> one ``StoreError``."""
    keys = tuple(column.name for column in table.primary_key.columns)

    def decorate(mapper: Callable[[Row[Any]], T]) -> Callable[[Row[Any]], T]:
        @functools.wraps(mapper)
        def read(row: Row[Any]) -> T:
            checked(table, row)
            try:
                return mapper(row)
            except (ReleasebotError, ValueError, TypeError, KeyError, AttributeError) as error:
                raise unreadable_row(table.name, row, keys, str(error)) from error

        return read

    return decorate


def checked(table: Table, row: Row[Any]) -> Row[Any]:
    """``row``, once no column of it holds an ``Unreadable`` value (else one ``StoreError``)."""
    # The values alone first: a row is a tuple, and walking its mapping's items for every
    # row of a whole-table read cost more than the mapper itself; names only for the error.
    for value in row:
        if isinstance(value, Unreadable):
            break
    else:
        return row
    for column, value in row._mapping.items():
        if isinstance(value, Unreadable):
            keys = tuple(key.name for key in table.primary_key.columns)
            raise unreadable_row(table.name, row, keys, f"{column} = {value.raw}: {value.why}")
    return row


def unreadable_row(table: str, row: Row[Any], keys: tuple[str, ...], why: str) -> StoreError:
    values = row._mapping
    key = ", ".join(f"{name}={values.get(name)!r}" for name in keys if name in values)
    return StoreError(
        f"state store: table {table}, row {one_line(key, _KEY_MAX_CHARS)}: unreadable value "
        f"({one_line(why)}); a newer releasebot or a hand edit wrote it: upgrade releasebot, "
        "or correct or delete that row"
    )
