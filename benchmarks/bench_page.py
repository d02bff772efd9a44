"""Benchmark: what the coverage page and its API cost the server, at 10,000 targets.

Real parts: a SQLite store (a file) holding ``versions x drivers`` required targets in every
state (a build row each), the Flatcar releases in one feed, 400 GPU nodes spread over the
versions (a tenth about to reboot), four feeds; the real HTTP server of ``releasebot run``
with the page's app, in a process of its own, asked over loopback by httpx.

The server's CPU is read from ``/proc/<pid>/stat`` (user + system time of the server's
process only, not the client's) around many requests, so the numbers are CPU per request,
not wall time on a loaded machine. Printed per route:

- ``200 after a change``: the first answer after a store write that moves the tables the
  answer depends on (the answer is built);
- ``200 unchanged``: a request without ``If-None-Match`` while nothing changed (a new tab);
- ``304``: a request whose ``If-None-Match`` matches while nothing changed (the page's
  refresh).

Then one open tab: the requests the page makes on each refresh (``/api/fleet``,
``/api/targets``, ``/api/feeds`` with the last ETags) for ``REFRESHES`` refreshes (five
minutes at the page's 15 s), with one steady cycle's writes in between (the fleet listed
again, the feeds polled), and the wall time a headless browser takes from navigation to a
drawn matrix when chromium and chromedriver are installed.

    uv run python benchmarks/bench_page.py [--short] [--versions 500] [--drivers 20]
        [--repeat 30] [--no-browser]
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from releasebot.domain.fleet.nodes import parse_node  # noqa: E402
from releasebot.domain.shared.versions import Arch, FlatcarVersion  # noqa: E402
from releasebot.domain.targets.builds import BuildRecord, BuildState, job_name  # noqa: E402
from releasebot.domain.targets.models import (  # noqa: E402
    FlatcarRelease,
    TargetState,
    Validators,
)
from tests.support.fleetnodes import gpu_node  # noqa: E402
from tests.support.targets import make_target  # noqa: E402

STATES = list(TargetState)
REFRESHES = 20
"""Refreshes of one open tab in five minutes: the page asks every 15 s."""
TAB_PATHS = ("/api/fleet", "/api/targets", "/api/feeds")
"""What the page asks on each refresh (``static/app.js``)."""
TICKS = os.sysconf("SC_CLK_TCK")


def seed(store: Any, versions: int, drivers: int, now: datetime) -> str:
    """Fill ``store``; the tag of a target in the middle (for its detail)."""
    flatcar = [f"{4000 + v}.2.{v % 7}" for v in range(versions)]
    releases = [
        FlatcarRelease(
            version=FlatcarVersion.parse(text),
            channel="stable",
            arches=frozenset({Arch.AMD64}),
            kernel="6.12.102",
            released_at=now - timedelta(days=versions - index),
            content_sha256=str(index),
        )
        for index, text in enumerate(flatcar)
    ]
    store.record_flatcar_feed(
        "flatcar/stable", "https://x.test/s.json", releases, Validators(), now
    )
    for name in ("flatcar/lts", "flatcar/beta", "nvidia"):
        store.record_feed_unchanged(name, "https://x.test/" + name, Validators(), now)
    planned = [
        make_target(driver=f"580.{100 + d}.04", flatcar=f) for f in flatcar for d in range(drivers)
    ]
    records = store.sync_targets(planned, now)
    changed, builds = [], []
    for index, record in enumerate(records):
        state = STATES[index % len(STATES)]
        changed.append(
            replace(
                record,
                state=state,
                attempts=1,
                published_at=now if state is TargetState.PUBLISHED else None,
            )
        )
        builds.append(
            BuildRecord(
                tag=record.tag,
                arch=Arch.AMD64,
                attempt=1,
                job_name=job_name(record.tag, Arch.AMD64, 1),
                destination_tag=record.tag,
                state=BuildState.FAILED if state is TargetState.FAILED else BuildState.RUNNING,
                created_at=now,
                log_tail="error: something\n" * 40 if state is TargetState.FAILED else None,
            )
        )
    store.save(targets=changed, builds=builds)
    store.record_fleet(fleet_nodes(flatcar), now)
    return records[len(records) // 2].tag


def fleet_nodes(flatcar: list[str]) -> list[Any]:
    """400 GPU nodes over the versions, a tenth about to reboot into the next one."""
    nodes = []
    for n in range(400):
        version = flatcar[n % len(flatcar)]
        pending = flatcar[(n + 1) % len(flatcar)] if n % 10 == 0 else None
        nodes.append(parse_node(gpu_node(f"gpu-{n:04d}", version, pending=pending)))
    return nodes


def steady_cycle(store: Any, versions: int, now: datetime) -> None:
    """What a cycle that found nothing new writes: the fleet listed again, feeds polled."""
    store.record_fleet(fleet_nodes([f"{4000 + v}.2.{v % 7}" for v in range(versions)]), now)
    for name in ("flatcar/stable", "flatcar/lts", "flatcar/beta", "nvidia"):
        store.record_feed_unchanged(name, "https://x.test/" + name, Validators(), now)


def touch_target(store: Any, tag: str, now: datetime) -> None:
    """One target written (its ``updated_at``): every answer that reads targets is stale."""
    record = store.target(tag)
    store.save(targets=[replace(record, updated_at=now)])


def _serve(url: str, ready: Any, stop: Any) -> None:
    """The server's process: ``releasebot run``'s HTTP server with the page on ``url``."""
    sys.path.insert(0, str(REPO))
    from releasebot.config import Settings
    from releasebot.web.server import HttpServer
    from releasebot.wiring import open_store
    from releasebot.wiring.web import overview_app

    with open_store(url) as store:
        server = HttpServer(
            "127.0.0.1",
            0,
            alive=lambda: True,
            ready=lambda: (True, "ready"),
            metrics=lambda: b"",
            pages=overview_app(Settings(), store),
        ).start()
        ready.put(server.port)
        stop.wait()
        server.close()


class ServerProcess:
    """The server in a process of its own: its port, its CPU time and its memory."""

    def __init__(self, url: str) -> None:
        context = multiprocessing.get_context("spawn")
        ready = context.Queue()
        self._stop = context.Event()
        self._process = context.Process(target=_serve, args=(url, ready, self._stop))
        self._process.start()
        self.port: int = ready.get(timeout=120)
        self.base = f"http://127.0.0.1:{self.port}"

    def cpu(self) -> float:
        """User + system CPU seconds of the server's process so far."""
        fields = Path(f"/proc/{self._process.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / TICKS

    def memory(self) -> tuple[float, float]:
        """(RSS, peak RSS) in MB."""
        status = Path(f"/proc/{self._process.pid}/status").read_text()
        found = {
            line.split(":")[0]: int(line.split()[1]) / 1024
            for line in status.splitlines()
            if line.startswith(("VmRSS:", "VmHWM:"))
        }
        return found["VmRSS"], found["VmHWM"]

    def close(self) -> None:
        self._stop.set()
        self._process.join(timeout=30)
        if self._process.is_alive():
            self._process.kill()


def cpu_per_call(server: ServerProcess, count: int, call: Callable[[], None]) -> float:
    """The server's CPU seconds per ``call()``, over ``count`` calls (after one warm-up)."""
    call()
    start = server.cpu()
    for _ in range(count):
        call()
    return (server.cpu() - start) / count


def _get(client: httpx.Client, path: str, expect: int, etag: str | None = None) -> httpx.Response:
    answer = client.get(path, headers={"If-None-Match": etag} if etag else {})
    assert answer.status_code == expect, (path, answer.status_code, answer.text[:200])
    return answer


def routes(
    server: ServerProcess, store: Any, tag: str, repeat: int, now: datetime
) -> dict[str, float]:
    """Print the table; the CPU seconds of building each route's answer."""
    print(
        f"{'route':<44} {'CPU ms per request:':>20} {'200 after a change':>19} "
        f"{'200 unchanged':>14} {'304':>8} {'bytes':>9}"
    )
    builds = {}
    with httpx.Client(base_url=server.base, timeout=120) as client:
        for path in ("/", "/api/targets", "/api/fleet", "/api/feeds", f"/api/targets/{tag}"):
            stamp = iter(range(1, 1_000_000))

            def changed(path: str = path, stamp: Any = stamp) -> None:
                touch_target(store, tag, now + timedelta(seconds=next(stamp)))
                _get(client, path, 200)

            built = builds[path] = cpu_per_call(server, max(2, repeat // 3), changed)
            unchanged = cpu_per_call(server, repeat, lambda p=path: _get(client, p, 200))
            first = _get(client, path, 200)
            etag = first.headers["ETag"]
            matched = cpu_per_call(
                server, repeat * 3, lambda p=path, e=etag: _get(client, p, 304, e)
            )
            print(
                f"{path:<44} {'':>20} {built * 1000:19.2f} {unchanged * 1000:14.2f} "
                f"{matched * 1000:8.2f} {len(first.content):>9}"
            )
    return builds


def one_tab(
    server: ServerProcess, store: Any, versions: int, now: datetime, builds: dict[str, float]
) -> None:
    """Five minutes of one open tab, its refreshes played back to back; plus its share of
    the recheck (every kept answer built again after ``RECHECK_AFTER_SECONDS``), which a
    run of seconds cannot wait for: the builds measured by ``routes``, pro rata."""
    from releasebot.domain.views.overview import RECHECK_AFTER_SECONDS

    with httpx.Client(base_url=server.base, timeout=120) as client:
        etags = {path: _get(client, path, 200).headers["ETag"] for path in TAB_PATHS}
        start = server.cpu()
        for refresh in range(REFRESHES):
            if refresh == REFRESHES // 2:
                steady_cycle(store, versions, now + timedelta(minutes=5))
            for path in TAB_PATHS:
                answer = client.get(path, headers={"If-None-Match": etags[path]})
                assert answer.status_code in (200, 304), (path, answer.status_code)
                etags[path] = answer.headers.get("ETag", etags[path])
        spent = server.cpu() - start
    recheck = sum(builds[path] for path in TAB_PATHS) * 300 / RECHECK_AFTER_SECONDS
    print(
        f"one open tab, {REFRESHES} refreshes ({len(TAB_PATHS)} conditional requests each) "
        f"and one steady cycle's writes: {spent:.3f} s of server CPU per 5 minutes measured; "
        f"+ {recheck:.3f} s for the recheck every {RECHECK_AFTER_SECONDS / 60:g} min "
        f"(if the code has one); total {spent + recheck:.3f} s"
    )


def browser_time(url: str, repeat: int) -> list[float] | None:
    chromium, driver = shutil.which("chromium"), shutil.which("chromedriver")
    if chromium is None or driver is None:
        return None
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for argument in ("--headless=new", "--no-sandbox", "--disable-gpu"):
        options.add_argument(argument)
    browser = webdriver.Chrome(options=options, service=Service(driver))
    try:
        times = []
        for _ in range(repeat):
            start = time.perf_counter()
            browser.get(url)
            WebDriverWait(browser, 120).until(
                lambda b: len(b.find_elements(By.CSS_SELECTOR, "#matrix tbody tr")) > 1
            )
            times.append(time.perf_counter() - start)
        return times
    finally:
        browser.quit()


def main() -> int:
    parser = argparse.ArgumentParser(description="what the coverage page costs the server")
    parser.add_argument("--short", action="store_true", help="1,000 targets, few repetitions")
    parser.add_argument("--versions", type=int, default=None, help="500 (50 with --short)")
    parser.add_argument("--drivers", type=int, default=20)
    parser.add_argument("--repeat", type=int, default=None, help="requests per measure")
    parser.add_argument("--no-browser", action="store_true")
    args = parser.parse_args()
    versions = args.versions or (50 if args.short else 500)
    if not (0 < versions <= 2000 and 0 < args.drivers <= 100):
        parser.error("--versions must be 1..2000 and --drivers 1..100 (a bounded run)")
    repeat = args.repeat or (6 if args.short else 30)
    now = datetime.now(UTC)
    from releasebot.wiring import open_store

    with tempfile.TemporaryDirectory(prefix="bench-page-") as directory:
        url = f"sqlite:///{Path(directory) / 'releasebot.db'}"
        with open_store(url) as store:
            start = time.perf_counter()
            tag = seed(store, versions, args.drivers, now)
            print(
                f"seeded {versions} Flatcar versions x {args.drivers} drivers "
                f"({versions * args.drivers} targets, 400 GPU nodes) in "
                f"{time.perf_counter() - start:.1f} s"
            )
            server = ServerProcess(url)
            try:
                builds = routes(server, store, tag, repeat, now)
                one_tab(server, store, versions, now, builds)
                rss, peak = server.memory()
                print(f"server memory: RSS {rss:.0f} MB, peak {peak:.0f} MB")
                shown = None if args.no_browser else browser_time(server.base + "/", 2)
                if shown is None:
                    print("browser: not measured (chromium/chromedriver not installed, or off)")
                else:
                    median, worst = statistics.median(shown) * 1000, max(shown) * 1000
                    print(
                        f"browser: navigation to a drawn matrix: median {median:.0f} ms, "
                        f"worst {worst:.0f} ms"
                    )
            finally:
                server.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
