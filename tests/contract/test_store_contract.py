"""The ``StateStore`` contract: one suite that the memory, SQLite and PostgreSQL stores pass.

Covers feed bodies (new, edited, vanished and returning releases; a version in two feeds),
unchanged and failed polls, target syncing, UTC times and the refusal of naive ones. The
SQL-only part checks what the database sees: a handful of statements for a 600-release
first poll, no write but the feed row for a repeated body, none at all for a repeated
plan, the presence bookkeeping of feed entries, and how database failures are translated
(more in ``test_store_errors.py``). Last, that the memory store does not import SQLAlchemy.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from datetime import UTC, date, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine, event, select

from releasebot.domain.ports import StateStore
from releasebot.domain.shared.errors import StoreError, StoreUnavailableError
from releasebot.domain.shared.versions import Arch, DriverVersion, FlatcarVersion
from releasebot.domain.targets.models import (
    DriverRelease,
    FlatcarRelease,
    Target,
    TargetReason,
    TargetState,
    Validators,
)
from releasebot.store.engine import make_engine
from releasebot.store.limits import ERROR_MAX_CHARS
from releasebot.store.sql import SqlStateStore
from releasebot.store.tables import flatcar_feed_entries
from tests.contract.conftest import Backend

T0 = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
URL = "https://www.flatcar.org/releases-json/releases-stable.json"
NVIDIA_URL = "https://docs.nvidia.com/datacenter/tesla/drivers/releases.json"
SEEN = Validators(etag='"v1"', last_modified="Mon, 30 Nov 2026 11:00:00 GMT", body_sha256="b1")


def flatcar(
    version: str = "4593.2.5",
    *,
    kernel: str = "6.12.102",
    channel: str = "stable",
    arches: frozenset[Arch] = frozenset({Arch.AMD64, Arch.ARM64}),
    digest: str | None = None,
) -> FlatcarRelease:
    return FlatcarRelease(
        version=FlatcarVersion.parse(version),
        channel=channel,
        arches=arches,
        kernel=kernel,
        released_at=datetime(2026, 11, 1, 9, 30, tzinfo=UTC),
        content_sha256=digest or f"{version}/{kernel}",
    )


def driver(version: str = "580.105.08", *, digest: str | None = None) -> DriverRelease:
    parsed = DriverVersion.parse(version)
    return DriverRelease(
        version=parsed,
        branch=parsed.branch,
        branch_type="production branch",
        arches=frozenset({Arch.AMD64, Arch.ARM64}),
        released_on=date(2026, 10, 2),
        runfile_urls=(
            (Arch.ARM64, f"https://us.download.nvidia.com/tesla/{version}/aarch64.run"),
            (Arch.AMD64, f"https://us.download.nvidia.com/tesla/{version}/x86_64.run"),
        ),
        content_sha256=digest or version,
    )


def plan(drv: DriverRelease, fc: FlatcarRelease) -> Target:
    return Target.of(drv, fc, fc.arches & drv.arches)


def full(releases: list[FlatcarRelease] | list[DriverRelease]) -> list[tuple[object, str]]:
    """Releases with their digest, which dataclass equality ignores."""
    return [(release, release.content_sha256) for release in releases]


def versions(releases: list[FlatcarRelease] | list[DriverRelease]) -> list[str]:
    return [release.version.text for release in releases]


# --- feed bodies -------------------------------------------------------------------------


def test_an_unknown_feed_has_no_state_and_no_releases(store: StateStore) -> None:
    assert store.feed_state("stable") is None
    assert store.feed_states() == []
    assert store.flatcar_releases("stable") == []
    assert store.driver_releases("nvidia") == []


def test_a_first_body_stores_releases_and_the_feed_state(store: StateStore) -> None:
    releases = [flatcar("4081.3.10"), flatcar("4081.3.9"), flatcar("4593.2.5")]
    store.record_flatcar_feed("stable", URL, releases, SEEN, T0)

    # Sorted as versions, not as text (text puts 4081.3.10 before 4081.3.9).
    assert versions(store.flatcar_releases("stable")) == ["4081.3.9", "4081.3.10", "4593.2.5"]
    assert full(store.flatcar_releases("stable")) == full(sorted(releases, key=lambda r: r.version))
    state = store.feed_state("stable")
    assert state is not None
    assert (state.name, state.url, state.validators) == ("stable", URL, SEEN)
    assert state.last_polled_at == state.last_success_at == state.last_changed_at == T0
    assert (state.last_error, state.last_error_at, state.consecutive_failures) == (None, None, 0)
    assert store.feed_states() == [state]


def test_times_come_back_as_aware_utc(store: StateStore) -> None:
    cet = timezone(timedelta(hours=1))
    release = replace(flatcar(), released_at=datetime(2026, 11, 1, 10, 30, tzinfo=cet))
    store.record_flatcar_feed("stable", URL, [release], SEEN, T0.astimezone(cet))

    [stored] = store.flatcar_releases("stable")
    assert stored.released_at == datetime(2026, 11, 1, 9, 30, tzinfo=UTC)
    assert stored.released_at is not None
    assert stored.released_at.tzinfo is UTC
    state = store.feed_state("stable")
    assert state is not None
    assert state.last_polled_at is not None
    assert state.last_polled_at.tzinfo is UTC
    assert state.last_polled_at == T0


def test_a_naive_time_is_refused_and_nothing_is_written(store: StateStore) -> None:
    with pytest.raises(StoreError, match="naive datetime"):
        store.record_flatcar_feed("stable", URL, [flatcar()], SEEN, datetime(2026, 11, 30))  # noqa: DTZ001
    assert store.feed_state("stable") is None
    assert store.flatcar_releases("stable") == []


def test_a_changed_body_adds_edits_and_keeps_vanished_releases(store: StateStore) -> None:
    store.record_flatcar_feed("stable", URL, [flatcar("4459.2.1"), flatcar("4593.2.5")], SEEN, T0)
    edited = flatcar("4593.2.5", kernel="6.12.103")
    later = T0 + timedelta(hours=1)
    store.record_flatcar_feed("stable", URL, [edited, flatcar("4593.2.6")], SEEN, later)

    assert full(store.flatcar_releases("stable")) == full(
        [flatcar("4459.2.1"), edited, flatcar("4593.2.6")]
    )
    state = store.feed_state("stable")
    assert state is not None
    assert state.last_changed_at == later


def test_a_release_is_rewritten_only_when_its_digest_changes(store: StateStore) -> None:
    store.record_flatcar_feed("stable", URL, [flatcar(digest="d1")], SEEN, T0)
    # Same digest: whatever else differs, the stored copy stays.
    store.record_flatcar_feed("stable", URL, [flatcar(kernel="9.9.9", digest="d1")], SEEN, T0)
    assert store.flatcar_releases("stable")[0].kernel == "6.12.102"


def test_a_vanished_release_that_returns_is_listed_once(store: StateStore) -> None:
    store.record_flatcar_feed("stable", URL, [flatcar("4459.2.1"), flatcar()], SEEN, T0)
    store.record_flatcar_feed("stable", URL, [flatcar()], SEEN, T0 + timedelta(hours=1))
    store.record_flatcar_feed("stable", URL, [flatcar("4459.2.1")], SEEN, T0 + timedelta(hours=2))
    assert versions(store.flatcar_releases("stable")) == ["4459.2.1", "4593.2.5"]


def test_a_version_listed_by_two_feeds_belongs_to_both(store: StateStore) -> None:
    shared = flatcar("4081.3.6", channel="lts")
    store.record_flatcar_feed("lts", URL, [shared, flatcar("3815.3.9", channel="lts")], SEEN, T0)
    store.record_flatcar_feed("lts-2024", URL, [shared], SEEN, T0)
    store.record_flatcar_feed("lts", URL, [flatcar("3815.3.9", channel="lts")], SEEN, T0)

    assert versions(store.flatcar_releases("lts")) == ["3815.3.9", "4081.3.6"]
    assert versions(store.flatcar_releases("lts-2024")) == ["4081.3.6"]
    assert store.flatcar_releases("stable") == []


def test_driver_bodies_keep_every_field_and_vanished_drivers(store: StateStore) -> None:
    undated = replace(driver("570.195.03"), released_on=None, runfile_urls=())
    store.record_driver_feed("nvidia", NVIDIA_URL, [driver(), undated], SEEN, T0)
    assert full(store.driver_releases("nvidia")) == full([undated, driver()])

    edited = driver(digest="new")
    store.record_driver_feed("nvidia", NVIDIA_URL, [edited, driver("590.44.01")], SEEN, T0)
    stored = store.driver_releases("nvidia")
    assert full(stored) == full([undated, edited, driver("590.44.01")])
    assert stored[1].runfile_urls == driver().runfile_urls  # order as published
    assert store.flatcar_releases("nvidia") == []


# --- unchanged and failed polls ----------------------------------------------------------


def test_an_unchanged_poll_moves_only_poll_times_and_fresh_validators(store: StateStore) -> None:
    store.record_flatcar_feed("stable", URL, [flatcar()], SEEN, T0)
    store.record_feed_failure("stable", URL, "HTTP 503", T0 + timedelta(minutes=5))
    later = T0 + timedelta(minutes=10)
    store.record_feed_unchanged("stable", URL, Validators(etag='"v2"'), later)

    state = store.feed_state("stable")
    assert state is not None
    assert state.validators == replace(SEEN, etag='"v2"')
    assert (state.last_polled_at, state.last_success_at, state.last_changed_at) == (
        later,
        later,
        T0,
    )
    assert state.consecutive_failures == 0
    assert full(store.flatcar_releases("stable")) == full([flatcar()])


def test_a_failure_counts_and_keeps_the_last_good_data(store: StateStore) -> None:
    store.record_flatcar_feed("stable", URL, [flatcar()], SEEN, T0)
    for minutes in (5, 10):
        store.record_feed_failure(
            "stable", URL, "x" * (ERROR_MAX_CHARS * 3), T0 + timedelta(minutes=minutes)
        )

    state = store.feed_state("stable")
    assert state is not None
    assert state.last_error is not None
    assert state.consecutive_failures == 2
    assert len(state.last_error) == ERROR_MAX_CHARS
    assert state.last_error_at == state.last_polled_at == T0 + timedelta(minutes=10)
    assert (state.validators, state.last_success_at, state.last_changed_at) == (SEEN, T0, T0)
    assert full(store.flatcar_releases("stable")) == full([flatcar()])

    store.record_flatcar_feed("stable", URL, [flatcar()], SEEN, T0 + timedelta(minutes=15))
    state = store.feed_state("stable")
    assert state is not None
    assert state.consecutive_failures == 0


def test_a_feed_that_never_answered_has_a_failure_state(store: StateStore) -> None:
    store.record_feed_failure("beta", URL, "connection refused\x00", T0)
    state = store.feed_state("beta")
    assert state is not None
    assert (state.url, state.validators, state.consecutive_failures) == (URL, Validators(), 1)
    assert state.last_error == "connection refused\ufffd"
    assert state.last_success_at is None
    assert [s.name for s in store.feed_states()] == ["beta"]


# --- targets -----------------------------------------------------------------------------


def test_new_targets_are_stored_in_plan_order(store: StateStore) -> None:
    planned = [plan(driver(), flatcar("4593.2.5")), plan(driver(), flatcar("4459.2.1"))]
    records = store.sync_targets(planned, T0)

    assert [r.tag for r in records] == [p.tag for p in planned]
    first = records[0]
    target = first.target
    assert (target.driver_version.text, target.driver_branch) == ("580.105.08", "580")
    assert (target.flatcar_version.text, target.flatcar_channel, target.kernel) == (
        "4593.2.5",
        "stable",
        "6.12.102",
    )
    assert target.arches == (Arch.AMD64, Arch.ARM64)
    assert (first.state, first.required) == (TargetState.UNKNOWN, True)
    assert first.first_planned_at == first.updated_at == T0
    assert store.targets() == sorted(records, key=lambda r: r.tag)


def test_targets_are_listed_by_tag_as_python_sorts_text(store: StateStore) -> None:
    # A punctuation-blind collation (en_US) would put 570.10-… first; code point order does not.
    tags = [plan(driver(v), flatcar()).tag for v in ("570.10", "570.1", "580.105.08")]
    store.sync_targets([plan(driver(v), flatcar()) for v in ("570.10", "570.1", "580.105.08")], T0)
    assert [record.tag for record in store.targets()] == sorted(tags)


def test_an_identical_plan_changes_nothing(store: StateStore) -> None:
    planned = [plan(driver(), flatcar())]
    first = store.sync_targets(planned, T0)
    again = store.sync_targets(planned, T0 + timedelta(hours=1))
    assert again == first
    assert again[0].updated_at == T0


def test_a_changed_plan_updates_but_keeps_first_planned_at(store: StateStore) -> None:
    store.sync_targets([plan(driver(), flatcar())], T0)
    later = T0 + timedelta(hours=1)
    [record] = store.sync_targets([plan(driver(), flatcar(kernel="6.12.103"))], later)

    assert (record.target.kernel, record.first_planned_at, record.updated_at) == (
        "6.12.103",
        T0,
        later,
    )
    assert store.targets() == [record]


def test_a_targets_reasons_are_kept_and_a_new_reason_is_saved(store: StateStore) -> None:
    fleet = frozenset({TargetReason.FLEET, TargetReason.PENDING_REBOOT})
    target = replace(plan(driver(), flatcar()), reasons=fleet)
    [first] = store.sync_targets([target], T0)
    assert store.targets() == [first]
    assert first.target.reasons == fleet
    channel = replace(target, reasons=frozenset({TargetReason.CHANNEL}))
    [again] = store.sync_targets([channel], T0 + timedelta(hours=1))
    assert store.targets()[0].target.reasons == again.target.reasons == channel.reasons
    hand = store.ensure_target(plan(driver(), flatcar("4459.2.1")), T0)
    assert store.target(hand.tag) == hand
    assert hand.target.reasons == frozenset()


def test_targets_that_drop_out_are_kept_as_not_required(store: StateStore) -> None:
    old, new = plan(driver(), flatcar("4459.2.1")), plan(driver(), flatcar("4593.2.5"))
    store.sync_targets([old, new], T0)
    later = T0 + timedelta(hours=1)
    assert [r.tag for r in store.sync_targets([new], later)] == [new.tag]

    assert [r.tag for r in store.targets()] == [new.tag]
    everything = {r.tag: r for r in store.targets(required_only=False)}
    assert (everything[old.tag].required, everything[old.tag].updated_at) == (False, later)
    assert everything[old.tag].first_planned_at == T0

    [back] = store.sync_targets([old], later + timedelta(hours=1))
    assert (back.required, back.first_planned_at) == (True, T0)
    assert [r.tag for r in store.targets()] == [old.tag]


def test_targets_are_listed_by_state_when_asked(store: StateStore) -> None:
    first, second = plan(driver(), flatcar("4459.2.1")), plan(driver(), flatcar("4593.2.5"))
    records = store.sync_targets([first, second], T0)
    store.save(targets=[replace(records[1], state=TargetState.BUILDING, attempts=1)])
    store.sync_targets([first], T0 + timedelta(hours=1))  # the building one drops out
    assert store.targets(state=TargetState.BUILDING) == []
    [building] = store.targets(required_only=False, state=TargetState.BUILDING)
    assert (building.tag, building.state) == (second.tag, TargetState.BUILDING)
    assert [r.tag for r in store.targets(state=TargetState.UNKNOWN)] == [first.tag]


def test_a_plan_naming_a_tag_twice_is_refused(store: StateStore) -> None:
    target = plan(driver(), flatcar())
    with pytest.raises(ValueError, match="twice"):
        store.sync_targets([target, target], T0)
    assert store.targets(required_only=False) == []


# --- what the SQL stores send to the database --------------------------------------------


@contextmanager
def writes(engine: Engine | None) -> Iterator[list[str]]:
    """The INSERT, UPDATE and DELETE statements sent while the block runs, but for the
    change counters' own (``test_store_revisions.py`` counts those)."""
    assert engine is not None
    sent: list[str] = []

    def record(_conn: Any, _cursor: Any, statement: str, *_args: Any) -> None:
        words = statement.split()
        if words[0].upper() in ("INSERT", "UPDATE", "DELETE") and "store_revisions" not in words:
            sent.append(statement)

    event.listen(engine, "before_cursor_execute", record)
    try:
        yield sent
    finally:
        event.remove(engine, "before_cursor_execute", record)


