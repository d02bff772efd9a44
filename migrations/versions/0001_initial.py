"""Initial schema: feeds, the releases they list, and the targets planned from them.

Revision ID: 0001
Revises:
Create Date: 2026-11-30

Releases are keyed by version and never deleted; ``*_feed_entries`` record which feed
listed which version and whether it still does (one version can be in ``lts`` and
``lts-2024``). Timestamps are UTC (``timestamp with time zone`` on PostgreSQL).
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0001"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def _at(name: str, *, nullable: bool = True) -> sa.Column[object]:
    """A UTC timestamp column."""
    return sa.Column(name, sa.DateTime(timezone=True), nullable=nullable)


def upgrade() -> None:
    op.create_table(
        "feeds",
        sa.Column("name", sa.Text(), nullable=False),
        sa.Column("url", sa.Text(), nullable=False),
        sa.Column("etag", sa.Text(), nullable=True),
        sa.Column("last_modified", sa.Text(), nullable=True),
        sa.Column("body_sha256", sa.Text(), nullable=True),
        _at("last_polled_at"),
        _at("last_success_at"),
        _at("last_changed_at"),
        sa.Column("last_error", sa.String(length=1000), nullable=True),
        _at("last_error_at"),
        sa.Column("consecutive_failures", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("name", name="pk_feeds"),
    )
    op.create_table(
        "flatcar_releases",
        sa.Column("version", sa.String(length=32), nullable=False),
        sa.Column("major", sa.Integer(), nullable=False),
        sa.Column("minor", sa.Integer(), nullable=False),
        sa.Column("patch", sa.Integer(), nullable=False),
        sa.Column("channel", sa.Text(), nullable=False),
        sa.Column("arches", sa.Text(), nullable=False),
        sa.Column("kernel", sa.Text(), nullable=False),
        _at("released_at"),
        sa.Column("content_sha256", sa.Text(), nullable=False),
        _at("first_seen_at", nullable=False),
        _at("updated_at", nullable=False),
        sa.PrimaryKeyConstraint("version", name="pk_flatcar_releases"),
    )
    op.create_table(
        "flatcar_feed_entries",
        sa.Column("feed", sa.Text(), nullable=False),
        sa.Column("version", sa.String(length=32), nullable=False),
        _at("first_seen_at", nullable=False),
        _at("last_seen_at", nullable=False),
        sa.Column("present", sa.Boolean(), nullable=False),
        sa.PrimaryKeyConstraint("feed", "version", name="pk_flatcar_feed_entries"),
        sa.ForeignKeyConstraint(
            ["feed"], ["feeds.name"], name="fk_flatcar_feed_entries_feed_feeds"
        ),
        sa.ForeignKeyConstraint(
            ["version"],
            ["flatcar_releases.version"],
            name="fk_flatcar_feed_entries_version_flatcar_releases",
        ),
    )
    op.create_table(
        "driver_releases",
        sa.Column("version", sa.String(length=32), nullable=False),
        sa.Column("branch", sa.Text(), nullable=False),
        sa.Column("branch_type", sa.Text(), nullable=False),
        sa.Column("arches", sa.Text(), nullable=False),
        sa.Column("released_on", sa.Date(), nullable=True),
        sa.Column("runfile_urls", sa.Text(), nullable=False),
        sa.Column("content_sha256", sa.Text(), nullable=False),
        _at("first_seen_at", nullable=False),
        _at("updated_at", nullable=False),
        sa.PrimaryKeyConstraint("version", name="pk_driver_releases"),
    )
    op.create_table(
        "driver_feed_entries",
        sa.Column("feed", sa.Text(), nullable=False),
        sa.Column("version", sa.String(length=32), nullable=False),
        _at("first_seen_at", nullable=False),
        _at("last_seen_at", nullable=False),
        sa.Column("present", sa.Boolean(), nullable=False),
        sa.PrimaryKeyConstraint("feed", "version", name="pk_driver_feed_entries"),
        sa.ForeignKeyConstraint(["feed"], ["feeds.name"], name="fk_driver_feed_entries_feed_feeds"),
        sa.ForeignKeyConstraint(
            ["version"],
            ["driver_releases.version"],
            name="fk_driver_feed_entries_version_driver_releases",
        ),
    )
    op.create_table(
        "targets",
        sa.Column("tag", sa.String(length=128), nullable=False),
        sa.Column("driver_version", sa.String(length=32), nullable=False),
        sa.Column("driver_branch", sa.Text(), nullable=False),
        sa.Column("flatcar_version", sa.String(length=32), nullable=False),
        sa.Column("flatcar_channel", sa.Text(), nullable=False),
        sa.Column("kernel", sa.Text(), nullable=False),
        sa.Column("arches", sa.Text(), nullable=False),
        sa.Column("state", sa.Text(), nullable=False),
        sa.Column("required", sa.Boolean(), nullable=False),
        _at("first_planned_at", nullable=False),
        _at("updated_at", nullable=False),
        sa.PrimaryKeyConstraint("tag", name="pk_targets"),
    )


def downgrade() -> None:
    op.drop_table("targets")
    op.drop_table("driver_feed_entries")
    op.drop_table("driver_releases")
    op.drop_table("flatcar_feed_entries")
    op.drop_table("flatcar_releases")
    op.drop_table("feeds")
