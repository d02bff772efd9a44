"""Engines for the state store, and the translation of database errors into releasebot's.

``make_engine`` turns a database URL into an engine tuned for how releasebot uses it:

- SQLite: WAL journal (readers never block the writer), foreign keys enforced, a busy
  timeout instead of instant "database is locked", ``check_same_thread`` off (the pool hands
  connections to the scheduler and chat threads), and SQLAlchemy emitting ``BEGIN`` itself
  so a transaction covers its SELECTs too (the ``sqlite3`` module's legacy mode does not).
  Write transactions begin ``IMMEDIATE`` so that two writers queue on the busy timeout
  instead of one failing on a stale read snapshot.
- PostgreSQL: always through psycopg 3, with a connect timeout (libpq waits forever by
  default) and ``pool_pre_ping`` so a restarted server costs one reconnect, not an error.

``translate_error`` is the one place that decides which database failures are temporary.
Nothing here connects: an engine connects on first use.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import timedelta
from pathlib import Path
from typing import Any

from sqlalchemy import Connection, Engine, create_engine, event, exc
from sqlalchemy.engine import URL, make_url
from sqlalchemy.pool import StaticPool

from releasebot.domain.errors import (
    ReleasebotError,
    StoreError,
    StoreUnavailableError,
)

WRITE = "releasebot_write"
"""Execution option marking a connection whose next transaction writes (SQLite: IMMEDIATE)."""

NOT_MIGRATED = "state store: database is not migrated; run `releasebot db upgrade`"

_DETAIL_MAX_CHARS = 300
"""How much of a driver's message goes into ours: its first line is what says why."""

# PostgreSQL SQLSTATE classes and codes worth retrying: connection exceptions (08),
# transaction rollbacks such as serialization failures and deadlocks (40), insufficient
# resources (53), operator intervention such as a restart (57), lock not available (55P03).
_PG_TEMPORARY_CLASSES = ("08", "40", "53", "57")
_PG_TEMPORARY_CODES = ("55P03",)
_PG_MISSING_SCHEMA_CODES = ("42P01", "42703")  # undefined table, undefined column
_SQLITE_TEMPORARY = ("database is locked", "database table is locked")
_SQLITE_MISSING_SCHEMA = ("no such table", "no such column")


def make_engine(
    url: str | URL,
    *,
    connect_timeout: timedelta = timedelta(seconds=10),
    busy_timeout: timedelta = timedelta(seconds=5),
) -> Engine:
    """An engine for ``url`` (``sqlite:///path`` or ``postgresql://…``).

    ``connect_timeout`` bounds a PostgreSQL connection attempt; ``busy_timeout`` is how long
    SQLite waits for another writer before giving up (both far above normal latency, far
    below a poll interval).
    """
    try:
        parsed = make_url(url)
    except exc.ArgumentError as error:
        # The message would repeat the URL, password included: say less.
        raise StoreError("state store: the database URL cannot be parsed") from error
    if parsed.get_backend_name() in ("postgres", "postgresql"):
        parsed = parsed.set(drivername="postgresql+psycopg")
    try:
        if parsed.get_backend_name() == "sqlite":
            return _sqlite_engine(parsed, busy_timeout)
        connect_args: dict[str, Any] = {}
        if parsed.get_backend_name() == "postgresql":
            connect_args = _absent(
                parsed.query,
                connect_timeout=max(2, int(connect_timeout.total_seconds())),
                application_name="releasebot",
            )
        return create_engine(parsed, pool_pre_ping=True, connect_args=connect_args)
    except (exc.ArgumentError, exc.NoSuchModuleError, ImportError) as error:
        raise StoreError(
            f"state store: unsupported database URL {render_url(parsed)}: {_detail(error)}"
        ) from error


def render_url(url: URL) -> str:
    """``url`` fit for a message or a log line: never with its password."""
    return url.render_as_string(hide_password=True)


def translate_error(
    error: exc.SQLAlchemyError, url: URL, *, connecting: bool = False
) -> ReleasebotError:
    """The releasebot error for a SQLAlchemy ``error``; raise it ``from`` the original.

    A failure to connect, a dropped connection, a lock or a serialization conflict is
    temporary; a missing table means the schema was never migrated; anything else (a
    constraint, a type the database refused) is a permanent ``StoreError``.
    """
    detail = _detail(error)
    if url.password:
        detail = detail.replace(str(url.password), "***")
    if isinstance(error, exc.DBAPIError):
        if connecting or error.connection_invalidated:
            return StoreUnavailableError(
                f"state store: cannot reach the database {render_url(url)}: {detail}"
            )
        sqlstate = getattr(error.orig, "sqlstate", None) or ""
        message = str(error.orig).lower()
        if sqlstate in _PG_MISSING_SCHEMA_CODES or message.startswith(_SQLITE_MISSING_SCHEMA):
            return StoreError(f"{NOT_MIGRATED} ({detail})")
        if (
            sqlstate.startswith(_PG_TEMPORARY_CLASSES)
            or sqlstate in _PG_TEMPORARY_CODES
            or message.startswith(_SQLITE_TEMPORARY)
        ):
            return StoreUnavailableError(f"state store: database busy: {detail}")
    return StoreError(f"state store: {detail}")


def _sqlite_engine(url: URL, busy_timeout: timedelta) -> Engine:
    database = url.database or ""
    in_memory = database in ("", ":memory:") or url.query.get("mode") == "memory"
    if not in_memory and not database.startswith("file:"):
        try:
            Path(database).expanduser().parent.mkdir(parents=True, exist_ok=True)
        except OSError as error:
            raise StoreError(
                f"state store: cannot create the directory of {database}: {error.strerror}"
            ) from error
    options: dict[str, Any] = {"connect_args": {"check_same_thread": False}}
    if in_memory:
        # Each connection to ":memory:" is a new empty database: share exactly one.
        options["poolclass"] = StaticPool
    engine = create_engine(url, pool_pre_ping=True, **options)
    busy_ms = int(busy_timeout.total_seconds() * 1000)

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        # Take transaction control away from the sqlite3 module (see the module docstring).
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        try:
            cursor.execute("PRAGMA journal_mode=WAL")
            cursor.execute("PRAGMA foreign_keys=ON")
            cursor.execute(f"PRAGMA busy_timeout={busy_ms}")
        finally:
            cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(connection: Connection) -> None:
        write = connection.get_execution_options().get(WRITE, False)
        connection.exec_driver_sql("BEGIN IMMEDIATE" if write else "BEGIN")

    return engine


def _absent(query: Mapping[str, object], **defaults: object) -> dict[str, Any]:
    """The ``defaults`` the URL's query string does not already set."""
    return {key: value for key, value in defaults.items() if key not in query}


def _detail(error: BaseException) -> str:
    """The first line of the driver's own message, trimmed: no SQL, no bound parameters."""
    origin = getattr(error, "orig", None)
    text = str(origin if isinstance(origin, BaseException) else error).strip()
    line = text.splitlines()[0] if text else type(error).__name__
    if len(line) > _DETAIL_MAX_CHARS:
        line = line[: _DETAIL_MAX_CHARS - 1] + "…"
    return line
