"""Benchmark: one reconcile cycle over 1,000 targets of which 990 already exist; then the
one-shot commands as processes on the same case.

Real parts: a docker-registry on loopback holding the 990 tags, SQLite, HTTP feeds on
loopback (synthetic: 100 stable releases x 10 drivers of one branch). The Kubernetes API is
the in-process fake (tests/support/kubeapi.py); its server threads are not counted in the CPU time,
which is the cycle thread's own (RUSAGE_THREAD). Peak RSS is the whole process's.

Prints, for a first cycle (empty store: plan 1,000, find 990 in the registry, launch 10)
and a steady cycle (nothing changed, 10 builds running): wall time, CPU time, registry
requests, Kubernetes requests, peak RSS. The registry must be asked O(pages) times, not
once per target: the run fails if a cycle makes more than 20 registry requests.

Then each one-shot command as a process of its own, as a CronJob or a person runs it,
against the same database, registry, feeds and API server (a kubeconfig): ``plan
--format json``, ``plan`` (the table), ``reconcile --once --dry-run`` and ``reconcile
--once``; CPU is the child's own (``wait4``), with ``PYTHONUNBUFFERED=1`` as the image
sets it, so every write to stdout is a system call. ``--drivers N`` scales the case to
100 x N targets (``--drivers 30``: 3,000; ``--drivers 100``: 10,000).

    uv run python benchmarks/bench_reconcile.py [--short] [--drivers N]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from releasebot.builders.kaniko import KanikoOptions  # noqa: E402
from releasebot.builders.kubernetes import KubernetesJobLauncher  # noqa: E402
from releasebot.domain.shared.versions import Arch  # noqa: E402
from releasebot.domain.targets.policy import DriverPolicy, FlatcarPolicy, Policy  # noqa: E402
from releasebot.registry import OCI_MANIFEST  # noqa: E402
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
from tests.support.registryserver import RunningRegistry, run_registry  # noqa: E402

RELEASES = 100
DRIVERS = 10
MISSING = 10
CONTEXT = "git://git.example.test/recipes.git#refs/heads/main#" + "0" * 40
MAX_REGISTRY_REQUESTS = 20


def flatcar_feed() -> bytes:
    entries = {
        f"5000.2.{n}": {
            "channel": "stable",
            "architectures": ["amd64"],
            "release_date": "2026-08-13 15:48:35 +0000",
            "major_software": {"kernel": [f"6.12.{n}"]},
            "release_notes": "synthetic",
        }
        for n in range(RELEASES)
    }
    return json.dumps(entries).encode()


def nvidia_feed(drivers: int = DRIVERS) -> bytes:
    info = [
        {
            "release_version": f"580.{200 - n}.01",
            "release_date": "",
            "release_notes": "https://docs.nvidia.com/x",
            "architectures": ["x86_64"],
            "runfile_url": {
                "x86_64": f"https://us.download.nvidia.com/tesla/580.{200 - n}.01/x.run"
            },
        }
        for n in range(drivers)
    ]
    return json.dumps({"580": {"type": "lts branch", "driver_info": info}}).encode()


def tags_that_exist(drivers: int = DRIVERS) -> list[str]:
    every = [f"580.{200 - d}.01-flatcar5000.2.{r}" for r in range(RELEASES) for d in range(drivers)]
    return every[MISSING:]


def seed_registry(registry: RunningRegistry, path: str, tags: list[str]) -> None:
    """Push one real image, then tag it 989 more times (manifest PUTs only)."""
    registry.push_image(path, tags[0], arch="amd64")
    with httpx.Client(base_url=registry.base_url, timeout=30) as client:
        manifest = client.get(f"/v2/{path}/manifests/{tags[0]}", headers={"Accept": OCI_MANIFEST})
        body = manifest.content

        def put(tag: str) -> None:
            answer = client.put(
                f"/v2/{path}/manifests/{tag}", content=body, headers={"Content-Type": OCI_MANIFEST}
            )
            answer.raise_for_status()

        with ThreadPoolExecutor(8) as pool:
            list(pool.map(put, tags[1:]))


COMMANDS = {
    "plan json": ["plan", "--format", "json"],
    "plan table": ["plan"],
    "dry-run": ["reconcile", "--once", "--dry-run"],
    "once": ["reconcile", "--once"],
}


def write_config(
    directory: Path, running: RunningRegistry, feeds: FeedServer, api: FakeKubeApi, drivers: int
) -> Path:
    """The settings of the case above, for the commands run as processes."""
    kubeconfig = api.write_kubeconfig(directory / "kubeconfig")
    config = directory / "bench.toml"
    config.write_text(
        f'[database]\nurl = "sqlite:///{directory}/bench.db"\n'
        f'[flatcar]\nfeed_url = "{feeds.url("/stable.json")}"\nchannels = ["stable"]\n'
        f"keep = {RELEASES}\n"
        f'[nvidia]\nfeed_url = "{feeds.url("/nvidia.json")}"\nbranches = ["580"]\n'
        f"keep = {drivers}\n"
        f'[registry]\nrepository = "{running.repository("bench/driver")}"\ninsecure = true\n'
        f'[kubernetes]\nnamespace = "{api.namespace}"\nkubeconfig = "{kubeconfig}"\n'
        f'[kaniko]\ncontext = "{CONTEXT}"\n'
        f"[build]\nmax_concurrent_builds = {MISSING}\n"
        "[recipe]\ncheck_inputs = false\n",
        encoding="utf-8",
    )
    return config


def run_command(argv: list[str], config: Path) -> tuple[float, float, int]:
    """One ``releasebot`` process: wall s, CPU s (its own) and bytes it wrote to stdout."""
    command = [sys.executable, "-m", "releasebot", *argv, "--quiet", "--config", str(config)]
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        started = time.perf_counter()
        process = subprocess.Popen(command, stdout=out, stderr=err, cwd=REPO, env=env)
        _, status, usage = os.wait4(process.pid, 0)
        wall = time.perf_counter() - started
        if os.waitstatus_to_exitcode(status) != 0:
            err.seek(0)
            raise SystemExit(f"releasebot {' '.join(argv)} failed: {err.read().decode()}")
        return wall, usage.ru_utime + usage.ru_stime, out.tell()


def thread_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_THREAD)
    return usage.ru_utime + usage.ru_stime


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--short", action="store_true", help="one steady cycle instead of three")
    parser.add_argument(
        "--drivers", type=int, default=DRIVERS, help=f"drivers (default {DRIVERS}): 100 x N targets"
    )
    args = parser.parse_args()
    drivers = args.drivers
    failures = []
    with (
        tempfile.TemporaryDirectory() as temporary,
        run_registry(Path(temporary) / "registry") as running,
        FeedServer() as feeds,
        FakeKubeApi(namespace="builds") as api,
        httpx.Client(timeout=10) as http,
    ):
        path = "bench/driver"
        seed_registry(running, path, tags_that_exist(drivers))
        feeds.route("/stable.json", FeedServer.static(flatcar_feed(), etag='"f"'))
        feeds.route("/nvidia.json", FeedServer.static(nvidia_feed(drivers), etag='"n"'))
        engine = make_engine(f"sqlite:///{temporary}/bench.db")
        migrate.upgrade(engine)
        store = SqlStateStore(engine)
        registry = OrasRegistry(running.repository(path), insecure=True)
        options = KanikoOptions(
            namespace="builds",
            registry_repository=running.repository(path),
            registry_secret="push",
            context=CONTEXT,
        )
        kube = api.client()
        launcher = KubernetesJobLauncher(kube, options)
        planner = PlanService(
            store=store,
            fetcher=HttpFeedFetcher(http),
            flatcar_feeds=[FeedSpec.flatcar("stable", feeds.url("/stable.json"))],
            nvidia_feed=FeedSpec.nvidia(feeds.url("/nvidia.json")),
            parse_flatcar=parse_flatcar_feed,
            parse_nvidia=parse_nvidia_feed,
            policy=Policy(
                FlatcarPolicy(("stable",), frozenset({Arch.AMD64}), keep=RELEASES),
                DriverPolicy(frozenset({"580"}), frozenset(), keep=drivers),
            ),
            clock=utc_now,
        )
        service = ReconcileService(
            planner=planner,
            store=store,
            registry=registry,
            launcher=launcher,
            clock=utc_now,
            options=ReconcileOptions(max_concurrent_builds=MISSING),
        )
        total = RELEASES * drivers
        print(f"targets: {total}, already in the registry: {total - MISSING}")
        print(
            f"{'cycle':<8} {'wall s':>7} {'cpu s':>7} {'registry req':>13} {'k8s req':>8} "
            f"{'launched':>9} {'rss MiB':>8}"
        )
        for name in ["first"] + ["steady"] * (1 if args.short else 3):
            registry_before, kube_before = registry.request_count, len(api.requests)
            wall, cpu = time.perf_counter(), thread_cpu()
            report = service.cycle()
            wall, cpu = time.perf_counter() - wall, thread_cpu() - cpu
            registry_requests = registry.request_count - registry_before
            rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
            print(
                f"{name:<8} {wall:7.3f} {cpu:7.3f} {registry_requests:13d} "
                f"{len(api.requests) - kube_before:8d} {len(report.launched()):9d} {rss:8.1f}"
            )
            if registry_requests > MAX_REGISTRY_REQUESTS:
                failures.append(f"{name} cycle made {registry_requests} registry requests")
            if report.errors:
                failures.append(f"{name} cycle errors: {report.errors}")
        published = sum(1 for t in store.targets() if t.state.value == "published")
        print(f"published: {published}, building: {len(store.builds(active_only=True))}")
        if published != total - MISSING:
            failures.append(f"{published} targets published, expected {total - MISSING}")
        config = write_config(Path(temporary), running, feeds, api, drivers)
        print(f"{'command':<11} {'wall s':>7} {'cpu s':>7} {'stdout KiB':>11}")
        for _ in range(1 if args.short else 3):
            for name, argv in COMMANDS.items():
                wall, cpu, written = run_command(argv, config)
                print(f"{name:<11} {wall:7.3f} {cpu:7.3f} {written / 1024:11.1f}")
        registry.close()
        kube.close()
        engine.dispose()
    for failure in failures:
        print(f"FAILED: {failure}")
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
