"""Retention: every registry tag releasebot deleted, with its digest and why.

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-02

``retention_deletions`` keeps one row per deleted tag (tag, digest, Flatcar version,
reason, how many signature/attestation manifests went with it, when). Rows are never
deleted: the table is the record of what retention did.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0006"
down_revision: str | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "retention_deletions",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("tag", sa.String(length=128), nullable=False),
        sa.Column("digest", sa.String(length=80), nullable=False),
        sa.Column("flatcar_version", sa.String(length=32), nullable=False),
        sa.Column("reason", sa.String(length=1000), nullable=False),
        sa.Column("attachments", sa.Integer(), nullable=False, server_default="0"),
        sa.Column("deleted_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_retention_deletions"),
    )
    op.create_index("ix_retention_deletions_tag", "retention_deletions", ["tag"])


def downgrade() -> None:
    op.drop_index("ix_retention_deletions_tag", table_name="retention_deletions")
    op.drop_table("retention_deletions")
