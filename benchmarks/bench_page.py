"""Benchmark: the coverage page and its API at 100 Flatcar versions x 20 drivers.

Real parts: a SQLite store (a file) holding 2,000 required targets in every state (with a
build row each), 100 Flatcar releases in one feed, 400 GPU nodes spread over the versions
(a tenth about to reboot), four feeds; the real HTTP server of ``releasebot run`` with the
page's app, asked over loopback by httpx.

Prints per route the wall time of a full answer (median and worst of the repetitions) and
its size, the same with a matching ``If-None-Match`` (the page's refresh when nothing
changed: the answer is still computed, only not sent), and, when chromium and chromedriver
are installed, the time a headless browser takes from navigation to a drawn matrix.

    uv run python benchmarks/bench_page.py [--short] [--versions 100] [--drivers 20]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from releasebot.config import Settings  # noqa: E402
from releasebot.domain.builds import BuildRecord, BuildState, job_name  # noqa: E402
from releasebot.domain.fleet import parse_node  # noqa: E402
from releasebot.domain.models import (  # noqa: E402
    FlatcarRelease,
    TargetState,
    Validators,
)
from releasebot.domain.versions import Arch, FlatcarVersion  # noqa: E402
from releasebot.web.server import HttpServer  # noqa: E402
from releasebot.wiring import open_store  # noqa: E402
from releasebot.wiring.web import overview_app  # noqa: E402
from tests.support.fleetnodes import gpu_node  # noqa: E402
from tests.support.targets import make_target  # noqa: E402

STATES = list(TargetState)


def seed(store: object, versions: int, drivers: int, now: datetime) -> str:
    from dataclasses import replace

    from releasebot.store.sql import SqlStateStore

    assert isinstance(store, SqlStateStore)
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
    nodes = []
    for n in range(400):
        version = flatcar[n % versions]
        pending = flatcar[(n + 1) % versions] if n % 10 == 0 else None
        nodes.append(parse_node(gpu_node(f"gpu-{n:04d}", version, pending=pending)))
    store.record_fleet(nodes, now)
    return records[len(records) // 2].tag


def timed(client: httpx.Client, path: str, repeat: int, etag: bool) -> tuple[list[float], int]:
    headers = {}
    if etag:
        headers["If-None-Match"] = client.get(path).headers["ETag"]
    times, size = [], 0
    for _ in range(repeat):
        start = time.perf_counter()
        answer = client.get(path, headers=headers)
        times.append(time.perf_counter() - start)
        assert answer.status_code == (304 if etag else 200), (path, answer.status_code)
        size = len(answer.content)
    return times, size


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
            WebDriverWait(browser, 60).until(
                lambda b: len(b.find_elements(By.CSS_SELECTOR, "#matrix tbody tr")) > 1
            )
            times.append(time.perf_counter() - start)
        return times
    finally:
        browser.quit()


def main() -> int:
    parser = argparse.ArgumentParser(description="coverage page and API render time")
    parser.add_argument("--short", action="store_true", help="fewer repetitions (CI)")
    parser.add_argument("--versions", type=int, default=100)
    parser.add_argument("--drivers", type=int, default=20)
    args = parser.parse_args()
    repeat = 3 if args.short else 15
    now = datetime.now(UTC)
    with tempfile.TemporaryDirectory(prefix="bench-page-") as directory:
        url = f"sqlite:///{Path(directory) / 'releasebot.db'}"
        with open_store(url) as store:
            start = time.perf_counter()
            detail_tag = seed(store, args.versions, args.drivers, now)
            print(
                f"seeded {args.versions} Flatcar versions x {args.drivers} drivers "
                f"({args.versions * args.drivers} targets, 400 GPU nodes) in "
                f"{time.perf_counter() - start:.1f} s"
            )
            server = HttpServer("127.0.0.1", 0, pages=overview_app(Settings(), store)).start()
            base = f"http://127.0.0.1:{server.port}"
            try:
                with httpx.Client(base_url=base, timeout=60) as client:
                    print(f"{'route':<44} {'median':>9} {'worst':>9} {'bytes':>9}")
                    for path in (
                        "/",
                        "/api/targets",
                        "/api/fleet",
                        "/api/feeds",
                        f"/api/targets/{detail_tag}",
                    ):
                        for etag in (False, True):
                            times, size = timed(client, path, repeat, etag)
                            label = path + (" (304)" if etag else "")
                            print(
                                f"{label:<44} {statistics.median(times) * 1000:7.1f}ms "
                                f"{max(times) * 1000:7.1f}ms {size:>9}"
                            )
                shown = browser_time(base + "/", 2 if args.short else 5)
                if shown is None:
                    print("browser: chromium/chromedriver not installed, not measured")
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
