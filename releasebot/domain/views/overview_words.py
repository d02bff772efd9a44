"""What every part of the coverage page's view shares: each state in words, and stored
text made safe to show (``untrusted.clean``, bounded), times as ISO 8601.

Its own module so that ``overview.py`` (which asks ``overview_fleet.judge_nodes``) and
``overview_fleet.py`` share it without a cycle. Nothing here reads anything.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime

from releasebot.domain.shared.untrusted import clean
from releasebot.domain.targets.models import TargetRecord, TargetState

Json = dict[str, object]

LOG_TAIL_MAX_CHARS = 4000
"""The log tail shown in a target's detail; the store keeps a bounded tail already."""
ERROR_MAX_CHARS = 500
NAME_MAX_CHARS = 253

STATE_WORDS: Mapping[TargetState, str] = {
    TargetState.UNKNOWN: "not checked yet",
    TargetState.MISSING: "missing",
    TargetState.WAITING: "waiting for inputs",
    TargetState.BUILDING: "building",
    TargetState.RETRYING: "retrying",
    TargetState.PUBLISHED: "published",
    TargetState.STALE: "stale: rebuilding",
    TargetState.FAILED: "failed",
    TargetState.INCOMPATIBLE: "incompatible: does not compile",
    TargetState.REFUSED: "refused: a GPU node could not prove it",
}
"""Each state in words, so a cell never says it by colour alone."""


def text(value: object, limit: int = ERROR_MAX_CHARS) -> str | None:
    """``value`` as one printable line (``untrusted.clean``): for every stored text."""
    return clean(value, limit=limit)


def text_block(value: str | None, limit: int = LOG_TAIL_MAX_CHARS) -> str | None:
    """A multi-line text (a log tail): lines kept, control characters dropped, bounded."""
    if value is None:
        return None
    lines = [clean(line, limit=limit) or "" for line in value[-limit:].splitlines()]
    return "\n".join(lines).strip("\n") or None


def iso_time(value: datetime | None) -> str | None:
    return None if value is None else value.isoformat()


def cell_words(record: TargetRecord) -> str:
    """The state in words, with the attempt when there was more than one."""
    words = STATE_WORDS[record.state]
    if record.state in (TargetState.RETRYING, TargetState.BUILDING) and record.attempts > 1:
        words += f" (attempt {record.attempts})"
    return words