def big_poll() -> tuple[list[FlatcarRelease], list[DriverRelease]]:
    flatcars = [flatcar(f"{4000 + n // 10}.{n % 4}.{n % 10}") for n in range(600)]
    return flatcars, [driver(f"580.{n}.01") for n in range(40)]


def test_a_first_poll_of_600_releases_sends_one_statement_per_kind(sql_backend: Backend) -> None:
    flatcars, drivers = big_poll()
    with writes(sql_backend.engine) as sent:
        sql_backend.store.record_flatcar_feed("stable", URL, flatcars, SEEN, T0)
        sql_backend.store.record_driver_feed("nvidia", NVIDIA_URL, drivers, SEEN, T0)
    # Per feed: the feed row, the releases, the feed's entries.
    assert len(sent) == 6
    assert len(sql_backend.store.flatcar_releases("stable")) == 600


def test_a_repeated_body_writes_only_the_feed_row(sql_backend: Backend) -> None:
    flatcars, drivers = big_poll()
    sql_backend.store.record_flatcar_feed("stable", URL, flatcars, SEEN, T0)
    sql_backend.store.record_driver_feed("nvidia", NVIDIA_URL, drivers, SEEN, T0)
    with writes(sql_backend.engine) as sent:
        sql_backend.store.record_flatcar_feed("stable", URL, flatcars, SEEN, T0)
        sql_backend.store.record_driver_feed("nvidia", NVIDIA_URL, drivers, SEEN, T0)
    assert [s.split()[:2] for s in sent] == [["UPDATE", "feeds"]] * 2


