"""A fresh PostgreSQL database for tests, dropped afterwards.

The server comes from ``TEST_POSTGRES_URL`` (default: the local server with trust
auth). When it cannot be reached, tests are skipped on a developer's machine and FAIL in CI
(``CI`` set): CI must never pass by skipping the real database.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from sqlalchemy import exc
from sqlalchemy.engine import URL, make_url

from releasebot.store.engine import make_engine

POSTGRES_URL = os.environ.get(
    "TEST_POSTGRES_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test"
)


def postgres_unreachable(reason: str) -> None:
    """Skip a PostgreSQL test on a developer's machine; fail it in CI."""
    message = f"PostgreSQL not reachable ({reason}); set TEST_POSTGRES_URL"
    if os.environ.get("CI"):
        pytest.fail(f"{message} (CI is set, so this is an error, not a skip)")
    pytest.skip(message)


def reachable_postgres_url() -> URL:
    """The test server's URL, once a connection to it worked (else skip, or fail in CI)."""
    admin = make_engine(POSTGRES_URL)
    try:
        with admin.connect():
            pass
    except exc.OperationalError as error:
        postgres_unreachable(str(error.orig).splitlines()[0])
    finally:
        admin.dispose()
    return make_url(POSTGRES_URL)


@contextmanager
def fresh_postgres_database() -> Iterator[URL]:
    """Create ``releasebot_test_<random>``, yield its URL, drop it (even if still in use)."""
    admin = make_engine(POSTGRES_URL)
    name = f"releasebot_test_{secrets.token_hex(4)}"
    try:
        with admin.connect() as conn:
            conn.execution_options(isolation_level="AUTOCOMMIT")
            conn.exec_driver_sql(f'CREATE DATABASE "{name}"')
    except exc.OperationalError as error:
        admin.dispose()
        postgres_unreachable(str(error.orig).splitlines()[0])
    try:
        yield make_url(POSTGRES_URL).set(database=name)
    finally:
        with admin.connect() as conn:
            conn.execution_options(isolation_level="AUTOCOMMIT")
            conn.exec_driver_sql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.dispose()
