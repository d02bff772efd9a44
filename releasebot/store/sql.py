"""``SqlStateStore``: the ``StateStore`` port on SQLite or PostgreSQL through SQLAlchemy Core.

Each method is one transaction on one connection. Writes are planned in Python from one
SELECT per table and then sent as at most one executemany statement per kind of change
(insert, update), so the first poll of ~600 releases costs a handful of round trips, and a
repeat of what is already stored writes nothing but the feed's row.

Write transactions are serialized (SQLite: ``BEGIN IMMEDIATE``; PostgreSQL: an advisory lock,
``engine.lock_writes``), so writes planned from a read cannot race another process's.

Every SQLAlchemy error is translated at this boundary (``engine.translate_error``): callers
see ``StoreUnavailableError`` (retry later) or ``StoreError`` (tell a human), never a
SQLAlchemy exception. This module does not create or migrate the schema (``migrate.py``);
the outbox, message ref and flag statements live in ``outbox.py``.
"""

from __future__ import annotations

import functools
import json
import sys
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, Engine, Row, Table, bindparam, insert, select, update

from releasebot.domain.fleet.nodes import ParsedNode
from releasebot.domain.fleet.proof import ProofRecord
from releasebot.domain.fleet.records import FleetRecord
from releasebot.domain.fleet.retention import DeletionRecord, Listing
from releasebot.domain.shared.versions import Arch, DriverVersion, FlatcarVersion
from releasebot.domain.targets.bases import BaseRecord
from releasebot.domain.targets.builds import BuildRecord, BuildState, FailureReason
from releasebot.domain.targets.diff import diff_targets, requested_target
from releasebot.domain.targets.events import Event, MessageRef, StoredEvent
from releasebot.domain.targets.models import (
    DriverRelease,
    FeedState,
    FlatcarRelease,
    Target,
    TargetReason,
    TargetRecord,
    TargetState,
    Validators,
    reasons_text,
)
from releasebot.store import bases as base_rows
from releasebot.store import fleet, outbox, retention, revisions
from releasebot.store import proofs as proof_rows
from releasebot.store.decode import row_mapper
from releasebot.store.engine import transaction
from releasebot.store.limits import fit_error, fit_log, kept_validators
from releasebot.store.tables import (
    builds,
    driver_feed_entries,
    driver_releases,
    feeds,
    flatcar_feed_entries,
    flatcar_releases,
    join_arches,
    split_arches,
    targets,
)
from releasebot.store.targetcache import TargetCache

Values = dict[str, Any]
BuildKey = tuple[str, str, int]


