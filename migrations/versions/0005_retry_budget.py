"""Where a target's current retry budget starts: a person's build or retry renews it.

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-02

``targets.budget_start`` is the number of attempts made before the current retry budget
began. The budget counts the attempts since the last one that published or since
``budget_start``, whichever is later; a person's build or retry sets it to the attempts
made so far, so that attempt and its automatic retries get the whole ``build.max_attempts``.
Rows written before this revision start at 0 (the budget counted from the last publish).
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("targets") as batch:
        batch.add_column(
            sa.Column("budget_start", sa.Integer(), nullable=False, server_default="0")
        )


def downgrade() -> None:
    with op.batch_alter_table("targets") as batch:
        batch.drop_column("budget_start")
