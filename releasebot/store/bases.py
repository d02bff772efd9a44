"""Driver bases in SQL: the statements behind ``SqlStateStore``'s base methods, and the one
rule both stores apply to a base before they keep it.

``bases`` reads every base; ``save_bases`` upserts them by tag. Each function runs on a
connection the store opened in a transaction (so its writes move the ``driver_bases``
change counter, ``revisions.py``); this module neither opens transactions nor translates
errors (``sql.py``); rows are read through ``decode.row_mapper``, so an unreadable value
(an unknown state, a version that does not parse) is one ``StoreError`` naming the row.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from sqlalchemy import Connection, Row, insert, select, update

from releasebot.domain.shared.versions import Arch, DriverVersion
from releasebot.domain.targets.base_tags import BaseSpec
from releasebot.domain.targets.bases import BaseRecord, BaseState
from releasebot.domain.targets.builds import FailureReason
from releasebot.store.decode import row_mapper
from releasebot.store.limits import fit_error, fit_log
from releasebot.store.tables import driver_bases as _bases


def kept_base(record: BaseRecord) -> BaseRecord:
    """The base as a store keeps it: texts from outside (a Job's message, its log tail)
    masked and cut as every stored error and log is (``limits.py``)."""
    return replace(
        record,
        last_error=None if record.last_error is None else fit_error(record.last_error),
        log_tail=fit_log(record.log_tail),
    )


def bases(conn: Connection) -> list[BaseRecord]:
    rows = conn.execute(select(_bases).order_by(_bases.c.tag))
    return [_base(row) for row in rows]


def save_bases(conn: Connection, records: Sequence[BaseRecord]) -> None:
    if not records:
        return
    tags = [record.tag for record in records]
    existing = {row.tag for row in conn.execute(select(_bases.c.tag).where(_bases.c.tag.in_(tags)))}
    for record in records:
        values = _values(kept_base(record))
        if record.tag in existing:
            conn.execute(update(_bases).where(_bases.c.tag == record.tag).values(values))
        else:
            conn.execute(insert(_bases).values(values))
            existing.add(record.tag)


def _values(record: BaseRecord) -> dict[str, Any]:
    spec = record.spec
    return {
        "tag": record.tag,
        "driver_version": spec.driver_version.text,
        "driver_branch": spec.driver_branch,
        "arch": spec.arch.value,
        "recipe_revision": spec.revision,
        "os_images": "\n".join(f"{name}={value}" for name, value in spec.os_images),
        "state": record.state.value,
        "attempts": record.attempts,
        "budget_start": record.budget_start,
        "failures": record.failures,
        "job_name": record.job_name,
        "digest": record.digest,
        "reason": None if record.reason is None else record.reason.value,
        "last_error": record.last_error,
        "log_tail": record.log_tail,
        "created_at": record.created_at,
        "updated_at": record.updated_at,
        "started_at": record.started_at,
        "next_attempt_at": record.next_attempt_at,
        "published_at": record.published_at,
    }


def _os_images(text: str) -> tuple[tuple[str, str], ...]:
    pairs = []
    for line in text.splitlines():
        name, separator, value = line.partition("=")
        if not separator:
            raise ValueError(f"os_images line {line!r} is not NAME=VALUE")
        pairs.append((name, value))
    return tuple(pairs)


@row_mapper(_bases)
def _base(row: Row[Any]) -> BaseRecord:
    spec = BaseSpec(
        driver_version=DriverVersion.parse(row.driver_version),
        driver_branch=row.driver_branch,
        arch=Arch(row.arch),
        revision=row.recipe_revision,
        os_images=_os_images(row.os_images),
    )
    if spec.tag != row.tag:
        raise ValueError(f"the base's fields make tag {spec.tag}, the row says {row.tag}")
    return BaseRecord(
        spec=spec,
        state=BaseState(row.state),
        created_at=row.created_at,
        updated_at=row.updated_at,
        attempts=row.attempts,
        budget_start=row.budget_start,
        failures=row.failures,
        job_name=row.job_name,
        started_at=row.started_at,
        digest=row.digest,
        reason=None if row.reason is None else FailureReason(row.reason),
        last_error=row.last_error,
        log_tail=row.log_tail,
        next_attempt_at=row.next_attempt_at,
        published_at=row.published_at,
    )