class SqlStateStore:
    """The state store in a relational database; build the engine with ``make_engine``.

    ``keep_events=False``: events are not written to the outbox (no notifier is configured,
    so nobody would ever deliver them; they would only pile up and alarm)."""

    def __init__(self, engine: Engine, *, keep_events: bool = True) -> None:
        self._engine = engine
        self._keep_events = keep_events
        self._targets = TargetCache(_target_record)
        """Decoded target rows kept while the table's change counter stays put
        (``targetcache.py``): one store per process, shared by its readers."""
        revisions.install(engine)

    def feed_state(self, feed: str) -> FeedState | None:
        with self._transaction() as conn:
            row = conn.execute(select(feeds).where(feeds.c.name == feed)).one_or_none()
        return None if row is None else _feed_state(row)

    def feed_states(self) -> list[FeedState]:
        with self._transaction() as conn:
            rows = conn.execute(select(feeds)).all()
        # Sorted here, not by ORDER BY: PostgreSQL's collation may ignore punctuation.
        return sorted((_feed_state(row) for row in rows), key=lambda state: state.name)

    def record_flatcar_feed(
        self,
        feed: str,
        url: str,
        releases: Sequence[FlatcarRelease],
        validators: Validators,
        now: datetime,
    ) -> None:
        rows = {release.version.text: _flatcar_values(release) for release in releases}
        with self._transaction(write=True) as conn:
            _record_body(
                conn, feed, url, validators, now, rows, flatcar_releases, flatcar_feed_entries
            )

    def record_driver_feed(
        self,
        feed: str,
        url: str,
        drivers: Sequence[DriverRelease],
        validators: Validators,
        now: datetime,
    ) -> None:
        rows = {driver.version.text: _driver_values(driver) for driver in drivers}
        with self._transaction(write=True) as conn:
            _record_body(
                conn, feed, url, validators, now, rows, driver_releases, driver_feed_entries
            )

    def record_feed_unchanged(
        self, feed: str, url: str, validators: Validators, now: datetime
    ) -> None:
        with self._transaction(write=True) as conn:
            old = _feed_row(conn, feed)
            kept = kept_validators(Validators() if old is None else _validators(old), validators)
            _save_feed(
                conn,
                feed,
                url,
                exists=old is not None,
                etag=kept.etag,
                last_modified=kept.last_modified,
                body_sha256=kept.body_sha256,
                last_polled_at=now,
                last_success_at=now,
                consecutive_failures=0,
            )

    def record_feed_failure(self, feed: str, url: str, error: str, now: datetime) -> None:
        with self._transaction(write=True) as conn:
            old = _feed_row(conn, feed)
            _save_feed(
                conn,
                feed,
                url,
                exists=old is not None,
                last_polled_at=now,
                last_error=fit_error(error),
                last_error_at=now,
                consecutive_failures=1 if old is None else old.consecutive_failures + 1,
            )

    def flatcar_releases(self, feed: str) -> list[FlatcarRelease]:
        with self._transaction() as conn:
            rows = _listed(conn, flatcar_releases, flatcar_feed_entries, feed)
        return sorted((_flatcar_release(row) for row in rows), key=lambda r: r.version)

    def driver_releases(self, feed: str) -> list[DriverRelease]:
        with self._transaction() as conn:
            rows = _listed(conn, driver_releases, driver_feed_entries, feed)
        return sorted((_driver_release(row) for row in rows), key=lambda r: r.version)

    def sync_targets(self, planned: Sequence[Target], now: datetime) -> list[TargetRecord]:
        tags = {target.tag for target in planned}
        with self._transaction(write=True) as conn:
            # What diff_targets needs: the required targets, and any planned one stored.
            every = self._targets.read(conn)
            stored = {record.tag: record for record in every.required}
            stored.update((tag, every.by_tag[tag]) for tag in tags if tag in every.by_tag)
            diff = diff_targets(stored, planned, now)
            _insert(conn, targets, [_target_values(record) for record in diff.inserts])
            _update(conn, targets, ("tag",), [_target_values(record) for record in diff.updates])
        return list(diff.result)

    def targets(
        self, *, required_only: bool = True, state: TargetState | None = None
    ) -> list[TargetRecord]:
        with self._transaction() as conn:
            every = self._targets.read(conn)
        return every.select(required_only=required_only, state=state)

    def target(self, tag: str) -> TargetRecord | None:
        with self._transaction() as conn:
            row = conn.execute(select(targets).where(targets.c.tag == tag)).one_or_none()
        return None if row is None else _target_record(row)

    def ensure_target(self, target: Target, now: datetime) -> TargetRecord:
        record = requested_target(target, now)
        with self._transaction(write=True) as conn:
            row = conn.execute(select(targets).where(targets.c.tag == record.tag)).one_or_none()
            if row is not None:
                return _target_record(row)
            _insert(conn, targets, [_target_values(record)])
        return record

    def builds(self, *, tag: str | None = None, active_only: bool = False) -> list[BuildRecord]:
        query = select(builds)
        if tag is not None:
            query = query.where(builds.c.tag == tag)
        if active_only:
            active = [state.value for state in BuildState if state.active]
            query = query.where(builds.c.state.in_(active))
        with self._transaction() as conn:
            records = [_build_record(row) for row in conn.execute(query)]
        return sorted(records, key=lambda build: build.order)

    def save(
        self,
        *,
        targets: Sequence[TargetRecord] = (),
        builds: Sequence[BuildRecord] = (),
        events: Sequence[Event] = (),
    ) -> None:
        if not targets and not builds and not events:
            return
        with self._transaction(write=True) as conn:
            _update(conn, _targets_table, ("tag",), [_target_status(t) for t in targets])
            keys = [(b.tag, b.arch.value, b.attempt) for b in builds]
            existing = _existing_builds(conn, keys)
            rows = [_build_values(b) for b in builds]
            _insert(
                conn,
                _builds_table,
                [r for r, k in zip(rows, keys, strict=True) if k not in existing],
            )
            _update(
                conn,
                _builds_table,
                ("tag", "arch", "attempt"),
                [r for r, k in zip(rows, keys, strict=True) if k in existing],
            )
            outbox.insert_events(conn, events if self._keep_events else ())

    # -- the outbox, message refs and flags (statements in outbox.py) ------------------

    def pending_events(self, now: datetime, limit: int = 50) -> list[StoredEvent]:
        with self._transaction() as conn:
            return outbox.pending_events(conn, now, limit)

    def outbox_events(self, message_key: str) -> list[StoredEvent]:
        with self._transaction() as conn:
            return outbox.outbox_events(conn, message_key)

    def outbox_backlog(self) -> int:
        with self._transaction() as conn:
            return outbox.outbox_backlog(conn)

    def mark_delivered(self, event_id: int, now: datetime, ref: MessageRef | None = None) -> None:
        with self._transaction(write=True) as conn:
            outbox.mark_delivered(conn, event_id, now, ref)

    def mark_undelivered(
        self, event_id: int, error: str, next_attempt_at: datetime, now: datetime
    ) -> None:
        with self._transaction(write=True) as conn:
            outbox.mark_undelivered(conn, event_id, error, next_attempt_at)

    def message_ref(self, message_key: str) -> MessageRef | None:
        with self._transaction() as conn:
            return outbox.message_ref(conn, message_key)

    def flag(self, name: str) -> str | None:
        with self._transaction() as conn:
            return outbox.flag(conn, name)

    def set_flag(
        self, name: str, value: str | None, now: datetime, events: Sequence[Event] = ()
    ) -> None:
        with self._transaction(write=True) as conn:
            outbox.set_flag(conn, name, value, now)
            outbox.insert_events(conn, events if self._keep_events else ())

    # -- fleet history (statements in fleet.py) ----------------------------------------

    def record_fleet(self, nodes: Sequence[ParsedNode], now: datetime) -> None:
        with self._transaction(write=True) as conn:
            fleet.record_fleet(conn, nodes, now)

    def fleet_nodes(self) -> list[FleetRecord]:
        with self._transaction() as conn:
            return fleet.fleet_nodes_latest(conn)

    def fleet_history(self, name: str) -> list[FleetRecord]:
        with self._transaction() as conn:
            return fleet.fleet_history(conn, name)

    # -- retention (statements in retention.py) ----------------------------------------

    def flatcar_listings(self) -> list[Listing]:
        with self._transaction() as conn:
            return retention.flatcar_listings(conn)

    def record_deletion(self, deletion: DeletionRecord, events: Sequence[Event] = ()) -> None:
        with self._transaction(write=True) as conn:
            retention.record_deletion(conn, deletion)
            outbox.insert_events(conn, events if self._keep_events else ())

    def deletions(self) -> list[DeletionRecord]:
        with self._transaction() as conn:
            return retention.deletions(conn)

    def proofs(self) -> list[ProofRecord]:
        with self._transaction() as conn:
            return proof_rows.proofs(conn)

    def save_proofs(
        self,
        *,
        proofs: Sequence[ProofRecord] = (),
        removed: Sequence[str] = (),
        targets: Sequence[TargetRecord] = (),
        events: Sequence[Event] = (),
    ) -> None:
        if not proofs and not removed and not targets and not events:
            return
        with self._transaction(write=True) as conn:
            proof_rows.save_proofs(conn, proofs, removed)
            _update(conn, _targets_table, ("tag",), [_target_status(t) for t in targets])
            outbox.insert_events(conn, events if self._keep_events else ())

    def revisions(self) -> dict[str, int]:
        with self._transaction() as conn:
            return revisions.read(conn)

    def forget(self) -> None:
        self._targets.forget()

    # -- driver bases (statements in bases.py) -----------------------------------------

    def bases(self) -> list[BaseRecord]:
        with self._transaction() as conn:
            return base_rows.bases(conn)

    def save_bases(
        self,
        *,
        bases: Sequence[BaseRecord] = (),
        targets: Sequence[TargetRecord] = (),
        events: Sequence[Event] = (),
    ) -> None:
        if not bases and not targets and not events:
            return
        with self._transaction(write=True) as conn:
            base_rows.save_bases(conn, bases)
            _update(conn, _targets_table, ("tag",), [_target_status(t) for t in targets])
            outbox.insert_events(conn, events if self._keep_events else ())

    @contextmanager
    def _transaction(self, *, write: bool = False) -> Iterator[Connection]:
        """One transaction; a ``write`` one waits for every other writer first (see the
        module docstring): on PostgreSQL the advisory lock is its first statement. A write
        one moves the change counter of every table it wrote (``revisions.py``)."""
        with transaction(self._engine, write=write, serialize=write) as conn:
            if not write:
                yield conn
                return
            with revisions.tracked_writes(conn):
                yield conn


