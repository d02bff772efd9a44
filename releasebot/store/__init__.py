"""The state store: everything releasebot remembers between polls, behind the ``StateStore`` port.

- ``tables``: the schema as SQLAlchemy Core tables (what the migrations must match);
- ``engine``: ``make_engine`` for SQLite and PostgreSQL, and database error translation;
- ``sql``: ``SqlStateStore``, the port on a database;
- ``memory``: ``MemoryStateStore``, the same behaviour in dicts (dry runs, tests);
- ``migrate``: Alembic driven from code (``upgrade``, ``downgrade``, ``is_at_head``), and
  ``schema_status``, asked before any use (a newer database, a missing table);
- ``decode``: row mappers made defensive (an unreadable value names its table and row).

Importing this package imports none of them: nothing here connects at import time, and a
dry run that only needs the memory store does not pay for Alembic.
"""
