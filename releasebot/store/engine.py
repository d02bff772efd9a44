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
  Write transactions are serialized as SQLite's are, by a transaction-scoped advisory lock
  (``lock_writes``): the store plans its writes from what it read, so two first runs that
  both read "no such feed" would both insert it, and one would fail on the primary key.

``translate_error`` is the one place that decides which database failures are temporary.
Nothing here connects: an engine connects on first use.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any

from sqlalchemy import Connection, Engine, create_engine, event, exc, text
from sqlalchemy.engine import URL, make_url
from sqlalchemy.pool import StaticPool

from releasebot.domain.shared.errors import (
    ReleasebotError,
    StoreError,
    StoreUnavailableError,
)
from releasebot.edge.redact import redact

WRITE = "releasebot_write"
"""Execution option marking a connection whose next transaction writes (SQLite: IMMEDIATE)."""

STORE_WRITE_LOCK = 0x72625F73746F7265
"""PostgreSQL advisory lock key held by every write transaction of the state store.

The ASCII of ``rb_store`` read as a 64-bit integer: fixed, so that every releasebot process
on one database takes the same lock, and unlikely to collide with another application's
keys. ``pg_locks`` shows it as ``classid`` 1919049587 (the high 32 bits) and ``objid``
1953460837 (the low 32 bits), ``objsubid`` 1."""

MIGRATION_LOCK = 0x72625F6D69677261
"""PostgreSQL advisory lock key held while migrating (``rb_migra`` in ASCII).

Not ``STORE_WRITE_LOCK``: a migration waits for the other migrations, while the DDL's own
table locks already keep the store's reads and writes out of a table being changed."""

_WRITE_WAIT = "releasebot_write_wait"
"""Execution option (set by ``make_engine`` on PostgreSQL): how long a write transaction
waits for ``STORE_WRITE_LOCK`` before giving up with a temporary error."""

NOT_MIGRATED = "state store: database is not migrated; run `releasebot db upgrade`"
READ_ONLY = "state store: the database is read-only, and releasebot must write to it"
_READ_ONLY_ADVICE = {
    "sqlite": "make the SQLite file and its directory writable (and drop mode=ro)",
    "postgresql": "point database.url at a writable primary, not a standby or a read-only "
    "database (default_transaction_read_only)",
}
NO_PRIVILEGE = (
    "state store: the database role may not use releasebot's tables: grant it SELECT, "
    "INSERT, UPDATE and DELETE on them (or use the role that ran `releasebot db upgrade`)"
)

_DETAIL_MAX_CHARS = 300
"""How much of a driver's message goes into ours: its first line is what says why."""

# PostgreSQL SQLSTATE classes and codes worth retrying: connection exceptions (08),
# transaction rollbacks such as serialization failures and deadlocks (40), insufficient
# resources (53), operator intervention such as a restart (57), lock not available (55P03).
_PG_TEMPORARY_CLASSES = ("08", "40", "53", "57")
_PG_TEMPORARY_CODES = ("55P03",)
_PG_MISSING_SCHEMA_CODES = ("42P01", "42703")  # undefined table, undefined column
# Data the database refuses: integrity constraints (23: unique, foreign key, check, not null)
# and data exceptions (22: a value too long for its column, an invalid date). Caused by one
# feed's or one build's data, never by the database being down: permanent, and said so.
_PG_REFUSED_DATA_CLASSES = ("22", "23")
_SQLITE_TEMPORARY = ("database is locked", "database table is locked")
_SQLITE_MISSING_SCHEMA = ("no such table", "no such column")

# Connection failures that no retry mends: the database or the role does not exist, the
# credentials or pg_hba.conf refuse us (class 28), no CONNECT privilege (42501). libpq gives
# no SQLSTATE for a failed connection attempt, so the server's (English) message is matched
# too; a message in another language is treated as temporary, the safe side for a network
# failure. Refused connections, timeouts, "too many clients" (53300) and "the database
# system is starting up" (57P03) are not listed: they are temporary.
_PG_CONNECT_PERMANENT_CLASSES = ("28", "3D")
_PG_CONNECT_PERMANENT_CODES = ("42501",)
_PG_CONNECT_PERMANENT_MESSAGES = (
    "does not exist",  # database "x" / role "x" does not exist (3D000, 28000)
    "authentication failed",  # password, ident, peer, GSSAPI… (28P01, 28000)
    "no pg_hba.conf entry",  # 28000
    "is not permitted to log in",  # a role without LOGIN (28000)
    "permission denied for database",  # no CONNECT privilege (42501)
    "no password supplied",  # the server wants a password and the URL has none
)
# SQLite result codes (``sqlite3.Error.sqlite_errorname``) of a file that is not a usable
# database: a directory, a path without permission, a garbage or damaged file.
_SQLITE_PERMANENT_OPEN = ("SQLITE_CANTOPEN", "SQLITE_NOTADB", "SQLITE_CORRUPT", "SQLITE_PERM")
# A database that refuses writes, which releasebot cannot work without: not temporary (a
# retry meets the same file mode or the same standby), not "cannot reach".
_SQLITE_READ_ONLY = (
    "SQLITE_READONLY",
    "SQLITE_READONLY_DIRECTORY",
    "SQLITE_READONLY_DBMOVED",
    "SQLITE_READONLY_CANTINIT",
    "SQLITE_READONLY_RECOVERY",
    "SQLITE_READONLY_CANTLOCK",
)
_PG_READ_ONLY_CODES = ("25006",)  # read_only_sql_transaction