def _record_body(
    conn: Connection,
    feed: str,
    url: str,
    validators: Validators,
    now: datetime,
    rows: Mapping[str, Values],
    releases: Table,
    entries: Table,
) -> None:
    """Store one changed feed body: ``rows`` are the releases it lists, by version."""
    old = _feed_row(conn, feed)
    # Every successful poll since the last changed body saw that same body, so the last
    # success is when an entry missing from this body was last listed.
    seen_before = now if old is None or old.last_success_at is None else old.last_success_at
    _save_feed(
        conn,
        feed,
        url,
        exists=old is not None,
        url=url,
        etag=validators.etag,
        last_modified=validators.last_modified,
        body_sha256=validators.body_sha256,
        last_polled_at=now,
        last_success_at=now,
        last_changed_at=now,
        consecutive_failures=0,
    )

    known = select(releases.c.version, releases.c.content_sha256)
    digests: dict[str, str] = {
        version: digest
        for version, digest in conn.execute(known.where(releases.c.version.in_(list(rows))))
    }
    new = [v for v in rows if v not in digests]
    edited = [v for v in rows if v in digests and digests[v] != rows[v]["content_sha256"]]
    _insert(conn, releases, [{**rows[v], "first_seen_at": now, "updated_at": now} for v in new])
    _update(conn, releases, ("version",), [{**rows[v], "updated_at": now} for v in edited])

    listed = select(entries.c.version, entries.c.present).where(entries.c.feed == feed)
    present: dict[str, bool] = {version: shown for version, shown in conn.execute(listed)}
    first = {"feed": feed, "first_seen_at": now, "last_seen_at": now, "present": True}
    _insert(conn, entries, [{**first, "version": v} for v in rows if v not in present])
    # Entries still present are left alone: a repeated body writes only the feed row.
    back = [
        {"feed": feed, "version": v, "last_seen_at": now, "present": True}
        for v in rows
        if present.get(v) is False
    ]
    gone = [
        {"feed": feed, "version": v, "last_seen_at": seen_before, "present": False}
        for v, was_present in present.items()
        if was_present and v not in rows
    ]
    _update(conn, entries, ("feed", "version"), back + gone)


