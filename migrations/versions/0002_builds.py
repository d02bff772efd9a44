"""Builds: per-target build status and one row per Kaniko run.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-30

``targets`` gains the registry digest, the attempt counter, the time of the next attempt
after a transient failure, the last error and the publication time. ``builds`` keeps one
row per (tag, arch, attempt), written BEFORE its Job is created so that a restart adopts
the Job instead of launching a twin.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def _at(name: str, *, nullable: bool = True) -> sa.Column[object]:
    return sa.Column(name, sa.DateTime(timezone=True), nullable=nullable)


def upgrade() -> None:
    with op.batch_alter_table("targets") as batch:
        batch.add_column(sa.Column("digest", sa.Text(), nullable=True))
        batch.add_column(sa.Column("attempts", sa.Integer(), nullable=False, server_default="0"))
        batch.add_column(_at("next_attempt_at"))
        batch.add_column(sa.Column("last_error", sa.Text(), nullable=True))
        batch.add_column(_at("published_at"))
    op.create_table(
        "builds",
        sa.Column("tag", sa.String(length=128), nullable=False),
        sa.Column("arch", sa.String(length=16), nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("job_name", sa.String(length=63), nullable=False),
        sa.Column("destination_tag", sa.String(length=128), nullable=False),
        sa.Column("state", sa.Text(), nullable=False),
        sa.Column("digest", sa.Text(), nullable=True),
        sa.Column("reason", sa.Text(), nullable=True),
        sa.Column("message", sa.Text(), nullable=True),
        sa.Column("log_tail", sa.Text(), nullable=True),
        _at("created_at", nullable=False),
        _at("finished_at"),
        sa.ForeignKeyConstraint(["tag"], ["targets.tag"], name="fk_builds_tag_targets"),
        sa.PrimaryKeyConstraint("tag", "arch", "attempt", name="pk_builds"),
        sa.UniqueConstraint("job_name", name="uq_builds_job_name"),
    )


def downgrade() -> None:
    op.drop_table("builds")
    with op.batch_alter_table("targets") as batch:
        batch.drop_column("published_at")
        batch.drop_column("last_error")
        batch.drop_column("next_attempt_at")
        batch.drop_column("attempts")
        batch.drop_column("digest")
