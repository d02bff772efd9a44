"""Schema migrations, driven from code: no ``alembic.ini``, no ``alembic`` command needed.

``releasebot db upgrade`` and the service's start-up call these functions with an engine
(or a URL). The Alembic environment and revisions live in the top-level ``migrations/``
folder of the repository; the wheel ships the same folder as ``releasebot/_migrations``
(``pyproject.toml`` force-includes it), so an installed releasebot finds them without the
source tree.

Every migration runs inside one transaction on one connection (PostgreSQL and SQLite both
have transactional DDL): a failed upgrade leaves the previous schema in place. Migrations
are serialized, so that several processes starting on one new database (or several
``releasebot db upgrade``) do not create the same tables at once: SQLite's ``BEGIN
IMMEDIATE`` queues them, on PostgreSQL an advisory lock (``engine.MIGRATION_LOCK``) does.
Whoever waited then finds the database already where it asked, and runs nothing. As in the
store adapter, SQLAlchemy and Alembic errors come out as ``StoreError`` or
``StoreUnavailableError``. This module does not decide *when* to migrate; the caller does.

``schema_status`` is what every command asks before it uses the store: a database migrated
by a NEWER releasebot (a revision this one's scripts do not know) is refused with "upgrade
releasebot" rather than read as if it were empty or old; a database at the newest revision
with a table missing (dropped by hand) is refused with advice that works: ``db upgrade``
re-creates missing tables (empty) when the revision says they should be there.
"""

from __future__ import annotations

import enum
import re
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from sqlalchemy import Connection, Engine, text
from sqlalchemy.engine import URL

from releasebot.domain.shared.errors import StoreError
from releasebot.edge.redact import redact
from releasebot.edge.text import one_line
from releasebot.store.engine import MIGRATION_LOCK, lock_writes, make_engine, transaction
from releasebot.store.tables import metadata

if TYPE_CHECKING:  # Alembic is imported only when a migration really runs (start-up cost)
    from alembic.config import Config
    from alembic.script import ScriptDirectory

EngineOrUrl = Engine | URL | str

HEAD_REVISION = "0010"
"""The newest revision in ``migrations/versions``; a test keeps the two in step. Knowing it
without Alembic lets every start-up check the schema with one cheap query."""

_PACKAGE = Path(__file__).resolve().parent.parent


def migrations_dir() -> Path:
    """The folder holding ``env.py`` and ``versions/``: the packaged copy, else the source's."""
    candidates = (_PACKAGE / "_migrations", _PACKAGE.parent / "migrations")
    for candidate in candidates:
        if (candidate / "env.py").is_file():
            return candidate
    looked = ", ".join(str(candidate) for candidate in candidates)
    raise StoreError(f"state store: migrations not found (looked in {looked})")


class Schema(enum.Enum):
    """Where a database's schema stands relative to this releasebot's migrations."""

    EMPTY = "empty"
    """Never migrated: no version table (a new database)."""
    BEHIND = "behind"
    """At an older revision this releasebot knows: ``upgrade`` brings it to the head."""
    CURRENT = "current"
    """At this releasebot's newest revision, with every table there."""


def upgrade(engine_or_url: EngineOrUrl, revision: str = "head") -> None:
    """Migrate the database up to ``revision`` (the newest schema by default); at the head,
    re-create any table that is missing (dropped by hand), empty."""
    from alembic import command

    with _connection(engine_or_url, write=True) as conn:
        lock_writes(conn, MIGRATION_LOCK)
        _refuse_newer(conn)
        if not _is_at(conn, revision):
            _run(lambda config: command.upgrade(config, revision), conn)
        if _current(conn) == {head_revision()}:
            missing = _missing_tables(conn)
            metadata.create_all(conn, tables=[metadata.tables[name] for name in missing])


CHILD_TIMEOUT = 900.0
"""How long a migration in a child process may take (seconds) before start-up gives up."""

_CHILD = "import sys; from releasebot.store.migrate import child_upgrade; sys.exit(child_upgrade())"


