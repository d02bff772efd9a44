"""The state store's schema as SQLAlchemy Core tables: the one source the migrations follow.

Columns stay portable between SQLite and PostgreSQL: text, integers, booleans, dates and
``DateTime(timezone=True)`` through ``UtcDateTime``, which writes UTC and hands back aware
UTC datetimes (SQLite keeps no time zone; PostgreSQL answers in the session's zone).
Lists are stored as text (arches comma-separated, runfile URLs as JSON) rather than as
database-specific array or JSON types.

This module declares; it does not query (``sql.py``), does not change a live schema
(``migrations/``, checked against ``metadata`` by the migration tests for drift), and does
not trim values to fit (``limits.py``, which the in-memory store shares).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import (
    BigInteger,
    Boolean,
    Column,
    Date,
    DateTime,
    Dialect,
    ForeignKey,
    Integer,
    MetaData,
    String,
    Table,
    Text,
)
from sqlalchemy.types import TypeDecorator

from releasebot.domain.shared.versions import Arch, sorted_arches
from releasebot.edge.text import one_line
from releasebot.store.limits import ERROR_MAX_CHARS

# Explicit constraint names, so that migrations can name what they alter or drop, and
# SQLite's batch mode (which recreates tables) keeps the same names as PostgreSQL.
NAMING_CONVENTION = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

VERSION_LENGTH = 32
"""Flatcar versions are at most 29 characters (three 9-digit parts), driver versions 20."""

TAG_LENGTH = 128
"""The OCI distribution spec's limit for a tag."""

metadata = MetaData(naming_convention=NAMING_CONVENTION)


@dataclass(frozen=True)
class Unreadable:
    """What a column holds that cannot be read as its type (``raw``, shown safely): a
    timestamp another program stored as text, say. Handed back in place of the value, so
    that the row's mapper (``store.decode``) can name the table, the row and the column
    instead of the driver failing somewhere inside a fetch."""

    raw: str
    why: str