def _insert(conn: Connection, table: Table, rows: list[Values]) -> None:
    if rows:
        conn.execute(insert(table), rows)


def _update(conn: Connection, table: Table, keys: tuple[str, ...], rows: list[Values]) -> None:
    """Update ``rows`` found by their ``keys`` columns in one executemany statement.

    The SET clause is every other key of the first row, so all rows carry the same keys.
    """
    if not rows:
        return
    statement = update(table)
    for name in keys:
        statement = statement.where(table.c[name] == bindparam(f"key_{name}"))
    params = [
        {**{f"key_{n}": row[n] for n in keys}, **{k: v for k, v in row.items() if k not in keys}}
        for row in rows
    ]
    conn.execute(statement, params)


def _listed(conn: Connection, releases: Table, entries: Table, feed: str) -> list[Row[Any]]:
    joined = releases.join(entries, entries.c.version == releases.c.version)
    return list(conn.execute(select(releases).select_from(joined).where(entries.c.feed == feed)))


def _feed_row(conn: Connection, feed: str) -> Row[Any] | None:
    return conn.execute(select(feeds).where(feeds.c.name == feed)).one_or_none()


def _save_feed(conn: Connection, feed: str, first_url: str, *, exists: bool, **values: Any) -> None:
    """Update the feed's row with ``values``, or create it at ``first_url`` if it is new.

    Only a changed body moves ``url`` of an existing row (it passes ``url`` in ``values``):
    the row's URL says where its validators came from.
    """
    if exists:
        conn.execute(update(feeds).where(feeds.c.name == feed).values(values))
    else:
        conn.execute(insert(feeds).values({"name": feed, "url": first_url, **values}))