def upgrade_apart(engine: Engine, timeout: float = CHILD_TIMEOUT) -> None:
    """``upgrade`` in a child process, when the database of ``engine`` is not at the head.

    For the long-running ``run``: Alembic, its scripts and Mako stay resident for the life of
    a process that imported them (about 10 MiB, nothing of it freed by dropping the
    modules), and only a migration needs them. So ``run`` migrates in a child that exits, and
    its own ``schema_status`` then finds the head with one query and never imports Alembic.
    An in-memory SQLite database is another one in every process: it is left to the caller
    (``upgrade`` in-process). The URL goes to the child on its stdin, never in its argv
    (which ``ps`` shows); its error comes back as the one line it wrote.
    """
    url = engine.url.render_as_string(hide_password=False)
    if _shared_address(url) is None or schema_status(engine) is Schema.CURRENT:
        return
    try:
        done = subprocess.run(  # noqa: S603 - this interpreter, a fixed program
            # -P: not the working directory first on sys.path (whose modules would read the
            # URL on stdin); the interpreter's own packages only.
            [sys.executable, "-P", "-c", _CHILD],
            input=url,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
    except subprocess.TimeoutExpired as error:
        raise StoreError(
            f"state store: the migration did not end within {timeout:.0f} s; "
            "run `releasebot db upgrade` by hand and look at the database's locks"
        ) from error
    if done.returncode != 0:
        lines = [line for line in done.stderr.splitlines() if line.strip()]
        reason = redact(one_line(lines[-1])) if lines else f"exit status {done.returncode}"
        raise StoreError(f"state store: migration failed: {reason}")


def _shared_address(url: str) -> URL | None:
    """``url`` parsed, or ``None`` for a database only this process can see (in-memory
    SQLite) or a URL SQLAlchemy cannot read (the caller's own check reports that)."""
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    try:
        address = make_url(url)
    except ArgumentError:
        return None
    if address.get_backend_name() == "sqlite" and address.database in (None, "", ":memory:"):
        return None
    return address


def child_upgrade() -> int:
    """The child's side of ``upgrade_apart``: the URL from stdin, one line on failure."""
    from releasebot.domain.shared.errors import ReleasebotError

    url = sys.stdin.readline().strip()
    try:
        upgrade(url)
    except ReleasebotError as error:
        sys.stderr.write(redact(one_line(str(error))) + "\n")
        return 1
    except Exception as error:  # noqa: BLE001 - a migration script's own failure, in one line
        sys.stderr.write(redact(one_line(f"{type(error).__name__}: {error}")) + "\n")
        return 1
    return 0


def downgrade(engine_or_url: EngineOrUrl, revision: str) -> None:
    """Migrate the database down to ``revision`` (``base`` drops every table releasebot made)."""
    from alembic import command

    with _connection(engine_or_url, write=True) as conn:
        lock_writes(conn, MIGRATION_LOCK)
        _refuse_newer(conn, also="downgrade it with the releasebot that migrated it")
        if not _is_at(conn, revision):
            _run(lambda config: command.downgrade(config, revision), conn)


def schema_status(engine_or_url: EngineOrUrl) -> Schema:
    """Where the database's schema stands; raises ``StoreError`` when this releasebot must
    not use it: migrated by a newer releasebot, or a table missing at the newest revision.

    One cheap query when the database is current; Alembic's scripts are read only when it
    is not (to tell an older revision from a newer one).
    """
    with _connection(engine_or_url) as conn:
        current = _current(conn)
        if current == {HEAD_REVISION}:
            missing = _missing_tables(conn)
            if missing:
                raise StoreError(
                    f"state store: table(s) {', '.join(missing)} missing from the database "
                    f"(at revision {HEAD_REVISION}): run `releasebot db upgrade` to re-create "
                    "them empty (restore a backup to get their rows back)"
                )
            return Schema.CURRENT
        if not current:
            return Schema.EMPTY
        _refuse_newer(conn, current)
        return Schema.BEHIND


def newer_than_this_error(revisions: set[str]) -> StoreError:
    """The refusal of a database migrated by a newer releasebot than this one."""
    from releasebot import __version__

    shown = ", ".join(sorted(one_line(revision, 40) for revision in revisions))
    return StoreError(
        f"state store: this database is newer than releasebot {__version__} (revision "
        f"{shown}; this releasebot knows up to {head_revision()}): upgrade releasebot"
    )


def _refuse_newer(conn: Connection, current: set[str] | None = None, *, also: str = "") -> None:
    """Raise when the database is at a revision this releasebot's scripts do not know
    (``also``: a second way out, added to the advice)."""
    current = _current(conn) if current is None else current
    if not current or current == {HEAD_REVISION}:
        return
    known = {script.revision for script in _scripts().walk_revisions()}
    unknown = current - known
    if unknown:
        error = newer_than_this_error(unknown)
        raise StoreError(f"{error}, or {also}") if also else error


def _current(conn: Connection) -> set[str]:
    """The revisions in Alembic's version table; empty when there is none (never migrated)."""
    if not _has_table(conn, "alembic_version"):
        return set()
    return {str(row[0]) for row in conn.execute(text("SELECT version_num FROM alembic_version"))}


def _missing_tables(conn: Connection) -> list[str]:
    present = set(conn.dialect.get_table_names(conn))
    return sorted(name for name in metadata.tables if name not in present)


def current_revision(engine_or_url: EngineOrUrl) -> str | None:
    """The revision the database is at; ``None`` for an empty (never migrated) database."""
    from alembic.runtime.migration import MigrationContext

    with _connection(engine_or_url) as conn:
        return MigrationContext.configure(conn).get_current_revision()


def head_revision() -> str | None:
    """The newest revision this releasebot ships."""
    return _scripts().get_current_head()


def is_at_head(engine_or_url: EngineOrUrl) -> bool:
    """True when the database has exactly the schema this releasebot expects.

    One plain query against Alembic's version table, without importing Alembic.
    """
    with _connection(engine_or_url) as conn:
        return _current(conn) == {HEAD_REVISION}


def _is_at(conn: Connection, revision: str) -> bool:
    """True when the database is exactly at ``revision`` (``head``, ``base``, an id…).

    Read after taking the migration lock: a process that waited for another's migration
    sees its result here. A relative (``+1``) or unknown revision is never "there"; Alembic
    then decides, and explains an unknown one.
    """
    from alembic.runtime.migration import MigrationContext
    from alembic.script.revision import RevisionError
    from alembic.util import CommandError

    if re.search(r"[+-]\d", revision):  # relative to where the database is (-1, head-2…)
        return False
    try:
        wanted = {script.revision for script in _scripts().get_revisions(revision) if script}
    except (RevisionError, CommandError):
        return False
    return set(MigrationContext.configure(conn).get_current_heads()) == wanted


def _has_table(conn: Connection, name: str) -> bool:
    return conn.dialect.has_table(conn, name)


def _config(conn: Connection | None = None) -> Config:
    from alembic.config import Config

    config = Config()
    # configparser interpolates '%': a path holding one must be escaped.
    config.set_main_option("script_location", str(migrations_dir()).replace("%", "%%"))
    config.set_main_option("path_separator", "os")
    # env.py runs on this connection, inside the caller's transaction.
    config.attributes["connection"] = conn
    return config


def _scripts() -> ScriptDirectory:
    from alembic.script import ScriptDirectory

    return ScriptDirectory.from_config(_config())


def _run(step: Callable[[Config], None], conn: Connection) -> None:
    from alembic.util import CommandError

    try:
        step(_config(conn))
    except CommandError as error:  # an unknown revision, several heads…
        raise StoreError(f"state store: migration: {error}") from error


@contextmanager
def _connection(engine_or_url: EngineOrUrl, *, write: bool = False) -> Iterator[Connection]:
    """A connection in a transaction, committed if the block succeeds."""
    if isinstance(engine_or_url, Engine):
        engine, owned = engine_or_url, False
    else:
        engine, owned = make_engine(engine_or_url), True
    try:
        with transaction(engine, write=write) as conn:
            yield conn
    finally:
        if owned:
            engine.dispose()
