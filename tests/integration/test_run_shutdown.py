"""``releasebot run`` stopped by SIGTERM in the middle of a cycle whose feeds never answer.

A real process (SQLite, the real registry, the fake Kubernetes API for the Lease and Jobs)
polls feeds on a black hole: a TCP server on 127.0.0.1 that accepts connections and never
says a word, so the cycle waits inside a feed request (30 s read timeout) and then in the
retries' pauses. SIGTERM arrives while it waits. The process must end the cycle itself,
not abandon it after the shutdown grace: exit code 0, the cycle guard given back (a next
process may cycle at once), the Lease released, and nothing written about the feed that
was being polled (being stopped is not the feed's failure). How long the stop takes is
``benchmarks``' and the changelog's business, not an assertion here.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import select

from releasebot.store.engine import make_engine
from releasebot.store.tables import feeds, locks
from tests.support.blackhole import BlackHole
from tests.support.kubeapi import FakeKubeApi
from tests.support.registryserver import RunningRegistry
from tests.support.runprocess import ReleasebotProcess, free_port, wait_for, write_config


@pytest.fixture
def black_hole() -> Iterator[BlackHole]:
    with BlackHole() as hole:
        yield hole


@pytest.mark.timeout(120)
def test_sigterm_mid_cycle_ends_the_cycle_and_leaves_the_store_ready(
    tmp_path: Path,
    black_hole: BlackHole,
    plain_registry: RunningRegistry,
    registry_name: str,
    kube_api: FakeKubeApi,
) -> None:
    database = tmp_path / "state.db"
    port = free_port()
    config = write_config(
        tmp_path / "releasebot.toml",
        database_url=f"sqlite:///{database}",
        flatcar_url=black_hole.url + "/releases-{channel}.json",
        nvidia_url=black_hole.url + "/nvidia.json",
        repository=plain_registry.repository(registry_name),
        kubeconfig=kube_api.write_kubeconfig(tmp_path / "kubeconfig"),
        namespace=kube_api.namespace,
        port=port,
    )
    args = ["run", "--config", str(config)]
    env = {"RELEASEBOT_RUN_IDENTITY": "replica-a"}
    with ReleasebotProcess(args, tmp_path / "run.log", port=port, env=env) as bot:
        bot.wait_serving()
        wait_for(lambda: black_hole.accepted >= 1, timeout=30, what="a feed request")
        # Generous: the point is how it stops (below), not a timing on a shared machine.
        assert bot.terminate(timeout=60) == 0
        output = bot.output()
    lines = [json.loads(line) for line in output.splitlines()]
    messages = [line["message"] for line in lines]
    assert not [m for m in messages if m.startswith("abandoning the running cycle")], output
    assert "cycle stopped: releasebot is shutting down" in messages
    assert not [line for line in lines if line.get("level") == "error"], output
    engine = make_engine(f"sqlite:///{database}")
    try:
        with engine.connect() as conn:
            assert conn.execute(select(locks)).all() == []  # the guard was given back
            rows = {row.name: row for row in conn.execute(select(feeds))}
    finally:
        engine.dispose()
    stable = rows.get("flatcar/stable")
    # Never polled to the end: no failure recorded for it (a row may exist, unharmed).
    assert stable is None or (stable.consecutive_failures, stable.last_error) == (0, None)
    lease = kube_api.leases()["releasebot-leader"]["spec"]
    assert "holderIdentity" not in lease  # released on the way out
