"""The fleet: which node ran which Flatcar version, kernel and arch, and when; why a target exists.

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-01

``fleet_nodes`` keeps one row per node and state (version, kernel, arch, GPU, pending
version, ignored reason); a listing that finds a node unchanged only moves its latest row's
``last_seen_at``. The index on ``name`` serves "latest row per node" and one node's history.

``targets.reasons`` says why a target must exist (``channel``, ``fleet``,
``pending-reboot``, comma-separated). Every target required before this revision was the
channel policy's; targets no longer required keep no reason.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "fleet_nodes",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("name", sa.String(length=253), nullable=False),
        sa.Column("version", sa.String(length=32), nullable=True),
        sa.Column("kernel", sa.String(length=80), nullable=True),
        sa.Column("arch", sa.String(length=32), nullable=True),
        sa.Column("gpu", sa.Boolean(), nullable=False),
        sa.Column("pending_version", sa.String(length=32), nullable=True),
        sa.Column("ignored_reason", sa.String(length=1000), nullable=True),
        sa.Column("first_seen_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("last_seen_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_fleet_nodes"),
    )
    op.create_index("ix_fleet_nodes_name", "fleet_nodes", ["name"])
    with op.batch_alter_table("targets") as batch:
        batch.add_column(sa.Column("reasons", sa.Text(), nullable=False, server_default=""))
    targets = sa.table("targets", sa.column("reasons", sa.Text), sa.column("required", sa.Boolean))
    op.execute(targets.update().where(targets.c.required.is_(True)).values(reasons="channel"))


def downgrade() -> None:
    with op.batch_alter_table("targets") as batch:
        batch.drop_column("reasons")
    op.drop_index("ix_fleet_nodes_name", table_name="fleet_nodes")
    op.drop_table("fleet_nodes")
