"""Fleet history in the ``StateStore``: the same suite on memory, SQLite and PostgreSQL.

A first listing records every node (Flatcar, ignored, GPU or not, pending versions); an
unchanged listing only moves ``last_seen_at``; a node that changes state starts a new
record and its old one keeps the time it was last seen so; a node that leaves is kept; a
naive time is refused. The SQL-only part counts the statements a 5,000-node listing costs,
and the last test checks the ``fleet_nodes`` migration step on its own.
"""

from __future__ import annotations

import copy
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine, event, func, select

from releasebot.domain.fleet.nodes import FLUO_NEW_VERSION, NFD_VERSION_ID, ParsedNode, parse_node
from releasebot.domain.fleet.records import FleetObservation, FleetRecord
from releasebot.domain.ports import StateStore
from releasebot.domain.shared.errors import StoreError
from releasebot.store import migrate
from releasebot.store.engine import make_engine
from releasebot.store.sql import SqlStateStore
from releasebot.store.tables import fleet_nodes
from tests.contract.conftest import Backend

T0 = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)
NODES = Path(__file__).parents[1] / "data" / "fleet" / "nodes.json"


def raw_fleet() -> list[dict[str, Any]]:
    return list(json.loads(NODES.read_text()))


def parsed(raws: list[dict[str, Any]]) -> list[ParsedNode]:
    return [parse_node(raw) for raw in raws]


def latest(store: StateStore) -> dict[str, FleetRecord]:
    return {record.name: record for record in store.fleet_nodes()}


def test_a_first_listing_records_every_node(store: StateStore) -> None:
    store.record_fleet(parsed(raw_fleet()), T0)
    records = latest(store)
    assert list(records) == sorted(records)
    assert set(records) == {
        "cpu-5", "gpu-a10g-0", "gpu-a10g-1", "gpu-broken-7", "gpu-gh200-3", "gpu-l4-2",
        "gpu-lts-6", "gpu-ubuntu-4",
    }  # fmt: skip
    assert records["gpu-a10g-1"].state == FleetObservation(
        name="gpu-a10g-1",
        version="4593.2.4",
        kernel="6.12.97-flatcar",
        arch="amd64",
        gpu=True,
        pending_version="4593.2.5",
        ignored_reason=None,
    )
    assert records["cpu-5"].state.gpu is False
    ubuntu = records["gpu-ubuntu-4"].state
    assert ubuntu.version is None
    assert ubuntu.ignored_reason == "runs 'ubuntu22.04' (NFD label), not Flatcar Container Linux"
    assert all(r.first_seen_at == r.last_seen_at == T0 for r in records.values())
    assert all(r.first_seen_at.tzinfo is UTC for r in records.values())


def test_an_unchanged_listing_only_moves_last_seen(store: StateStore) -> None:
    nodes = parsed(raw_fleet())
    store.record_fleet(nodes, T0)
    store.record_fleet(nodes, T0 + timedelta(minutes=5))
    store.record_fleet(nodes, T0 + timedelta(minutes=10))
    for record in store.fleet_nodes():
        assert (record.first_seen_at, record.last_seen_at) == (T0, T0 + timedelta(minutes=10))
        assert len(store.fleet_history(record.name)) == 1


def test_a_reboot_into_the_pending_version_starts_a_new_record(store: StateStore) -> None:
    raws = raw_fleet()
    store.record_fleet(parsed(raws), T0)
    behind = next(raw for raw in raws if raw["metadata"]["name"] == "gpu-a10g-1")
    rebooted = copy.deepcopy(behind)
    rebooted["metadata"]["labels"][NFD_VERSION_ID] = "4593.2.5"
    rebooted["metadata"]["labels"]["feature.node.kubernetes.io/kernel-version.full"] = (
        "6.12.102-flatcar"
    )
    rebooted["metadata"]["annotations"][FLUO_NEW_VERSION] = "0.0.0"
    later = T0 + timedelta(hours=2)
    store.record_fleet([parse_node(rebooted)], later)

    history = store.fleet_history("gpu-a10g-1")
    assert [(r.state.version, r.state.pending_version) for r in history] == [
        ("4593.2.4", "4593.2.5"),
        ("4593.2.5", None),
    ]
    assert (history[0].first_seen_at, history[0].last_seen_at) == (T0, T0)
    assert (history[1].first_seen_at, history[1].last_seen_at) == (later, later)
    assert latest(store)["gpu-a10g-1"].state.kernel == "6.12.102-flatcar"
    # Nodes missing from that listing are kept, last seen when they were.
    assert latest(store)["gpu-a10g-0"].last_seen_at == T0
    assert len(store.fleet_nodes()) == 8


