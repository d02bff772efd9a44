"""Benchmark: poll and plan every real Flatcar feed with four driver branches.

Serves the real feeds from ``../shared/data`` over local HTTP (with ETags, like a CDN),
runs ``releasebot plan`` as a separate process twice (a first run into an empty SQLite
store, then a repeat with nothing changed) and prints, for each run: wall time, CPU time
(user + system of the process), peak RSS, HTTP requests, and for the repeat run the rows
it changed outside the feeds' poll timestamps.

Targets (checked by eye and reported, not asserted): first run under 1 s CPU and 120 MB
peak RSS; the repeat run makes one conditional request per feed and writes nothing but
poll timestamps.

    uv run python benchmarks/bench_plan.py [--short] [--data ../shared/data]
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.support.feedserver import FeedServer  # noqa: E402
from tests.support.registryserver import run_registry  # noqa: E402

CHANNELS = {
    "stable": "releases-stable.2026-08-13.json",
    "beta": "releases-beta.json",
    "alpha": "releases-alpha.json",
    "lts": "releases-lts.json",
    "lts-2024": "releases-lts-2024.json",
    "lts-2023": "releases-lts-2023.json",
    "lts-2022": "releases-lts-2022.json",
    "lts-2021": "releases-lts-2021.json",
}
BRANCHES = ["615", "595", "580", "460"]
POLL_COLUMNS = {"last_polled_at", "last_success_at"}


def run_plan(config: Path) -> tuple[float, float, float, int]:
    """Run ``releasebot plan`` once; return wall s, CPU s, peak RSS MiB and target count."""
    command = [sys.executable, "-m", "releasebot", "plan", "--quiet", "--format", "json"]
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        started = time.perf_counter()
        process = subprocess.Popen([*command, "--config", str(config)], stdout=out, stderr=err)
        _, status, usage = os.wait4(process.pid, 0)  # the child's own rusage, not a sum
        wall = time.perf_counter() - started
        process.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        if process.returncode != 0:
            raise SystemExit(
                f"releasebot plan failed ({process.returncode}): {err.read().decode()}"
            )
        targets = out.read().count(b'"tag"')
    return wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024, targets


def snapshot(database: Path) -> dict[str, set[tuple[object, ...]]]:
    """Every row of every table, with the feeds' poll timestamps (and their change
    counter) left out."""
    rows: dict[str, set[tuple[object, ...]]] = {}
    with sqlite3.connect(database) as db:
        tables = [
            name for (name,) in db.execute("select name from sqlite_master where type='table'")
        ]
        for table in tables:
            columns = [c[1] for c in db.execute(f"pragma table_info({table})")]
            keep = [c for c in columns if not (table == "feeds" and c in POLL_COLUMNS)]
            # The feeds' change counter moves with their poll timestamps; every other
            # counter must stay where it was.
            where = " where name != 'feeds'" if table == "store_revisions" else ""
            rows[table] = set(db.execute(f"select {', '.join(keep)} from {table}{where}"))
    return rows


def changed_rows(
    before: dict[str, set[tuple[object, ...]]], after: dict[str, set[tuple[object, ...]]]
) -> int:
    return sum(len(after.get(table, set()) ^ rows) for table, rows in before.items())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--short", action="store_true", help="one repeat run instead of five")
    parser.add_argument("--data", type=Path, default=REPO.parent / "shared" / "data")
    args = parser.parse_args()
    flatcar = args.data / "flatcar"
    if not flatcar.is_dir():
        print(f"benchmark skipped: real feeds not found at {args.data}")
        return 1 if os.environ.get("CI") else 0
    with (
        FeedServer() as server,
        tempfile.TemporaryDirectory() as temporary,
        run_registry(Path(temporary) / "registry") as registry,
    ):
        for channel, name in CHANNELS.items():
            body = (flatcar / name).read_bytes()
            server.route(
                f"/releases-{channel}.json", FeedServer.static(body, etag=f'"{channel}-1"')
            )
        nvidia = (args.data / "nvidia" / "datacenter-releases.fixture.json").read_bytes()
        server.route("/nvidia.json", FeedServer.static(nvidia, etag='"nvidia-1"'))
        database = Path(temporary) / "bench.db"
        config = Path(temporary) / "bench.toml"
        config.write_text(
            f'[database]\nurl = "sqlite:///{database}"\n'
            f'[flatcar]\nfeed_url = "{server.url("/releases-{channel}.json")}"\n'
            f"channels = {list(CHANNELS)!r}\narches = ['amd64', 'arm64']\nkeep = 2\n"
            f'[nvidia]\nfeed_url = "{server.url("/nvidia.json")}"\nbranches = {BRANCHES!r}\n'
            f'[registry]\nrepository = "{registry.repository("bench/driver")}"\n'
            "insecure = true\n",
            encoding="utf-8",
        )
        feeds = len(CHANNELS) + 1
        size = sum((flatcar / name).stat().st_size for name in CHANNELS.values()) + len(nvidia)
        print(f"feeds: {feeds} ({size / 1e6:.1f} MB), driver branches: {len(BRANCHES)}")
        print(
            f"{'run':<8} {'wall s':>7} {'cpu s':>7} {'rss MiB':>8} {'requests':>9} "
            f"{'targets':>8} {'rows changed':>13}"
        )

        seen = len(server.requests)
        wall, cpu, rss, targets = run_plan(config)
        requests = len(server.requests) - seen
        print(
            f"{'first':<8} {wall:7.3f} {cpu:7.3f} {rss:8.1f} {requests:9d} {targets:8d} {'-':>13}"
        )

        problems = []
        if cpu >= 1.0 or rss >= 120:
            print(f"note: first run above target (1 s CPU, 120 MiB): {cpu:.3f} s, {rss:.1f} MiB")
        repeats = []
        for _ in range(1 if args.short else 5):
            before = snapshot(database)
            seen = len(server.requests)
            wall, cpu, rss, targets = run_plan(config)
            new_requests = server.requests[seen:]
            conditional = sum(1 for r in new_requests if "if-none-match" in r.headers)
            changed = changed_rows(before, snapshot(database))
            repeats.append(cpu)
            if len(new_requests) != feeds or conditional != feeds:
                problems.append(
                    f"repeat run made {len(new_requests)} requests, {conditional} cond."
                )
            if changed:
                problems.append(f"repeat run changed {changed} rows besides poll timestamps")
            print(
                f"{'repeat':<8} {wall:7.3f} {cpu:7.3f} {rss:8.1f} "
                f"{len(new_requests):6d} ({conditional} cond.) {targets:3d} {changed:13d}"
            )
        if len(repeats) > 1:
            print(f"repeat cpu median: {statistics.median(repeats):.3f} s")
    for problem in problems:  # behaviour, not timing: these fail the run
        print(f"FAILED: {problem}")
    return 1 if problems else 0


if __name__ == "__main__":
    raise SystemExit(main())