def _validators(row: Row[Any]) -> Validators:
    return Validators(etag=row.etag, last_modified=row.last_modified, body_sha256=row.body_sha256)


@row_mapper(feeds)
def _feed_state(row: Row[Any]) -> FeedState:
    return FeedState(
        name=row.name,
        url=row.url,
        validators=_validators(row),
        last_polled_at=row.last_polled_at,
        last_success_at=row.last_success_at,
        last_changed_at=row.last_changed_at,
        last_error=row.last_error,
        last_error_at=row.last_error_at,
        consecutive_failures=row.consecutive_failures,
    )


def _flatcar_values(release: FlatcarRelease) -> Values:
    major, minor, patch = release.version.key
    return {
        "version": release.version.text,
        "major": major,
        "minor": minor,
        "patch": patch,
        "channel": release.channel,
        "arches": join_arches(release.arches),
        "kernel": release.kernel,
        "released_at": release.released_at,
        "content_sha256": release.content_sha256,
    }


@row_mapper(flatcar_releases)
def _flatcar_release(row: Row[Any]) -> FlatcarRelease:
    return FlatcarRelease(
        version=FlatcarVersion.parse(row.version),
        channel=row.channel,
        arches=frozenset(split_arches(row.arches)),
        kernel=row.kernel,
        released_at=row.released_at,
        content_sha256=row.content_sha256,
    )


def _driver_values(driver: DriverRelease) -> Values:
    return {
        "version": driver.version.text,
        "branch": driver.branch,
        "branch_type": driver.branch_type,
        "arches": join_arches(driver.arches),
        "released_on": driver.released_on,
        # A list of [arch, url] pairs keeps the feed's order, which a JSON object would not.
        "runfile_urls": json.dumps([[arch.value, url] for arch, url in driver.runfile_urls]),
        "content_sha256": driver.content_sha256,
    }


@row_mapper(driver_releases)
def _driver_release(row: Row[Any]) -> DriverRelease:
    return DriverRelease(
        version=DriverVersion.parse(row.version),
        branch=row.branch,
        branch_type=row.branch_type,
        arches=frozenset(split_arches(row.arches)),
        released_on=row.released_on,
        runfile_urls=tuple((Arch(arch), url) for arch, url in json.loads(row.runfile_urls)),
        content_sha256=row.content_sha256,
    )


def _target_values(record: TargetRecord) -> Values:
    target = record.target
    return {
        "tag": target.tag,
        "driver_version": target.driver_version.text,
        "driver_branch": target.driver_branch,
        "flatcar_version": target.flatcar_version.text,
        "flatcar_channel": target.flatcar_channel,
        "kernel": target.kernel,
        "arches": join_arches(target.arches),
        "reasons": reasons_text(target.reasons),
        "state": record.state.value,
        "required": record.required,
        "first_planned_at": record.first_planned_at,
        "updated_at": record.updated_at,
        "digest": record.digest,
        "attempts": record.attempts,
        "next_attempt_at": record.next_attempt_at,
        "last_error": None if record.last_error is None else fit_error(record.last_error),
        "published_at": record.published_at,
        "budget_start": record.budget_start,
        "proven_at": record.proven_at,
        "proven_node": record.proven_node,
        "proven_arches": join_arches(record.proven_arches),
    }