def test_a_node_back_in_an_old_state_gets_a_new_record(store: StateStore) -> None:
    raws = raw_fleet()
    one = next(raw for raw in raws if raw["metadata"]["name"] == "gpu-a10g-0")
    changed = copy.deepcopy(one)
    changed["metadata"]["annotations"][FLUO_NEW_VERSION] = "4593.2.6"
    for minutes, raw in enumerate([one, changed, one]):
        store.record_fleet([parse_node(raw)], T0 + timedelta(minutes=minutes))
    history = store.fleet_history("gpu-a10g-0")
    assert [r.state.pending_version for r in history] == [None, "4593.2.6", None]
    assert [r.first_seen_at for r in history] == [T0 + timedelta(minutes=m) for m in range(3)]


def test_an_empty_listing_changes_nothing(store: StateStore) -> None:
    store.record_fleet(parsed(raw_fleet()), T0)
    store.record_fleet([], T0 + timedelta(minutes=1))
    assert {r.last_seen_at for r in store.fleet_nodes()} == {T0}


def test_a_name_listed_twice_counts_once(store: StateStore) -> None:
    raw = raw_fleet()[0]
    store.record_fleet([parse_node(raw), parse_node(raw)], T0)
    assert len(store.fleet_history("gpu-a10g-0")) == 1


def test_unknown_nodes_have_no_history(store: StateStore) -> None:
    assert store.fleet_history("nope") == []
    assert store.fleet_nodes() == []


def test_a_naive_time_is_refused(store: StateStore) -> None:
    with pytest.raises(StoreError, match="naive"):
        store.record_fleet(parsed(raw_fleet()[:1]), datetime(2026, 12, 1, 9, 0))  # noqa: DTZ001
    assert store.fleet_nodes() == []


def big_fleet(count: int, version: str = "4593.2.5") -> list[ParsedNode]:
    template = raw_fleet()[0]
    nodes = []
    for number in range(count):
        raw = copy.deepcopy(template)
        raw["metadata"]["name"] = f"gpu-{number:05d}"
        raw["metadata"]["labels"][NFD_VERSION_ID] = version if number % 10 else "4593.2.4"
        nodes.append(parse_node(raw))
    return nodes


def statements(engine: Engine | None, run: Any) -> list[str]:
    assert engine is not None
    sent: list[str] = []

    def record(_conn: Any, _cursor: Any, statement: str, *_args: Any) -> None:
        if "fleet_nodes" in statement:  # not PostgreSQL's advisory write lock
            sent.append(statement.lstrip().split(None, 1)[0].upper())

    event.listen(engine, "before_cursor_execute", record)
    try:
        run()
    finally:
        event.remove(engine, "before_cursor_execute", record)
    return [s for s in sent if s in ("SELECT", "INSERT", "UPDATE", "DELETE")]


def test_a_5000_node_listing_costs_a_handful_of_statements(sql_backend: Backend) -> None:
    store, nodes = sql_backend.store, big_fleet(5000)
    first = statements(sql_backend.engine, lambda: store.record_fleet(nodes, T0))
    assert first.count("SELECT") == 1
    assert first.count("UPDATE") == 0
    assert 1 <= first.count("INSERT") <= 5  # one multi-row INSERT, in driver-sized batches
    again = statements(sql_backend.engine, lambda: store.record_fleet(nodes, T0 + timedelta(1)))
    assert again == ["SELECT"] + ["UPDATE"] * 10  # 5,000 ids in chunks of 500, nothing new
    assert {r.last_seen_at for r in store.fleet_nodes()} == {T0 + timedelta(1)}
    assert sql_backend.engine is not None
    with sql_backend.engine.connect() as conn:
        assert conn.execute(select(func.count()).select_from(fleet_nodes)).scalar_one() == 5000


def test_the_fleet_migration_step_up_and_down(tmp_path: Path) -> None:
    engine = make_engine(f"sqlite:///{tmp_path / 'releasebot.db'}")
    try:
        migrate.upgrade(engine, "0003")
        migrate.upgrade(engine, "0004")
        # The store writes the schema's head (its change counters came later): step up to
        # it to write, then down across 0004 and up again.
        migrate.upgrade(engine)
        SqlStateStore(engine).record_fleet(parsed(raw_fleet()), T0)
        assert len(SqlStateStore(engine).fleet_nodes()) == 8
        migrate.downgrade(engine, "0003")
        with pytest.raises(StoreError):
            SqlStateStore(engine).fleet_nodes()
        migrate.upgrade(engine)
        assert SqlStateStore(engine).fleet_nodes() == []
    finally:
        engine.dispose()
