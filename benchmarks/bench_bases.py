"""Benchmark: what driver bases add to a reconcile cycle over 1,000 targets.

The same setting as ``bench_reconcile.py`` (100 stable releases x 10 drivers of one branch,
990 tags already in a real docker-registry on loopback, SQLite, feeds over loopback HTTP,
the in-process fake Kubernetes API), run twice: bases off (one image per target), and bases
on with the 10 drivers' bases already in the registry (labelled as ``Dockerfile.base``
labels them, so the first cycle adopts them: a digest and a labels request each), the 10
missing targets launched FROM them.

Prints per cycle: wall time, CPU time of the cycle thread, registry requests, Kubernetes
requests, Jobs launched. Fails when a steady cycle with bases makes more registry requests
than without (bases must stay O(pages): their state is in the store), or when a missing
target's Job lacks ``DRIVER_BASE``.

    uv run python benchmarks/bench_bases.py [--short]
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from releasebot.builders.kaniko import KanikoOptions  # noqa: E402
from releasebot.builders.kubernetes import KubernetesJobLauncher  # noqa: E402
from releasebot.domain.shared.versions import Arch, DriverVersion  # noqa: E402
from releasebot.domain.targets.base_tags import BASE_LABEL, BaseSpec  # noqa: E402
from releasebot.domain.targets.bases import BaseRules  # noqa: E402
from releasebot.domain.targets.builds import RECIPE_LABEL  # noqa: E402
from releasebot.domain.targets.policy import DriverPolicy, FlatcarPolicy, Policy  # noqa: E402
from releasebot.registry.oras import OrasRegistry  # noqa: E402
from releasebot.service.plan import FeedSpec, PlanService  # noqa: E402
from releasebot.service.reconcile import ReconcileOptions, ReconcileService  # noqa: E402
from releasebot.sources.fetch import HttpFeedFetcher  # noqa: E402
from releasebot.sources.flatcar import parse_flatcar_feed  # noqa: E402
from releasebot.sources.nvidia import parse_nvidia_feed  # noqa: E402
from releasebot.store import migrate  # noqa: E402
from releasebot.store.engine import make_engine  # noqa: E402
from releasebot.store.sql import SqlStateStore  # noqa: E402
from releasebot.wiring import utc_now  # noqa: E402
from tests.support.feedserver import FeedServer  # noqa: E402
from tests.support.kubeapi import FakeKubeApi  # noqa: E402
from tests.support.registryserver import run_registry  # noqa: E402


def _reconcile_bench() -> Any:
    """``bench_reconcile.py``'s feeds and registry seeding: the same 1,000 targets."""
    spec = importlib.util.spec_from_file_location(
        "bench_reconcile", REPO / "benchmarks" / "bench_reconcile.py"
    )
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


BENCH = _reconcile_bench()
RULES = BaseRules(revision="0123456789ab", build_args=(("RECIPE_REVISION", "0123456789ab"),))


def run(bases: bool, cycles: int) -> list[tuple[str, float, float, int, int, int]]:
    rows = []
    with (
        tempfile.TemporaryDirectory() as temporary,
        run_registry(Path(temporary) / "registry") as running,
        FeedServer() as feeds,
        FakeKubeApi(namespace="builds") as api,
        httpx.Client(timeout=10) as http,
    ):
        path = "bench/driver"
        BENCH.seed_registry(running, path, BENCH.tags_that_exist())
        if bases:
            for d in range(BENCH.DRIVERS):
                spec = BaseSpec(
                    DriverVersion.parse(f"580.{200 - d}.01"), "580", Arch.AMD64, RULES.revision
                )
                labels = {BASE_LABEL: spec.label, RECIPE_LABEL: spec.revision}
                running.push_image(path, spec.tag, arch="amd64", labels=labels)
        feeds.route("/stable.json", FeedServer.static(BENCH.flatcar_feed(), etag='"f"'))
        feeds.route("/nvidia.json", FeedServer.static(BENCH.nvidia_feed(), etag='"n"'))
        engine = make_engine(f"sqlite:///{temporary}/bench.db")
        migrate.upgrade(engine)
        store = SqlStateStore(engine)
        registry = OrasRegistry(running.repository(path), insecure=True)
        options = KanikoOptions(
            namespace="builds",
            registry_repository=running.repository(path),
            registry_secret="push",
            context=BENCH.CONTEXT,
        )
        kube = api.client()
        service = ReconcileService(
            planner=PlanService(
                store=store,
                fetcher=HttpFeedFetcher(http),
                flatcar_feeds=[FeedSpec.flatcar("stable", feeds.url("/stable.json"))],
                nvidia_feed=FeedSpec.nvidia(feeds.url("/nvidia.json")),
                parse_flatcar=parse_flatcar_feed,
                parse_nvidia=parse_nvidia_feed,
                policy=Policy(
                    FlatcarPolicy(("stable",), frozenset({Arch.AMD64}), keep=BENCH.RELEASES),
                    DriverPolicy(frozenset({"580"}), frozenset(), keep=BENCH.DRIVERS),
                ),
                clock=utc_now,
            ),
            store=store,
            registry=registry,
            launcher=KubernetesJobLauncher(kube, options),
            clock=utc_now,
            options=ReconcileOptions(max_concurrent_builds=BENCH.MISSING),
            base_rules=RULES if bases else None,
        )
        for name in ["first"] + ["steady"] * cycles:
            registry_before, kube_before = registry.request_count, len(api.requests)
            wall, cpu = time.perf_counter(), BENCH.thread_cpu()
            report = service.cycle()
            wall, cpu = time.perf_counter() - wall, BENCH.thread_cpu() - cpu
            if report.errors:
                raise SystemExit(f"FAILED: {name} cycle errors: {report.errors}")
            rows.append(
                (
                    name,
                    wall,
                    cpu,
                    registry.request_count - registry_before,
                    len(api.requests) - kube_before,
                    len(report.launched()),
                )
            )
        if bases:
            jobs = api.jobs()
            without = [
                job["metadata"]["name"]
                for job in jobs
                if not any(
                    arg.startswith("--build-arg=DRIVER_BASE=")
                    for arg in job["spec"]["template"]["spec"]["containers"][0]["args"]
                )
            ]
            if len(jobs) != BENCH.MISSING or without:
                raise SystemExit(f"FAILED: {len(jobs)} Jobs, without DRIVER_BASE: {without}")
        registry.close()
        kube.close()
        engine.dispose()
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--short", action="store_true", help="one steady cycle instead of three")
    args = parser.parse_args()
    cycles = 1 if args.short else 3
    results = {bases: run(bases, cycles) for bases in (False, True)}
    print(f"targets: {BENCH.RELEASES * BENCH.DRIVERS}, missing: {BENCH.MISSING}")
    print(
        f"{'bases':<6} {'cycle':<7} {'wall s':>7} {'cpu s':>7} {'registry req':>13} "
        f"{'k8s req':>8} {'launched':>9}"
    )
    for bases, rows in results.items():
        for name, wall, cpu, reg, k8s, launched in rows:
            print(
                f"{'on' if bases else 'off':<6} {name:<7} {wall:7.3f} {cpu:7.3f} {reg:13d} "
                f"{k8s:8d} {launched:9d}"
            )
    steady_off = max(row[3] for row in results[False][1:])
    steady_on = max(row[3] for row in results[True][1:])
    if steady_on > steady_off:
        print(
            f"FAILED: registry requests in a steady cycle: {steady_on} with bases, {steady_off} off"
        )
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
