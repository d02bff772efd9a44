"""Credentials as outside text quotes them, and a scan of a database for any left in clear.

``LEAK`` is one error text in every credential form releasebot meets: a registry URL with
its password, a token in a query string, an ``Authorization`` header, a Slack token, a
JSON member. ``SECRETS`` are the values that must never be found in a stored row;
``clear_secrets`` reads every text of every table (whatever its column) and lists where one
of them is, so a column added later is covered without naming it here.
"""

from __future__ import annotations

from sqlalchemy import Engine, String, inspect, select

from releasebot.store.tables import metadata

SECRETS = (
    "hunter2-pw",
    "tok-abc123",
    "eyJhbGciOiJIUzI1NiJ9",
    "xoxb-1234567890-abcdef",
    "p4ss-w0rd",
)
LEAK = " / ".join(
    (
        "push to https://robot:hunter2-pw@registry.example.com/v2/ refused",
        "GET https://feeds.example/nvidia.json?token=tok-abc123&x=1: 500",
        "Authorization: Bearer eyJhbGciOiJIUzI1NiJ9.e30.sig",
        "Slack said invalid_auth for xoxb-1234567890-abcdef",
        'config.json holds {"password": "p4ss-w0rd"}',
    )
)
KEPT = ("registry.example.com/v2/ refused", "feeds.example/nvidia.json", "invalid_auth")
"""What masking keeps of ``LEAK``: masked, not dropped."""


def clear_secrets(engine: Engine) -> list[tuple[str, str]]:
    """Every (table.column, secret) where a stored text holds one of ``SECRETS``; at an
    older revision, only the tables and columns it has."""
    found = []
    schema = inspect(engine)
    present = set(schema.get_table_names())
    with engine.connect() as conn:
        for table in metadata.sorted_tables:
            if table.name not in present:
                continue
            names = {column["name"] for column in schema.get_columns(table.name)}
            columns = [column for column in table.columns if column.name in names]
            for row in conn.execute(select(*columns)).mappings():
                for column, value in row.items():
                    if isinstance(value, str):
                        found += [(f"{table.name}.{column}", s) for s in SECRETS if s in value]
    return found


def text_columns() -> list[str]:
    """Every text column of the schema, as ``table.column``."""
    return [
        f"{table.name}.{column.name}"
        for table in metadata.sorted_tables
        for column in table.columns
        if isinstance(column.type, String)
    ]
