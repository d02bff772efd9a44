"""Driver bases: the kernel-independent image every per-release image is built FROM.

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-03

``driver_bases`` holds one row per base tag (``<driver>-base-<arch>-r<revision>-<os>``):
what it is made of, where its current attempt stands, and the digest per-release Jobs
get as ``DRIVER_BASE``. A new table: nothing to backfill (a release without it built
single images, which keep working; the next plan builds the bases it needs).
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0010"
down_revision: str | None = "0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "driver_bases",
        sa.Column("tag", sa.String(length=128), nullable=False),
        sa.Column("driver_version", sa.String(length=32), nullable=False),
        sa.Column("driver_branch", sa.String(length=32), nullable=False),
        sa.Column("arch", sa.String(length=16), nullable=False),
        sa.Column("recipe_revision", sa.Text(), nullable=False),
        sa.Column("os_images", sa.Text(), server_default="", nullable=False),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("attempts", sa.Integer(), server_default="0", nullable=False),
        sa.Column("budget_start", sa.Integer(), server_default="0", nullable=False),
        sa.Column("failures", sa.Integer(), server_default="0", nullable=False),
        sa.Column("job_name", sa.String(length=63), nullable=True),
        sa.Column("digest", sa.String(length=80), nullable=True),
        sa.Column("reason", sa.String(length=32), nullable=True),
        sa.Column("last_error", sa.Text(), nullable=True),
        sa.Column("log_tail", sa.Text(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("next_attempt_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("published_at", sa.DateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("tag", name="pk_driver_bases"),
    )


def downgrade() -> None:
    op.drop_table("driver_bases")
