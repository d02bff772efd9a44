"""Benchmark: a reconcile cycle that lists and plans a 5,000-node fleet, paginated.

Real parts: lightkube over real HTTP to the in-process fake API server
(tests/support/kubeapi.py; Nodes cloned from tests/data/fleet/nodes.json with their ~45
labels, listed 500 per call, plus the GPU Operator's ClusterPolicy), SQLite, the feeds as
files (tests/data: stable, lts-2024, NVIDIA), the in-memory registry and Job launcher. The
fleet: 60 % on the current stable release, 20 % one behind, 10 % a release behind ``keep``,
5 % about to reboot (FLUO's new-version, half of them at the before-reboot gate), the rest
CPU, Ubuntu and unlabelled nodes as in the fixture. The reboot gate is on, and so is the
after-reboot proof: one node is back from FLUO's reboot (FLUO reboots one at a time), with
the GPU Operator's driver and validator Pods on it in the fake API server.

Prints, for a first cycle (empty store: every target new, every node a new history row)
and steady cycles (nothing changed): wall and CPU time of the listing alone and of the
whole cycle (list, record, poll, plan, registry check, launch, coverage, proof, gate), API
calls by kind (pod lists and log reads are the proof's), targets planned (and how many for
the fleet), peak RSS. CPU is this thread's own (RUSAGE_THREAD): the fake API server's
thread is not counted; RSS is the whole process's. The run fails if listing Nodes takes
more than one call per 500 nodes (plus one), or the proof more than one pod list and one
log read for the one node it proves.

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

import httpx

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from releasebot.builders.kaniko import KanikoOptions  # noqa: E402
from releasebot.builders.memory import MemoryJobLauncher  # noqa: E402
from releasebot.domain.fleet.nodes import (  # noqa: E402
    FLUO_AFTER_REBOOT,
    FLUO_BEFORE_REBOOT,
    FLUO_NEW_VERSION,
    LIST_PAGE_SIZE,
    NFD_VERSION_ID,
)
from releasebot.domain.fleet.proof import ProofRules  # noqa: E402
from releasebot.domain.shared.versions import Arch  # noqa: E402
from releasebot.domain.targets.models import TargetReason  # noqa: E402
from releasebot.domain.targets.policy import DriverPolicy, FlatcarPolicy, Policy  # noqa: E402
from releasebot.fleet.gate import KubernetesNodeAnnotator  # noqa: E402
from releasebot.fleet.kubernetes import KubernetesFleetSource  # noqa: E402
from releasebot.fleet.pods import KubernetesPodSource  # noqa: E402
from releasebot.registry.memory import MemoryRegistry  # noqa: E402
from releasebot.service.fleet import FleetService  # noqa: E402
from releasebot.service.plan import FeedSpec, PlanService  # noqa: E402
from releasebot.service.proof import ProofService  # noqa: E402
from releasebot.service.reconcile import ReconcileOptions, ReconcileService  # noqa: E402
from releasebot.sources.fetch import HttpFeedFetcher  # noqa: E402
from releasebot.sources.flatcar import parse_flatcar_feed  # noqa: E402
from releasebot.sources.nvidia import parse_nvidia_feed  # noqa: E402
from releasebot.store import migrate  # noqa: E402
from releasebot.store.engine import make_engine  # noqa: E402
from releasebot.store.sql import SqlStateStore  # noqa: E402
from releasebot.wiring import utc_now  # noqa: E402
from tests.support.kubeapi import FakeKubeApi  # noqa: E402
from tests.support.operatorpods import digest_of, driver_pod, validator_pod  # noqa: E402

DATA = REPO / "tests" / "data"
REPOSITORY = "registry.example.test/gpu/driver"
CONTEXT = "git://git.example.test/recipes.git#refs/heads/main#" + "0" * 40
VERSIONS = ["4593.2.5"] * 12 + ["4593.2.4"] * 4 + ["4459.2.4"] * 2 + ["4593.2.4+"] * 2
"""Per 20 nodes: current, one behind, behind ``keep``, about to reboot into 4593.2.5."""
T = TypeVar("T")


def synthetic_fleet(count: int) -> list[dict[str, Any]]:
    """``count`` nodes cloned from the fixture set, on the versions of ``VERSIONS``."""
    templates = json.loads((DATA / "fleet" / "nodes.json").read_text())
    nodes = []
    for number in range(count):
        node = copy.deepcopy(templates[number % len(templates)])
        node["metadata"]["name"] = f"node-{number:05d}"
        labels, annotations = node["metadata"]["labels"], node["metadata"]["annotations"]
        labels["kubernetes.io/hostname"] = node["metadata"]["name"]
        version = VERSIONS[number % len(VERSIONS)]
        if NFD_VERSION_ID in labels and "ubuntu" not in str(labels.values()):
            labels[NFD_VERSION_ID] = version.rstrip("+")
            annotations[FLUO_NEW_VERSION] = "4593.2.5" if version.endswith("+") else "0.0.0"
            labels.pop(FLUO_BEFORE_REBOOT, None)
            if version.endswith("+") and number % 40 < 20:
                labels[FLUO_BEFORE_REBOOT] = "true"
        nodes.append(node)
    rebooted = next(
        node for node in nodes if node["metadata"]["labels"].get(NFD_VERSION_ID) == "4593.2.5"
    )
    rebooted["metadata"]["labels"][FLUO_AFTER_REBOOT] = "true"
    return nodes


def proving_pods(nodes: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The GPU Operator's Pods on the node back from its reboot: driver and validator."""
    [name] = [
        node["metadata"]["name"]
        for node in nodes
        if node["metadata"]["labels"].get(FLUO_AFTER_REBOOT) == "true"
    ]
    image = f"{REPOSITORY}:580.95.05-flatcar4593.2.5"
    return [driver_pod(name, image=image, digest=digest_of(image)), validator_pod(name)]


