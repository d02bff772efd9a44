"""Alembic's environment for releasebot's state store.

``releasebot.store.migrate`` builds the Alembic configuration in code and hands this script
an open connection (``config.attributes["connection"]``) inside its own transaction; with a
``sqlalchemy.url`` option instead, the script opens an engine through ``make_engine`` so the
same SQLite pragmas and PostgreSQL driver apply. Offline mode (``--sql``) renders SQL for
the URL's dialect.

SQLite cannot alter most of a table in place, so its migrations run in batch mode (copy,
alter, swap). Autogenerate compares column types too, and writes ``UtcDateTime`` as the
portable ``sa.DateTime(timezone=True)`` it stands for, so revisions never import releasebot.
"""

from __future__ import annotations

from typing import Any, Literal

from alembic import context
from alembic.autogenerate.api import AutogenContext
from sqlalchemy import Connection

from releasebot.store.engine import make_engine
from releasebot.store.tables import UtcDateTime, metadata

config = context.config


def _render_item(kind: str, obj: Any, autogen_context: AutogenContext) -> str | Literal[False]:
    if kind == "type" and isinstance(obj, UtcDateTime):
        return "sa.DateTime(timezone=True)"
    return False


def _configure(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=metadata,
        render_as_batch=connection.dialect.name == "sqlite",
        compare_type=True,
        render_item=_render_item,
    )


def run_migrations_offline() -> None:
    context.configure(
        url=config.get_main_option("sqlalchemy.url"),
        target_metadata=metadata,
        literal_binds=True,
        dialect_opts={"paramstyle": "named"},
        render_as_batch=True,
        compare_type=True,
        render_item=_render_item,
    )
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    connection = config.attributes.get("connection")
    if connection is not None:
        _configure(connection)
        with context.begin_transaction():
            context.run_migrations()
        return
    url = config.get_main_option("sqlalchemy.url")
    if not url:
        raise RuntimeError("migrations: pass a connection or set the sqlalchemy.url option")
    engine = make_engine(url)
    try:
        with engine.connect() as connection:
            _configure(connection)
            with context.begin_transaction():
                context.run_migrations()
    finally:
        engine.dispose()


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