def make_engine(
    url: str | URL,
    *,
    connect_timeout: timedelta = timedelta(seconds=10),
    busy_timeout: timedelta = timedelta(seconds=5),
) -> Engine:
    """An engine for ``url`` (``sqlite:///path`` or ``postgresql://…``).

    ``connect_timeout`` bounds a PostgreSQL connection attempt; ``busy_timeout`` is how long
    SQLite waits for another writer before giving up, and on PostgreSQL how long a write
    transaction waits for ``STORE_WRITE_LOCK`` (both far above normal latency, far below a
    poll interval).
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
        options: dict[str, Any] = {}
        if parsed.get_backend_name() == "postgresql":
            connect_args = _absent(
                parsed.query,
                connect_timeout=max(2, int(connect_timeout.total_seconds())),
                application_name="releasebot",
            )
            options = {_WRITE_WAIT: busy_timeout}
        engine = create_engine(
            parsed, pool_pre_ping=True, connect_args=connect_args, execution_options=options
        )
        if parsed.get_backend_name() == "postgresql":
            event.listen(engine, "connect", _timestamps_never_raise)
        return engine
    except (exc.ArgumentError, exc.NoSuchModuleError, ImportError) as error:
        raise StoreError(
            f"state store: unsupported database URL {render_url(parsed)}: {_detail(error)}"
        ) from error


def _timestamps_never_raise(dbapi_connection: Any, _record: object) -> None:
    """psycopg raises inside a fetch on a timestamp no ``datetime`` holds (``infinity``,
    after year 9999): hand the text back instead, so the column type makes it
    ``Unreadable`` and the row's mapper names the table, the row and the column."""
    from psycopg import DataError
    from psycopg.types.datetime import TimestampLoader, TimestamptzLoader

    def lenient(base: type[Any]) -> type[Any]:
        class Lenient(base):  # type: ignore[misc]
            def load(self, data: Any) -> Any:
                try:
                    return super().load(data)
                except DataError:
                    return bytes(data).decode("utf-8", "replace")

        return Lenient

    dbapi_connection.adapters.register_loader("timestamptz", lenient(TimestamptzLoader))
    dbapi_connection.adapters.register_loader("timestamp", lenient(TimestampLoader))


def render_url(url: URL) -> str:
    """``url`` fit for a message or a log line: never with its password, in the userinfo
    or in the query string (``?password=``, ``sslpassword=``...)."""
    return redact(url.render_as_string(hide_password=True))


def lock_writes(conn: Connection, key: int = STORE_WRITE_LOCK) -> None:
    """On PostgreSQL, wait for the advisory lock ``key`` until the transaction ends.

    Call it first in the transaction: under READ COMMITTED (PostgreSQL's default, which
    releasebot keeps) every later statement then sees what the previous holder committed.
    The wait is bounded by the engine's ``busy_timeout`` for ``STORE_WRITE_LOCK`` (as
    SQLite's busy timeout bounds it there; running out is a temporary "lock not
    available"), and unbounded for any other key: a migration waits for the one running.
    SQLite needs nothing here: ``BEGIN IMMEDIATE`` already queued the writer.
    """
    if conn.dialect.name != "postgresql":
        return
    wait = conn.get_execution_options().get(_WRITE_WAIT) if key == STORE_WRITE_LOCK else None
    if isinstance(wait, timedelta):
        # SET LOCAL cannot take a bound parameter; the value is our own integer.
        milliseconds = max(1, int(wait.total_seconds() * 1000))
        conn.exec_driver_sql(f"SET LOCAL lock_timeout = {milliseconds}")
    conn.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": key})


