"""One change counter per table, so readers can skip what did not change.

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-03

``store_revisions`` holds one row per table the store writes (``name``, ``value``); each
write transaction adds one to the counter of every table it changed, in the same
transaction (``releasebot/store/revisions.py``). A table without a row has never been
written since this revision: readers take a missing row as 0 and read the table in full,
so existing data needs no backfill.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0009"
down_revision: str | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "store_revisions",
        sa.Column("name", sa.String(length=64), nullable=False),
        sa.Column("value", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("name", name="pk_store_revisions"),
    )


def downgrade() -> None:
    op.drop_table("store_revisions")
