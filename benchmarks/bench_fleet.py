"""Benchmark: read a 5,000-node fleet, resolve each GPU node's image, record the history.

Real parts: lightkube over real HTTP to the in-process fake API server (tests/kubeapi.py,
Nodes shaped like tests/data/fleet/nodes.json with their ~45 labels, paginated 500 per
call), SQLite. The fake's server thread is not counted in the CPU time, which is this
thread's own (RUSAGE_THREAD); peak RSS is the whole process's, fake included.

Prints, for a first pass (empty store: every node a new history row) and a steady pass
(nothing changed: only ``last_seen_at`` moves): wall and CPU time of listing + parsing,
of the operator rules and operator values, and of recording; Nodes API calls; peak RSS.
The run fails if listing takes more than one call per 500 nodes (plus one).

    uv run python benchmarks/bench_fleet.py [--short] [--nodes N]
"""

from __future__ import annotations

import argparse
import copy
import json
import math
import resource
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from releasebot.domain.fleet import NFD_VERSION_ID  # noqa: E402
from releasebot.domain.operator import (  # noqa: E402
    OperatorView,
    parse_cluster_policy,
    resolve_images,
)
from releasebot.domain.operator_values import render_operator_values  # noqa: E402
from releasebot.fleet.kubernetes import DEFAULT_PAGE_SIZE, KubernetesFleetSource  # noqa: E402
from releasebot.store import migrate  # noqa: E402
from releasebot.store.engine import make_engine  # noqa: E402
from releasebot.store.sql import SqlStateStore  # noqa: E402
from releasebot.wiring import utc_now  # noqa: E402
from tests.support.kubeapi import FakeKubeApi  # noqa: E402

DATA = REPO / "tests" / "data" / "fleet"
REPOSITORY = "registry.example.test/gpu/driver"
T = TypeVar("T")


def synthetic_fleet(count: int) -> list[dict[str, Any]]:
    """``count`` nodes cloned from the fixture set: 90 % on 4593.2.5, 10 % one behind."""
    templates = json.loads((DATA / "nodes.json").read_text())
    nodes = []
    for number in range(count):
        node = copy.deepcopy(templates[number % len(templates)])
        node["metadata"]["name"] = f"node-{number:05d}"
        labels = node["metadata"]["labels"]
        labels["kubernetes.io/hostname"] = node["metadata"]["name"]
        if NFD_VERSION_ID in labels and number % 10 == 0:
            labels[NFD_VERSION_ID] = "4593.2.4"
        nodes.append(node)
    return nodes


def timed(step: Callable[[], T]) -> tuple[T, float, float]:
    """``step()``, its wall time and this thread's CPU time, in seconds."""

    def cpu() -> float:
        usage = resource.getrusage(resource.RUSAGE_THREAD)
        return usage.ru_utime + usage.ru_stime

    wall, started = time.perf_counter(), cpu()
    result = step()
    return result, time.perf_counter() - wall, cpu() - started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--short", action="store_true", help="one steady pass instead of three")
    parser.add_argument("--nodes", type=int, default=5000, help="fleet size (default 5,000)")
    args = parser.parse_args()
    policy = parse_cluster_policy(json.loads((DATA / "clusterpolicy.json").read_text()))
    view = OperatorView((policy,), ())
    failed = False
    with tempfile.TemporaryDirectory() as tmp, FakeKubeApi() as api:
        api.fleet.add_nodes(*synthetic_fleet(args.nodes))
        engine = make_engine(f"sqlite:///{Path(tmp) / 'releasebot.db'}")
        migrate.upgrade(engine)
        store = SqlStateStore(engine)
        source = KubernetesFleetSource(api.client(timeout=30.0))
        try:
            print(f"fleet of {args.nodes} nodes, pages of {DEFAULT_PAGE_SIZE}")
            for name in ["first"] + ["steady"] * (1 if args.short else 3):
                calls_before = len(api.requests_to("GET", "nodes"))
                listing, list_wall, list_cpu = timed(source.nodes)
                calls = len(api.requests_to("GET", "nodes")) - calls_before
                nodes = listing.nodes

                def rules(nodes: Any = nodes) -> int:
                    images = resolve_images(nodes, view, REPOSITORY)
                    render_operator_values(
                        repository=REPOSITORY, driver_version="580.95.05", nodes=nodes
                    )
                    return len(images.images)

                gpu, rules_wall, rules_cpu = timed(rules)
                _, record_wall, record_cpu = timed(
                    lambda nodes=nodes: store.record_fleet(nodes, utc_now())
                )
                rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
                print(
                    f"{name:>6}: list+parse {list_wall:5.2f} s wall {list_cpu:5.2f} s CPU, "
                    f"{calls} API calls | rules {rules_wall:5.2f} s wall {rules_cpu:5.2f} s CPU "
                    f"({gpu} GPU nodes) | "
                    f"record {record_wall:5.2f} s wall {record_cpu:5.2f} s CPU | "
                    f"peak RSS {rss:6.1f} MiB"
                )
                if calls > math.ceil(args.nodes / DEFAULT_PAGE_SIZE) + 1:
                    print(f"FAIL: {calls} list calls for {args.nodes} nodes", file=sys.stderr)
                    failed = True
        finally:
            source.close()
            engine.dispose()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