@contextmanager
def transaction(
    engine: Engine, *, write: bool = False, serialize: bool = False
) -> Iterator[Connection]:
    """One transaction on its own connection, committed if the block succeeds; every
    SQLAlchemy error comes out as ``StoreUnavailableError`` or ``StoreError``.

    ``write`` starts SQLite's transaction with ``BEGIN IMMEDIATE`` (writers queue instead of
    failing); ``serialize`` also takes the store's write lock on PostgreSQL first
    (``lock_writes``), so store writers there queue the same way.
    """
    try:
        conn = engine.connect()
    except exc.SQLAlchemyError as error:
        raise translate_error(error, engine.url, connecting=True) from error
    try:
        with conn:
            if write:
                conn.execution_options(**{WRITE: True})
            with conn.begin():
                if serialize:
                    lock_writes(conn)
                yield conn
    except exc.SQLAlchemyError as error:
        raise translate_error(error, engine.url) from error


def ping(engine: Engine) -> None:
    """One cheap round trip (``SELECT 1``) for a readiness probe; errors translated."""
    try:
        with engine.connect() as conn:
            conn.execute(text("SELECT 1"))
    except exc.SQLAlchemyError as error:
        raise translate_error(error, engine.url, connecting=True) from error


def translate_error(
    error: exc.SQLAlchemyError, url: URL, *, connecting: bool = False
) -> ReleasebotError:
    """The releasebot error for a SQLAlchemy ``error``; raise it ``from`` the original.

    A failure to reach the database, a dropped connection, a lock or a serialization
    conflict is temporary. Permanent ``StoreError``: a database that refuses us for good
    (it does not exist, wrong credentials, a file that is no database), a missing table
    (the schema was never migrated), data the database refused (a constraint, a value too
    long), and anything else.
    """
    detail = redact(_detail(error), _url_secrets(url))
    if isinstance(error, exc.DBAPIError):
        sqlstate = getattr(error.orig, "sqlstate", None) or ""
        message = str(error.orig).lower()
        if _read_only(error.orig, sqlstate):
            advice = _READ_ONLY_ADVICE.get(url.get_backend_name(), "make it writable")
            return StoreError(f"{READ_ONLY}: {advice} ({render_url(url)}: {detail})")
        if sqlstate == "42501" and "permission denied for" in message and not connecting:
            return StoreError(f"{NO_PRIVILEGE} ({render_url(url)}: {detail})")
        if connecting or error.connection_invalidated:
            if _refused_for_good(error.orig, sqlstate, message):
                return StoreError(
                    f"state store: cannot use the database {render_url(url)}: {detail}"
                )
            return StoreUnavailableError(
                f"state store: cannot reach the database {render_url(url)}: {detail}"
            )
        if sqlstate in _PG_MISSING_SCHEMA_CODES or message.startswith(_SQLITE_MISSING_SCHEMA):
            return StoreError(f"{NOT_MIGRATED} ({detail})")
        if (
            sqlstate.startswith(_PG_TEMPORARY_CLASSES)
            or sqlstate in _PG_TEMPORARY_CODES
            or message.startswith(_SQLITE_TEMPORARY)
        ):
            return StoreUnavailableError(f"state store: database busy: {detail}")
        if isinstance(error, exc.IntegrityError | exc.DataError) or sqlstate.startswith(
            _PG_REFUSED_DATA_CLASSES
        ):
            return StoreError(f"state store refused the data: {detail}")
    return StoreError(f"state store: {detail}")


def _url_secrets(url: URL) -> list[str]:
    """The secret values a database URL holds: its password, in the userinfo or the query."""
    values = [str(url.password)] if url.password else []
    for name, value in url.query.items():
        if "pass" in name.lower() or "secret" in name.lower():
            values.extend([value] if isinstance(value, str) else list(value))
    return values


def _read_only(origin: object, sqlstate: str) -> bool:
    """True when the database refuses releasebot's writes for good: a read-only SQLite file
    (or directory), a PostgreSQL standby or ``default_transaction_read_only`` (25006)."""
    return (
        getattr(origin, "sqlite_errorname", None) in _SQLITE_READ_ONLY
        or sqlstate in _PG_READ_ONLY_CODES
    )


def _refused_for_good(origin: object, sqlstate: str, message: str) -> bool:
    """True when a failed connection attempt will fail the same way every time."""
    if getattr(origin, "sqlite_errorname", None) in _SQLITE_PERMANENT_OPEN:
        return True
    return (
        sqlstate.startswith(_PG_CONNECT_PERMANENT_CLASSES)
        or sqlstate in _PG_CONNECT_PERMANENT_CODES
        or any(phrase in message for phrase in _PG_CONNECT_PERMANENT_MESSAGES)
    )


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
            # The busy timeout first: switching a new file to WAL needs a moment of exclusive
            # access, which another process opening the same new file may hold.
            cursor.execute(f"PRAGMA busy_timeout={busy_ms}")
            cursor.execute("PRAGMA journal_mode=WAL")
            cursor.execute("PRAGMA foreign_keys=ON")
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