def thread_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_THREAD)
    return usage.ru_utime + usage.ru_stime


def timed(step: Callable[[], T]) -> tuple[T, float, float]:
    """``step()``, its wall time and this thread's CPU time, in seconds."""
    wall, cpu = time.perf_counter(), thread_cpu()
    result = step()
    return result, time.perf_counter() - wall, thread_cpu() - cpu


def service(store: SqlStateStore, api: FakeKubeApi, http: httpx.Client) -> ReconcileService:
    annotator = KubernetesNodeAnnotator(api.client(timeout=30.0))
    prover = ProofService(
        pods=KubernetesPodSource(api.client(timeout=30.0)),
        annotator=annotator,
        store=store,
        clock=utc_now,
        rules=ProofRules(),
    )
    fleet = FleetService(
        source=KubernetesFleetSource(api.client(timeout=30.0)),
        store=store,
        clock=utc_now,
        repository=REPOSITORY,
        annotator=annotator,
        prover=prover,
    )
    flatcar = DATA / "flatcar"
    planner = PlanService(
        store=store,
        fetcher=HttpFeedFetcher(http, retries=0),
        flatcar_feeds=[
            FeedSpec.flatcar(channel, (flatcar / f"releases-{channel}.json").as_uri())
            for channel in ("stable", "lts-2024")
        ],
        nvidia_feed=FeedSpec.nvidia((DATA / "nvidia" / "releases.json").as_uri()),
        parse_flatcar=parse_flatcar_feed,
        parse_nvidia=parse_nvidia_feed,
        policy=Policy(
            FlatcarPolicy(("stable", "lts-2024"), frozenset({Arch.AMD64}), keep=2),
            DriverPolicy(frozenset({"580"}), frozenset(), keep=1),
        ),
        clock=utc_now,
        fleet=fleet,
        channel_feed=lambda channel: FeedSpec.flatcar(
            channel, (flatcar / f"releases-{channel}.json").as_uri()
        ),
    )
    options = KanikoOptions(
        namespace="builds", registry_repository=REPOSITORY, registry_secret="r", context=CONTEXT
    )
    return ReconcileService(
        planner=planner,
        store=store,
        registry=MemoryRegistry(REPOSITORY),
        launcher=MemoryJobLauncher(options),
        clock=utc_now,
        options=ReconcileOptions(max_concurrent_builds=4),
    )


def calls(api: FakeKubeApi) -> dict[str, int]:
    return {
        "nodes": len(api.requests_to("GET", "nodes")),
        "operator": len(api.requests_to("GET", "clusterpolicies"))
        + len(api.requests_to("GET", "nvidiadrivers")),
        "patches": len(api.requests_to("PATCH", "nodes")),
        "pods": len(api.requests_to("GET", "pods")),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--short", action="store_true", help="one steady cycle instead of three")
    parser.add_argument("--nodes", type=int, default=5000, help="fleet size (default 5,000)")
    args = parser.parse_args()
    failed = False
    policy = json.loads((DATA / "fleet" / "clusterpolicy.json").read_text())
    policy["spec"]["driver"].update(repository="registry.example.test/gpu", version="580.95.05")
    with tempfile.TemporaryDirectory() as tmp, FakeKubeApi() as api, httpx.Client() as http:
        fleet = synthetic_fleet(args.nodes)
        api.fleet.add_nodes(*fleet)
        api.add_pods(*proving_pods(fleet))
        api.fleet.install_gpu_operator_crds([policy])
        engine = make_engine(f"sqlite:///{Path(tmp) / 'releasebot.db'}")
        migrate.upgrade(engine)
        store = SqlStateStore(engine)
        reconciler = service(store, api, http)
        lister = KubernetesFleetSource(api.client(timeout=30.0))
        print(
            f"fleet of {args.nodes} nodes, pages of {LIST_PAGE_SIZE}, reboot gate and "
            "after-reboot proof on (one node back from its reboot)"
        )
        try:
            for name in ["first"] + ["steady"] * (1 if args.short else 3):
                listing, list_wall, list_cpu = timed(lister.nodes)
                before = calls(api)
                report, wall, cpu = timed(reconciler.cycle)
                made = {kind: count - before[kind] for kind, count in calls(api).items()}
                rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
                if report.plan is None or report.fleet is None:
                    print(f"FAIL: the fleet was not judged: {report.errors}", file=sys.stderr)
                    return 1
                targets = report.plan.targets
                fleet = sum(TargetReason.CHANNEL not in r.target.reasons for r in targets)
                print(
                    f"{name:>6}: list+parse {len(listing.nodes)} nodes {list_wall:5.2f} s wall "
                    f"{list_cpu:5.2f} s CPU | cycle {wall:5.2f} s wall {cpu:5.2f} s CPU | "
                    f"API calls: {made['nodes']} Node lists, {made['operator']} operator, "
                    f"{made['patches']} patches, {made['pods']} pod lists/logs | "
                    f"{len(targets)} targets ({fleet} for the "
                    f"fleet only), {len(report.fleet.coverage.nodes)} GPU nodes judged | "
                    f"peak RSS {rss:6.1f} MiB"
                )
                if made["pods"] > 2:
                    print(f"FAIL: {made['pods']} pod calls for one node", file=sys.stderr)
                    failed = True
                if made["nodes"] > math.ceil(args.nodes / LIST_PAGE_SIZE) + 1:
                    print(
                        f"FAIL: {made['nodes']} list calls for {args.nodes} nodes", file=sys.stderr
                    )
                    failed = True
        finally:
            lister.close()
            engine.dispose()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
