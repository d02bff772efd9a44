"""The after-reboot proof: one record per node FLUO reboots, and when an image was proven.

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-02

``proofs`` keeps, per node, what releasebot noted before FLUO rebooted it (the GPUs it
offered, its boot ID) and how the proof after the reboot stands (``domain/fleet/proof.py``), so a
restart or a leader change resumes a proof instead of starting it over. ``targets`` gains
``proven_at`` and ``proven_node`` (the first node that proved the image) and
``proven_arches`` (every arch a node proved it on: the gate's canary is per arch). The ``refused``
state needs no schema change (``targets.state`` is text).
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0007"
down_revision: str | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("targets") as batch:
        batch.add_column(sa.Column("proven_at", sa.DateTime(timezone=True), nullable=True))
        batch.add_column(sa.Column("proven_node", sa.Text(), nullable=True))
        batch.add_column(sa.Column("proven_arches", sa.Text(), nullable=False, server_default=""))
    op.create_table(
        "proofs",
        sa.Column("node", sa.String(length=253), nullable=False),
        sa.Column("state", sa.Text(), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("version", sa.String(length=32), nullable=True),
        sa.Column("tag", sa.String(length=128), nullable=True),
        sa.Column("arch", sa.String(length=16), nullable=True),
        sa.Column("gpus_before", sa.Integer(), nullable=True),
        sa.Column("boot_id", sa.Text(), nullable=True),
        sa.Column("armed_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("healthy_since", sa.DateTime(timezone=True), nullable=True),
        sa.Column("reason", sa.Text(), nullable=True),
        sa.Column("pod", sa.Text(), nullable=True),
        sa.Column("log_tail", sa.Text(), nullable=True),
        sa.PrimaryKeyConstraint("node", name="pk_proofs"),
    )


def downgrade() -> None:
    op.drop_table("proofs")
    # ALTER TABLE ... DROP COLUMN in place (SQLite 3.35 and later, PostgreSQL): a copy of
    # ``targets`` would have to be dropped, which the builds' foreign key refuses.
    with op.batch_alter_table("targets", recreate="never") as batch:
        batch.drop_column("proven_arches")
        batch.drop_column("proven_node")
        batch.drop_column("proven_at")