def test_an_identical_plan_writes_nothing(sql_backend: Backend) -> None:
    planned = [plan(driver(), flatcar("4593.2.5")), plan(driver(), flatcar("4459.2.1"))]
    sql_backend.store.sync_targets(planned, T0)
    with writes(sql_backend.engine) as sent:
        sql_backend.store.sync_targets(planned, T0 + timedelta(hours=1))
    assert sent == []


def test_feed_entries_record_when_a_release_was_last_listed(sql_backend: Backend) -> None:
    store, engine = sql_backend.store, sql_backend.engine
    assert engine is not None
    store.record_flatcar_feed("stable", URL, [flatcar("4459.2.1"), flatcar()], SEEN, T0)
    store.record_feed_unchanged("stable", URL, SEEN, T0 + timedelta(hours=1))
    store.record_flatcar_feed("stable", URL, [flatcar()], SEEN, T0 + timedelta(hours=2))

    entries = flatcar_feed_entries
    query = select(entries.c.version, entries.c.present, entries.c.last_seen_at)
    with engine.connect() as conn:
        rows = {row.version: (row.present, row.last_seen_at) for row in conn.execute(query)}
    # The hour-1 poll was the last to see 4459.2.1 (its body was unchanged).
    assert rows["4459.2.1"] == (False, T0 + timedelta(hours=1))
    assert rows["4593.2.5"] == (True, T0)


def test_an_unmigrated_database_says_how_to_fix_it(tmp_path: Path) -> None:
    engine = make_engine(f"sqlite:///{tmp_path / 'empty.db'}")
    try:
        with pytest.raises(StoreError, match="not migrated; run `releasebot db upgrade`"):
            SqlStateStore(engine).feed_states()
    finally:
        engine.dispose()


def test_an_unreachable_database_is_temporary_and_hides_the_password() -> None:
    # Nothing listens on port 1 of the loopback address: the connection is refused at once.
    engine = make_engine("postgresql://releasebot:s3cret@127.0.0.1:1/releasebot")
    try:
        with pytest.raises(StoreUnavailableError) as caught:
            SqlStateStore(engine).targets()
    finally:
        engine.dispose()
    assert "127.0.0.1:1" in str(caught.value)
    assert "s3cret" not in str(caught.value)


def test_the_memory_store_does_without_sqlalchemy() -> None:
    # Dry runs use the memory store: it shares the stores' limits (store/limits.py), not
    # the SQL tables, so it never pays for importing SQLAlchemy.
    code = "import sys, releasebot.store.memory; print('sqlalchemy' in sys.modules)"
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert run.stdout.strip() == "False"