class UtcDateTime(TypeDecorator[datetime]):
    """A timestamp stored in UTC and always read back as an aware UTC ``datetime``.

    Naive datetimes are refused: the domain only uses aware UTC times, so a naive one is a
    bug that would otherwise be stored silently shifted.
    """

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None or value.utcoffset() is None:
            raise ValueError(f"naive datetime {value.isoformat()} given to the state store")
        return value.astimezone(UTC)

    def result_processor(self, dialect: Dialect, coltype: Any) -> Any:
        process = super().result_processor(dialect, coltype)

        def read(value: Any) -> Any:
            try:
                return process(value) if process is not None else value
            except (ValueError, TypeError, OverflowError) as error:
                return Unreadable(raw=one_line(repr(value), 60), why=one_line(error, 80))

        return read

    def process_result_value(self, value: Any, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if not isinstance(value, datetime):  # a number or text another program stored
            raise TypeError(f"expected a datetime from the database, got {type(value)!r}")
        if value.tzinfo is None:
            return value.replace(tzinfo=UTC)
        return value.astimezone(UTC)


def join_arches(arches: frozenset[Arch] | tuple[Arch, ...]) -> str:
    """Arches as an ``arches`` column holds them: sorted, comma-separated (``amd64,arm64``)."""
    return ",".join(arch.value for arch in sorted_arches(frozenset(arches)))


def split_arches(text: str) -> tuple[Arch, ...]:
    return tuple(Arch(part) for part in text.split(",") if part)


feeds = Table(
    "feeds",
    metadata,
    Column("name", Text, primary_key=True),
    Column("url", Text, nullable=False),
    Column("etag", Text),
    Column("last_modified", Text),
    Column("body_sha256", Text),
    Column("last_polled_at", UtcDateTime),
    Column("last_success_at", UtcDateTime),
    Column("last_changed_at", UtcDateTime),
    Column("last_error", String(ERROR_MAX_CHARS)),
    Column("last_error_at", UtcDateTime),
    Column("consecutive_failures", Integer, nullable=False),
)

flatcar_releases = Table(
    "flatcar_releases",
    metadata,
    Column("version", String(VERSION_LENGTH), primary_key=True),
    # The version's parts, so that SQL (and a human at a psql prompt) can order releases
    # as integer tuples: text order puts 4081.3.10 before 4081.3.2.
    Column("major", Integer, nullable=False),
    Column("minor", Integer, nullable=False),
    Column("patch", Integer, nullable=False),
    Column("channel", Text, nullable=False),
    Column("arches", Text, nullable=False),
    Column("kernel", Text, nullable=False),
    Column("released_at", UtcDateTime),
    Column("content_sha256", Text, nullable=False),
    Column("first_seen_at", UtcDateTime, nullable=False),
    Column("updated_at", UtcDateTime, nullable=False),
)

flatcar_feed_entries = Table(
    "flatcar_feed_entries",
    metadata,
    Column("feed", Text, ForeignKey(feeds.c.name), primary_key=True),
    Column(
        "version",
        String(VERSION_LENGTH),
        ForeignKey(flatcar_releases.c.version),
        primary_key=True,
    ),
    Column("first_seen_at", UtcDateTime, nullable=False),
    Column("last_seen_at", UtcDateTime, nullable=False),
    Column("present", Boolean, nullable=False),
)

driver_releases = Table(
    "driver_releases",
    metadata,
    Column("version", String(VERSION_LENGTH), primary_key=True),
    Column("branch", Text, nullable=False),
    Column("branch_type", Text, nullable=False),
    Column("arches", Text, nullable=False),
    Column("released_on", Date),
    Column("runfile_urls", Text, nullable=False),
    Column("content_sha256", Text, nullable=False),
    Column("first_seen_at", UtcDateTime, nullable=False),
    Column("updated_at", UtcDateTime, nullable=False),
)

driver_feed_entries = Table(
    "driver_feed_entries",
    metadata,
    Column("feed", Text, ForeignKey(feeds.c.name), primary_key=True),
    Column(
        "version",
        String(VERSION_LENGTH),
        ForeignKey(driver_releases.c.version),
        primary_key=True,
    ),
    Column("first_seen_at", UtcDateTime, nullable=False),
    Column("last_seen_at", UtcDateTime, nullable=False),
    Column("present", Boolean, nullable=False),
)

targets = Table(
    "targets",
    metadata,
    Column("tag", String(TAG_LENGTH), primary_key=True),
    Column("driver_version", String(VERSION_LENGTH), nullable=False),
    Column("driver_branch", Text, nullable=False),
    Column("flatcar_version", String(VERSION_LENGTH), nullable=False),
    Column("flatcar_channel", Text, nullable=False),
    Column("kernel", Text, nullable=False),
    Column("arches", Text, nullable=False),
    # Why it must exist (``channel``, ``fleet``, ``pending-reboot``), comma-separated.
    Column("reasons", Text, nullable=False, server_default=""),
    Column("state", Text, nullable=False),
    Column("required", Boolean, nullable=False),
    Column("first_planned_at", UtcDateTime, nullable=False),
    Column("updated_at", UtcDateTime, nullable=False),
    Column("digest", Text),
    Column("attempts", Integer, nullable=False, server_default="0"),
    Column("next_attempt_at", UtcDateTime),
    Column("last_error", Text),
    Column("published_at", UtcDateTime),
    # Attempts made before the current retry budget began (a person's build or retry).
    Column("budget_start", Integer, nullable=False, server_default="0"),
    # The after-reboot proof: when and on which node the image was first proven.
    Column("proven_at", UtcDateTime),
    Column("proven_node", Text),
    Column("proven_arches", Text, nullable=False, server_default=""),
)

builds = Table(
    "builds",
    metadata,
    Column("tag", String(TAG_LENGTH), ForeignKey(targets.c.tag), primary_key=True),
    Column("arch", String(16), primary_key=True),
    Column("attempt", Integer, primary_key=True),
    Column("job_name", String(63), nullable=False, unique=True),
    Column("destination_tag", String(TAG_LENGTH), nullable=False),
    Column("state", Text, nullable=False),
    Column("digest", Text),
    Column("reason", Text),
    Column("message", Text),
    Column("log_tail", Text),
    Column("created_at", UtcDateTime, nullable=False),
    Column("finished_at", UtcDateTime),
)

proofs = Table(
    "proofs",
    metadata,
    Column("node", String(253), primary_key=True),
    Column("state", Text, nullable=False),
    Column("updated_at", UtcDateTime, nullable=False),
    Column("version", String(VERSION_LENGTH)),
    Column("tag", String(TAG_LENGTH)),
    Column("arch", String(16)),
    Column("gpus_before", Integer),
    Column("boot_id", Text),
    Column("armed_at", UtcDateTime),
    Column("started_at", UtcDateTime),
    Column("healthy_since", UtcDateTime),
    Column("reason", Text),
    Column("pod", Text),
    Column("log_tail", Text),
)
"""The after-reboot proof: one row per node FLUO reboots (``domain/fleet/proof.py``)."""

outbox = Table(
    "outbox",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("kind", Text, nullable=False),
    Column("message_key", Text, nullable=False, index=True),
    Column("subject", Text, nullable=False),
    Column("payload", Text, nullable=False),
    Column("created_at", UtcDateTime, nullable=False),
    Column("attempts", Integer, nullable=False, server_default="0"),
    Column("next_attempt_at", UtcDateTime),
    Column("last_error", Text),
    Column("delivered_at", UtcDateTime, index=True),
)
"""Events to tell, written with the state change they describe; delivered later."""

message_refs = Table(
    "message_refs",
    metadata,
    Column("message_key", Text, primary_key=True),
    Column("channel", Text, nullable=False),
    Column("ts", Text, nullable=False),
    Column("created_at", UtcDateTime, nullable=False),
)
"""The chat message each build (or feed) edits in place: Slack's channel ID and ``ts``."""

flags = Table(
    "flags",
    metadata,
    Column("name", Text, primary_key=True),
    Column("value", Text, nullable=False),
    Column("updated_at", UtcDateTime, nullable=False),
)
"""Named switches set by people or the service: ``paused``, feed alert marks."""

locks = Table(
    "locks",
    metadata,
    Column("name", Text, primary_key=True),
    Column("holder", Text, nullable=False),
    Column("expires_at", UtcDateTime, nullable=False),
)
"""Lease rows for SQLite, where there are no advisory locks: one writer of cycles at once."""

fleet_nodes = Table(
    "fleet_nodes",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("name", String(253), nullable=False, index=True),
    Column("version", String(VERSION_LENGTH)),
    Column("kernel", String(80)),
    Column("arch", String(32)),
    Column("gpu", Boolean, nullable=False),
    Column("pending_version", String(VERSION_LENGTH)),
    Column("ignored_reason", String(ERROR_MAX_CHARS)),
    Column("first_seen_at", UtcDateTime, nullable=False),
    Column("last_seen_at", UtcDateTime, nullable=False),
)
"""Fleet history: one row per node and state (``domain/fleet/records.py``); the highest
``id`` of a name is its latest state. Rows are never deleted."""

retention_deletions = Table(
    "retention_deletions",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("tag", String(TAG_LENGTH), nullable=False, index=True),
    Column("digest", String(80), nullable=False),
    Column("flatcar_version", String(VERSION_LENGTH), nullable=False),
    Column("reason", String(ERROR_MAX_CHARS), nullable=False),
    Column("attachments", Integer, nullable=False, server_default="0"),
    Column("deleted_at", UtcDateTime, nullable=False),
)
"""Every registry tag retention deleted, with the digest and why; rows are never deleted."""

store_revisions = Table(
    "store_revisions",
    metadata,
    Column("name", String(64), primary_key=True),
    Column("value", BigInteger, nullable=False),
)
"""One change counter per table: every write transaction of the store that changes a table
adds one to its counter, in the same transaction (``store/revisions.py``). Readers compare
counters to skip reading what did not change. Rows are never deleted."""

driver_bases = Table(
    "driver_bases",
    metadata,
    Column("tag", String(TAG_LENGTH), primary_key=True),
    Column("driver_version", String(VERSION_LENGTH), nullable=False),
    Column("driver_branch", String(VERSION_LENGTH), nullable=False),
    Column("arch", String(16), nullable=False),
    Column("recipe_revision", Text, nullable=False),
    Column("os_images", Text, nullable=False, server_default=""),
    Column("state", String(16), nullable=False),
    Column("attempts", Integer, nullable=False, server_default="0"),
    Column("budget_start", Integer, nullable=False, server_default="0"),
    Column("failures", Integer, nullable=False, server_default="0"),
    Column("job_name", String(63)),
    Column("digest", String(80)),
    Column("reason", String(32)),
    Column("last_error", Text),
    Column("log_tail", Text),
    Column("created_at", UtcDateTime, nullable=False),
    Column("updated_at", UtcDateTime, nullable=False),
    Column("started_at", UtcDateTime),
    Column("next_attempt_at", UtcDateTime),
    Column("published_at", UtcDateTime),
)
"""Driver bases (``domain/targets/bases.py``): one row per base tag, with its current or last
attempt; the digest per-release Jobs are built FROM. Rows are never deleted (a base that
no plan needs any more stays known, as its tag stays in the registry)."""
