"""Benchmark: ``releasebot run`` as a real process over the REAL feeds, cycle by cycle.

Real parts: the process itself (``python -m releasebot run``), the upstream feeds copied in
``../shared/data`` (stable, beta, alpha, lts and NVIDIA's list) served on loopback with
ETags, a docker-registry on loopback, SQLite, and the fake Kubernetes API (Leases
included). The benchmark plays Kaniko for every Job the first cycle launches, waits until
everything is published, then measures unchanged cycles.

Cycle boundaries come from the process's own ``releasebot_last_cycle_timestamp_seconds``
(scraped every 50 ms); CPU is ``utime + stime`` of the process from ``/proc/<pid>/stat``.
A cycle's CPU is the process's CPU from the last scrape before the cycle started to the
first one after it ended, minus the idle rate over that window (the scrapes and the lease
job cost a little CPU too; both numbers are printed). Idle CPU is measured between cycles.
Peak RSS is ``VmHWM``.

Targets printed against: < 150 MB peak RSS, < 0.5 s CPU for an unchanged cycle,
``releasebot --help`` < 0.5 s wall (best of 5). Exits non-zero only for functional
failures (the process dies, cycles fail, builds do not publish), never for timing.

    uv run python benchmarks/bench_run.py [--short]
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.support.builds import KanikoPlayer  # noqa: E402
from tests.support.feedserver import FeedServer  # noqa: E402
from tests.support.kubeapi import FakeKubeApi  # noqa: E402
from tests.support.registryserver import run_registry  # noqa: E402
from tests.support.runprocess import (  # noqa: E402
    ReleasebotProcess,
    cpu_seconds,
    free_port,
    peak_rss_mib,
    wait_for,
    write_config,
)

SHARED = REPO.parent / "shared" / "data"
FEEDS = {
    "/releases-stable.json": SHARED / "flatcar/releases-stable.2026-08-13.json",
    "/releases-beta.json": SHARED / "flatcar/releases-beta.json",
    "/releases-alpha.json": SHARED / "flatcar/releases-alpha.json",
    "/releases-lts.json": SHARED / "flatcar/releases-lts.json",
    "/nvidia.json": SHARED / "nvidia/datacenter-releases.fixture.json",
}
RSS_TARGET_MIB = 150
CYCLE_CPU_TARGET = 0.5
HELP_TARGET = 0.5
SCRAPE_EVERY = 0.05


def help_wall_time() -> float:
    """Best of 5 wall times of ``releasebot --help`` (the installed console script)."""
    command = shutil.which("releasebot") or str(Path(sys.executable).parent / "releasebot")
    best = float("inf")
    for _ in range(5):
        started = time.perf_counter()
        subprocess.run([command, "--help"], check=True, capture_output=True)
        best = min(best, time.perf_counter() - started)
    return best


class Watcher:
    """Scrapes the process and cuts its life into cycles and idle stretches."""

    def __init__(self, bot: ReleasebotProcess) -> None:
        self.bot = bot
        self.samples: list[tuple[float, float, float, float]] = []
        """(wall time, process CPU, last cycle timestamp, cycle duration sum)."""

    def scrape(self) -> tuple[float, float, float, float]:
        if self.bot.process.poll() is not None:
            raise RuntimeError(f"releasebot exited:\n{self.bot.output()[-2000:]}")
        metrics = self.bot.metrics()
        sample = (
            time.time(),
            cpu_seconds(self.bot.pid),
            metrics.get(("releasebot_last_cycle_timestamp_seconds", ()), 0.0),
            metrics.get(("releasebot_cycle_duration_seconds_sum", ()), 0.0),
        )
        self.samples.append(sample)
        return sample

    def next_cycle(self, timeout: float) -> tuple[float, float, float]:
        """Wait for the next cycle to complete: (its wall seconds, raw CPU, window seconds).

        The next one from now: an older sample may already be behind a completed cycle."""
        first = self.scrape()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            time.sleep(SCRAPE_EVERY)
            now = self.scrape()
            if now[2] != first[2]:
                duration = now[3] - first[3]
                started = now[2] - duration
                before = max(
                    (s for s in self.samples if s[0] <= started), key=lambda s: s[0], default=first
                )
                return duration, now[1] - before[1], now[0] - before[0]
        raise RuntimeError(f"no cycle completed within {timeout} s")

    def idle_rate(self, seconds: float) -> float | None:
        """CPU seconds per second while no cycle runs (measured right after a cycle);
        ``None`` when a cycle completed meanwhile (a loaded machine starts them late)."""
        start = self.scrape()
        time.sleep(seconds)
        end = self.scrape()
        if end[2] != start[2]:
            return None
        return (end[1] - start[1]) / (end[0] - start[0])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--short", action="store_true", help="two unchanged cycles, for CI")
    args = parser.parse_args()
    missing = [str(path) for path in FEEDS.values() if not path.is_file()]
    if missing:
        print(f"FAILED: the real feeds are missing: {missing}")
        return 1
    interval = 3 if args.short else 10
    steady_cycles = 2 if args.short else 5
    failures: list[str] = []
    with (
        tempfile.TemporaryDirectory(prefix="bench-run-") as temporary,
        run_registry(Path(temporary) / "registry") as registry,
        FeedServer() as feeds,
        FakeKubeApi(namespace="builds") as api,
    ):
        directory = Path(temporary)
        for path, source in FEEDS.items():
            feeds.route(path, FeedServer.static(source.read_bytes(), etag=f'"{path}"'))
        port = free_port()
        config = write_config(
            directory / "releasebot.toml",
            database_url=f"sqlite:///{directory / 'state.db'}",
            flatcar_url=feeds.url("/releases-{channel}.json"),
            nvidia_url=feeds.url("/nvidia.json"),
            repository=registry.repository("bench/driver"),
            kubeconfig=api.write_kubeconfig(directory / "kubeconfig"),
            namespace=api.namespace,
            port=port,
            interval=interval,
            lease_seconds=30,
            channels=("stable", "beta", "alpha", "lts"),
            keep=2,
            branches=("580", "595"),
        )
        config.write_text(config.read_text() + "[build]\nmax_concurrent_builds = 50\n")
        env = {"RELEASEBOT_RUN_IDENTITY": "bench"}
        args_run = ["run", "--config", str(config)]
        with ReleasebotProcess(args_run, directory / "run.log", port=port, env=env) as bot:
            spawned = time.monotonic()
            bot.wait_serving()
            serving = time.monotonic() - spawned
            watcher = Watcher(bot)
            first = wait_for(
                lambda: (s := watcher.scrape())[2] > 0 and s, timeout=60, what="the first cycle"
            )
            print(f"start to /healthz 200: {serving:.2f} s wall")
            print(
                f"first cycle (every feed new, plan, launch): {first[3]:.3f} s wall; "
                f"process CPU from start to its end: {first[1]:.3f} s"
            )
            player = KanikoPlayer(api, registry)
            jobs = wait_for(player.job_names, timeout=30, what="Jobs")
            player.build_all()
            print(f"targets launched by the first cycle: {len(jobs)}; Kaniko played for all")
            wait_for(
                lambda: bot.metric("releasebot_required_tags_unpublished") == 0,
                timeout=interval * 6,
                what="every target published",
            )
            window = interval * 0.6
            for _ in range(3):  # right after a cycle that follows the last change
                watcher.next_cycle(timeout=interval * 3)
                measured = watcher.idle_rate(window)
                if measured is not None:
                    break
            else:
                raise RuntimeError("a cycle ran during every idle measurement; raise the interval")
            idle = measured
            if idle:
                print(f"idle between cycles: {idle * 1000:.1f} ms CPU per second ({idle:.2%})")
            else:
                print(
                    f"idle between cycles: no CPU tick in {window:.0f} s "
                    f"(< {10 / window:.1f} ms CPU per second)"
                )
            print(f"{'cycle':<10} {'wall s':>7} {'cpu s raw':>10} {'cpu s net':>10}")
            worst = 0.0
            for number in range(1, steady_cycles + 1):
                wall, cpu, window = watcher.next_cycle(timeout=interval * 3)
                net = max(0.0, cpu - idle * window)
                worst = max(worst, net)
                print(f"{'steady ' + str(number):<10} {wall:7.3f} {cpu:10.3f} {net:10.3f}")
            failed = bot.metric("releasebot_cycles_total", outcome="failed") or 0
            if failed:
                failures.append(f"{failed:.0f} cycles failed")
            if bot.metric("releasebot_builds_started_total") != len(jobs):
                failures.append("the steady cycles launched builds")
            rss = peak_rss_mib(bot.pid)
            code = bot.terminate(timeout=30)
            if code != 0:
                failures.append(f"exit code {code} after SIGTERM")
    help_time = help_wall_time()
    print()
    rows = [
        ("peak RSS (VmHWM)", f"{rss:.1f} MiB", f"< {RSS_TARGET_MIB} MB", rss < RSS_TARGET_MIB),
        (
            "unchanged cycle CPU",
            f"{worst:.3f} s",
            f"< {CYCLE_CPU_TARGET} s",
            worst < CYCLE_CPU_TARGET,
        ),
        ("releasebot --help", f"{help_time:.3f} s", f"< {HELP_TARGET} s", help_time < HELP_TARGET),
    ]
    for name, value, target, ok in rows:
        print(f"{name:<22} {value:>10}   target {target:<9} {verdict(ok)}")
    print("(CPU from /proc/<pid>/stat has a resolution of 10 ms)")
    for failure in failures:
        print(f"FAILED: {failure}")
    return 1 if failures else 0


def verdict(ok: bool) -> str:
    return "ok" if ok else "OVER (timing: reported, not failed)"


if __name__ == "__main__":
    raise SystemExit(main())
