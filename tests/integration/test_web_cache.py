"""The page's answers built once per change and shared, over real HTTP, on the memory
store, SQLite and PostgreSQL: a 304, or the kept bytes for a new client, costs one read
of the store's change counters and nothing else; a write through the store is the next
answer; ``/api/feeds`` never reads targets, ``/api/fleet`` reads none without GPU nodes
and, with them, only once per change of the targets; a fleet listing that only moved the
nodes' ``last_seen_at`` (every steady cycle's) does not rebuild the matrix; more clients
asking at once after a change than the server has turns get one build between them, and
none is told "busy"; an edit behind releasebot's
back (raw SQL, no counter moved) shows after ``recheck_after``, not before."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterator
from dataclasses import replace
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import Engine, text

from releasebot.domain.fleet.nodes import parse_node
from releasebot.domain.ports import StateStore
from releasebot.domain.targets.models import TargetState
from releasebot.edge.redact import Redactor
from releasebot.service.overview import OverviewOptions, OverviewService
from releasebot.store import migrate
from releasebot.store.engine import make_engine
from releasebot.store.memory import MemoryStateStore
from releasebot.store.sql import SqlStateStore
from releasebot.store.tables import metadata
from releasebot.web.overview import OverviewApp
from releasebot.web.server import HttpServer
from releasebot.wiring import utc_now
from tests.support.fleetnodes import gpu_node, ubuntu_gpu_node
from tests.support.overview import COVERED_TAGS, FAILED_TAG, seed_overview, set_state
from tests.support.postgres import fresh_postgres_database

API = ("/api/targets", "/api/targets?state=failed", "/api/fleet", "/api/feeds")
DETAIL = f"/api/targets/{FAILED_TAG}"
RECHECK = 300.0


class CountingStore:
    """A real store whose reads are counted by method name (the port, not a mock)."""

    def __init__(self, store: StateStore) -> None:
        self.store = store
        self.calls: Counter[str] = Counter()
        self._lock = threading.Lock()

    def __getattr__(self, name: str) -> Any:
        method = getattr(self.store, name)

        def counted(*args: Any, **kwargs: Any) -> Any:
            with self._lock:
                self.calls[name] += 1
            return method(*args, **kwargs)

        return counted

    def reset(self) -> Counter[str]:
        with self._lock:
            calls, self.calls = self.calls, Counter()
        return calls


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture(scope="module")
def postgres_engine() -> Iterator[Engine]:
    with fresh_postgres_database() as url:
        engine = make_engine(url)
        try:
            migrate.upgrade(engine)
            yield engine
        finally:
            engine.dispose()


@pytest.fixture(params=["memory", "sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[StateStore, Any]]:
    """A seeded store, and its engine (``None`` for memory) for edits behind its back."""
    if request.param == "memory":
        store: StateStore = MemoryStateStore()
        seed_overview(store, utc_now())
        yield store, None
        return
    if request.param == "sqlite":
        engine = make_engine(f"sqlite:///{tmp_path / 'releasebot.db'}")
        migrate.upgrade(engine)
    else:
        engine = request.getfixturevalue("postgres_engine")
        with engine.begin() as conn:
            conn.exec_driver_sql(f"TRUNCATE {', '.join(t.name for t in metadata.sorted_tables)}")
    try:
        store = SqlStateStore(engine)
        seed_overview(store, utc_now())
        yield store, engine
    finally:
        if request.param == "sqlite":
            engine.dispose()


class Served:
    def __init__(self, store: StateStore, **server: Any) -> None:
        self.counting = CountingStore(store)
        self.clock = Clock()
        counted: Any = self.counting
        service = OverviewService(
            counted,
            OverviewOptions("registry.example.test/driver"),
            recheck_after=RECHECK,
            monotonic=self.clock,
        )
        self.app = OverviewApp(service, Redactor(()), recheck_after=RECHECK, monotonic=self.clock)
        self.server = HttpServer("127.0.0.1", 0, pages=self.app, **server).start()
        self.client = httpx.Client(base_url=f"http://127.0.0.1:{self.server.port}", timeout=30)

    def get(self, path: str, etag: str | None = None) -> httpx.Response:
        return self.client.get(path, headers={"If-None-Match": etag} if etag else {})

    def close(self) -> None:
        self.client.close()
        self.server.close()


@pytest.fixture
def served(backend: tuple[StateStore, Any]) -> Iterator[Served]:
    served = Served(backend[0])
    try:
        yield served
    finally:
        served.close()


def test_a_304_and_a_new_clients_200_cost_one_read_of_the_counters(served: Served) -> None:
    etags = {}
    for path in (*API, DETAIL):
        first = served.get(path)
        assert first.status_code == 200, path
        etags[path] = first.headers["ETag"]
    served.counting.reset()
    for path in (*API, DETAIL):
        again = served.get(path, etags[path])
        assert (again.status_code, again.content) == (304, b""), path
        assert again.headers["ETag"] == etags[path]
        fresh = served.get(path)  # another tab: the same bytes, not built again
        assert (fresh.status_code, fresh.headers["ETag"]) == (200, etags[path])
    assert served.counting.reset() == Counter({"revisions": 2 * len((*API, DETAIL))})


def test_a_write_through_the_store_is_the_next_answer(
    served: Served, backend: tuple[StateStore, Any]
) -> None:
    store = backend[0]
    etag = served.get("/api/targets").headers["ETag"]
    fleet = served.get("/api/fleet").json()
    assert fleet["banner"]["covered"] is True
    set_state(store, COVERED_TAGS[0], TargetState.MISSING)
    changed = served.get("/api/targets", etag)
    assert changed.status_code == 200
    assert changed.headers["ETag"] != etag
    assert served.get("/api/fleet").json()["banner"]["covered"] is False
    store.record_feed_failure("nvidia", "https://example.test/nvidia.json", "new", utc_now())
    assert served.get("/api/feeds").json()["feeds"][-1]["last_error"] == "new"


def test_feeds_never_read_targets_and_the_fleet_reads_them_once_per_change(
    served: Served, backend: tuple[StateStore, Any]
) -> None:
    store = backend[0]
    served.get("/api/feeds")  # nothing kept yet: quick, then built
    assert served.counting.reset() == Counter({"revisions": 2, "feed_states": 1})
    served.get("/api/fleet")
    assert served.counting.reset()["targets"] == 1  # GPU nodes on 4593.2.5: their targets
    # a steady cycle lists the same nodes again: only their last_seen_at moves
    nodes = [gpu_node("gpu-a", "4593.2.5"), gpu_node("gpu-b", "4593.2.5"), ubuntu_gpu_node("gpu-u")]
    store.record_fleet([parse_node(node) for node in nodes], utc_now() + timedelta(minutes=5))
    again = served.get("/api/fleet")
    assert again.json()["gpu_nodes"] == 2
    calls = served.counting.reset()
    assert calls["fleet_nodes"] == 1
    assert calls["targets"] == 0  # kept from the last read: the targets did not move


def test_without_gpu_nodes_the_fleet_reads_no_target() -> None:
    store = MemoryStateStore()
    seed_overview(store, utc_now())
    store.record_fleet([parse_node(ubuntu_gpu_node("gpu-u"))], utc_now() + timedelta(minutes=1))
    served = Served(store)
    try:
        body = served.get("/api/fleet").json()
        assert body["gpu_nodes"] == 0
        assert served.counting.reset()["targets"] == 0
    finally:
        served.close()


def test_a_steady_fleet_listing_does_not_rebuild_the_matrix(
    served: Served, backend: tuple[StateStore, Any]
) -> None:
    store = backend[0]
    etag = served.get("/api/targets").headers["ETag"]
    nodes = [gpu_node("gpu-a", "4593.2.5"), gpu_node("gpu-b", "4593.2.5"), ubuntu_gpu_node("gpu-u")]
    store.record_fleet([parse_node(node) for node in nodes], utc_now() + timedelta(minutes=5))
    served.counting.reset()
    assert served.get("/api/targets", etag).status_code == 304
    calls = served.counting.reset()
    assert calls["fleet_nodes"] == 1  # the node counts, compared
    assert calls["targets"] == 0
    assert calls["builds"] == 0
    assert served.get("/api/targets", etag).status_code == 304
    assert served.counting.reset() == Counter({"revisions": 1})  # and kept under the new counters
    # a node that moves to another version changes the counts: built again
    store.record_fleet(
        [parse_node(gpu_node("gpu-a", "4593.2.4")), parse_node(gpu_node("gpu-b", "4593.2.5"))],
        utc_now() + timedelta(minutes=10),
    )
    moved = served.get("/api/targets", etag)
    assert moved.status_code == 200
    rows = {row["flatcar_version"]: row["nodes_running"] for row in moved.json()["rows"]}
    assert rows["4593.2.4"] == 1
    assert rows["4593.2.5"] == 1


def test_clients_asking_at_once_after_a_change_get_one_build(
    backend: tuple[StateStore, Any],
) -> None:
    store = backend[0]
    served = Served(store)  # two turns, eight waiting: the server's own limits
    try:
        etag = served.get("/api/targets").headers["ETag"]
        set_state(store, COVERED_TAGS[0], TargetState.MISSING)
        served.counting.reset()
        statuses: list[int] = []
        start = threading.Barrier(30)

        def tab() -> None:
            start.wait()
            answer = httpx.get(
                f"http://127.0.0.1:{served.server.port}/api/targets",
                headers={"If-None-Match": etag},
                timeout=60,
            )
            statuses.append(answer.status_code)

        tabs = [threading.Thread(target=tab) for _ in range(30)]
        for thread in tabs:
            thread.start()
        for thread in tabs:
            thread.join(timeout=120)
        assert statuses == [200] * 30  # none "busy": they waited for the one build
        assert served.counting.reset()["targets"] == 1
    finally:
        served.close()


@pytest.mark.parametrize(
    "backend", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)], indirect=True
)
def test_an_edit_behind_releasebots_back_shows_after_the_recheck(
    served: Served, backend: tuple[StateStore, Any]
) -> None:
    engine = backend[1]
    etags = {path: served.get(path).headers["ETag"] for path in ("/api/targets", "/api/fleet")}
    with engine.begin() as conn:  # raw SQL: no counter moves
        conn.execute(
            text("UPDATE targets SET state = 'missing' WHERE tag = :tag"), {"tag": COVERED_TAGS[0]}
        )
    served.clock.now += RECHECK - 1
    for path, etag in etags.items():
        assert served.get(path, etag).status_code == 304, path  # trusted until the recheck
    served.clock.now += 1
    for path, etag in etags.items():
        assert served.get(path, etag).status_code == 200, path
    assert served.get("/api/fleet").json()["banner"]["covered"] is False


def test_an_answer_built_again_to_the_same_bytes_keeps_its_etag(served: Served) -> None:
    etag = served.get("/api/targets").headers["ETag"]
    served.clock.now += RECHECK
    served.counting.reset()
    assert served.get("/api/targets", etag).status_code == 304  # built again, same bytes
    assert served.counting.reset()["targets"] == 1


def test_memory_stays_bounded_whatever_the_clients_ask(served: Served) -> None:
    served.app.cache.max_entries = 8
    for index in range(40):  # forty different details, filters and tabs
        served.get(f"/api/targets/580.178.04-flatcar4593.{index}.1")
        served.get("/api/targets?state=" + ("failed", "missing", "published")[index % 3])
    kept, size = served.app.cache.size
    assert kept == 8
    assert 0 < size <= served.app.cache.max_bytes


def test_a_write_that_changes_nothing_keeps_the_etag(backend: tuple[StateStore, Any]) -> None:
    """A target saved with the same state (a steady cycle's no-op write) moves the counter:
    the answer is built again, to the same bytes and ETag."""
    store = backend[0]
    served = Served(store)
    try:
        etag = served.get("/api/targets").headers["ETag"]
        record = store.target(FAILED_TAG)
        assert record is not None
        store.save(targets=[replace(record)])
        assert served.get("/api/targets", etag).status_code == 304
    finally:
        served.close()
