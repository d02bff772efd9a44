"""Notifications and coordination: the outbox, chat message refs, flags and locks.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-30

``outbox`` rows are written in the same transaction as the state change they announce and
delivered later; ``message_refs`` remember which chat message a build edits in place;
``flags`` hold switches such as ``paused``; ``locks`` are lease rows that keep two cycles
from writing at once on SQLite (PostgreSQL uses advisory locks instead).
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def _at(name: str, *, nullable: bool = True) -> sa.Column[object]:
    return sa.Column(name, sa.DateTime(timezone=True), nullable=nullable)


def upgrade() -> None:
    op.create_table(
        "outbox",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("kind", sa.Text(), nullable=False),
        sa.Column("message_key", sa.Text(), nullable=False),
        sa.Column("subject", sa.Text(), nullable=False),
        sa.Column("payload", sa.Text(), nullable=False),
        _at("created_at", nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False, server_default="0"),
        _at("next_attempt_at"),
        sa.Column("last_error", sa.Text(), nullable=True),
        _at("delivered_at"),
        sa.PrimaryKeyConstraint("id", name="pk_outbox"),
    )
    op.create_index("ix_outbox_message_key", "outbox", ["message_key"])
    op.create_index("ix_outbox_delivered_at", "outbox", ["delivered_at"])
    op.create_table(
        "message_refs",
        sa.Column("message_key", sa.Text(), nullable=False),
        sa.Column("channel", sa.Text(), nullable=False),
        sa.Column("ts", sa.Text(), nullable=False),
        _at("created_at", nullable=False),
        sa.PrimaryKeyConstraint("message_key", name="pk_message_refs"),
    )
    op.create_table(
        "flags",
        sa.Column("name", sa.Text(), nullable=False),
        sa.Column("value", sa.Text(), nullable=False),
        _at("updated_at", nullable=False),
        sa.PrimaryKeyConstraint("name", name="pk_flags"),
    )
    op.create_table(
        "locks",
        sa.Column("name", sa.Text(), nullable=False),
        sa.Column("holder", sa.Text(), nullable=False),
        _at("expires_at", nullable=False),
        sa.PrimaryKeyConstraint("name", name="pk_locks"),
    )


def downgrade() -> None:
    op.drop_table("locks")
    op.drop_table("flags")
    op.drop_table("message_refs")
    op.drop_index("ix_outbox_delivered_at", table_name="outbox")
    op.drop_index("ix_outbox_message_key", table_name="outbox")
    op.drop_table("outbox")
