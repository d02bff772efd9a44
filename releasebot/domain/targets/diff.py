"""How a new plan changes the stored targets: one pure function both stores apply.

``diff_targets`` decides which planned targets are new, which are unchanged, which changed
(``TargetRecord.replanned`` keeps their state and history) and which stored required
targets drop out of the plan (kept, with ``required=False``). The stores only read what it
needs and write what it returns, so the SQL and in-memory stores cannot drift apart. Nothing
here reads or writes a store.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime

from releasebot.domain.targets.models import Target, TargetRecord


@dataclass(frozen=True)
class TargetDiff:
    """What syncing a plan writes, and what it returns."""

    result: tuple[TargetRecord, ...]
    """The planned targets as stored after the sync, in plan order."""
    inserts: tuple[TargetRecord, ...]
    """Targets never stored before."""
    updates: tuple[TargetRecord, ...]
    """Stored targets whose plan fields changed or that dropped out, as they become."""


def diff_targets(
    stored: Mapping[str, TargetRecord], planned: Sequence[Target], now: datetime
) -> TargetDiff:
    """Make ``planned`` the required targets, given the ``stored`` ones by tag.

    ``stored`` must hold at least every stored target that is required or planned; others
    are ignored. A plan identical to the stored one inserts and updates nothing. Raises
    ``ValueError`` when the plan lists a tag twice (a policy bug, not a data problem).
    """
    wanted = [TargetRecord.new(target, now=now) for target in planned]
    tags = {record.tag for record in wanted}
    if len(tags) != len(wanted):
        raise ValueError("sync_targets: the plan lists a tag twice")
    result: list[TargetRecord] = []
    inserts: list[TargetRecord] = []
    updates: list[TargetRecord] = []
    for record in wanted:
        old = stored.get(record.tag)
        if old is None:
            inserts.append(record)
        elif old.same_plan(record):
            record = old
        else:
            record = old.replanned(record, now)
            updates.append(record)
        result.append(record)
    for tag, old in stored.items():
        if old.required and tag not in tags:
            updates.append(replace(old, required=False, updated_at=now))
    return TargetDiff(result=tuple(result), inserts=tuple(inserts), updates=tuple(updates))


def requested_target(target: Target, now: datetime) -> TargetRecord:
    """The record of a target asked for by hand: stored if new, but not required.

    Only the policy makes a target required (``diff_targets``); a hand-asked one that the
    policy never selects stays optional and is never deleted.
    """
    return TargetRecord.new(target, now=now, required=False)