# The few values thousands of target rows share, made once and shared (they are
# immutable): at 10,000 targets one frozenset per row and column was megabytes kept.
@functools.lru_cache(maxsize=256)
def _arches(text: str) -> tuple[Arch, ...]:
    return split_arches(text)


@functools.lru_cache(maxsize=256)
def _arch_set(text: str) -> frozenset[Arch]:
    return frozenset(split_arches(text))


@functools.lru_cache(maxsize=256)
def _reasons(text: str) -> frozenset[TargetReason]:
    return TargetReason.parse_all(text)


@row_mapper(targets)
def _target_record(row: Row[Any]) -> TargetRecord:
    target = Target(
        tag=row.tag,
        driver_version=DriverVersion.parse(row.driver_version),
        driver_branch=sys.intern(row.driver_branch),
        flatcar_version=FlatcarVersion.parse(row.flatcar_version),
        flatcar_channel=sys.intern(row.flatcar_channel),
        kernel=sys.intern(row.kernel),
        arches=_arches(row.arches),
        reasons=_reasons(row.reasons),
    )
    return TargetRecord(
        target=target,
        state=TargetState(row.state),
        required=row.required,
        first_planned_at=row.first_planned_at,
        updated_at=row.updated_at,
        digest=row.digest,
        attempts=row.attempts,
        next_attempt_at=row.next_attempt_at,
        last_error=row.last_error,
        published_at=row.published_at,
        budget_start=row.budget_start,
        proven_at=row.proven_at,
        proven_node=row.proven_node,
        proven_arches=_arch_set(row.proven_arches or ""),
    )


_targets_table = targets
_builds_table = builds


def _target_status(record: TargetRecord) -> Values:
    return {
        "tag": record.tag,
        "state": record.state.value,
        "digest": record.digest,
        "attempts": record.attempts,
        "next_attempt_at": record.next_attempt_at,
        "last_error": None if record.last_error is None else fit_error(record.last_error),
        "published_at": record.published_at,
        "updated_at": record.updated_at,
        "budget_start": record.budget_start,
        "proven_at": record.proven_at,
        "proven_node": record.proven_node,
        "proven_arches": join_arches(record.proven_arches),
    }


def _existing_builds(
    conn: Connection, keys: list[tuple[str, str, int]]
) -> set[tuple[str, str, int]]:
    if not keys:
        return set()
    query = select(builds.c.tag, builds.c.arch, builds.c.attempt).where(
        builds.c.tag.in_({tag for tag, _, _ in keys})
    )
    return {(row.tag, row.arch, row.attempt) for row in conn.execute(query)}


def _build_values(build: BuildRecord) -> Values:
    return {
        "tag": build.tag,
        "arch": build.arch.value,
        "attempt": build.attempt,
        "job_name": build.job_name,
        "destination_tag": build.destination_tag,
        "state": build.state.value,
        "digest": build.digest,
        "reason": None if build.reason is None else build.reason.value,
        "message": None if build.message is None else fit_error(build.message),
        "log_tail": fit_log(build.log_tail),
        "created_at": build.created_at,
        "finished_at": build.finished_at,
    }


@row_mapper(builds)
def _build_record(row: Row[Any]) -> BuildRecord:
    return BuildRecord(
        tag=row.tag,
        arch=Arch(row.arch),
        attempt=row.attempt,
        job_name=row.job_name,
        destination_tag=row.destination_tag,
        state=BuildState(row.state),
        created_at=row.created_at,
        digest=row.digest,
        reason=None if row.reason is None else FailureReason(row.reason),
        message=row.message,
        log_tail=row.log_tail,
        finished_at=row.finished_at,
    )
