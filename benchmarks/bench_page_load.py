"""Load test: the page and the probes of ``releasebot run``'s server under a crowd.

Real parts: a SQLite store (a file) seeded like ``bench_page.py`` (125 Flatcar versions x
20 drivers: 2,500 targets with a build row each, 400 GPU nodes), the real HTTP server of
``releasebot run`` with the page's app AND the probes on one port (``web.listen`` left
empty, as the Deployment runs it), asked over loopback only.

Two scenarios, each bounded in count (connections) and time (every client gives up after
``--deadline`` seconds, 30 by default) and ending by itself:

- ``crowd``: 1,000 connections opened at once, each asking for the page (``GET /``);
- ``expensive``: 100 concurrent ``GET /api/targets`` (the whole matrix: the most
  expensive answer), started together, twice in a row.

- ``tabs``: the server's memory with 1 and with ``--tabs`` (50) open tabs, each refreshing
  as the page does (``/api/fleet``, ``/api/targets``, ``/api/feeds`` with the last ETags,
  here back to back, ``--rounds`` times), on a store of ``--tab-versions`` x 20 targets
  (10,000; 1,000 with ``--short``), each count against a fresh server process: its RSS and
  peak RSS (``VmHWM``) after the tabs, and what they were answered. Memory must not grow with
  the number of tabs: every tab gets the one answer built per change.

During the first two, a prober in a process of its own asks ``/healthz`` every 0.2 s with the
Deployment's liveness timeout (3 s), as the kubelet does. Printed per scenario: the
fraction of requests answered within the deadline (any complete HTTP answer; a 503 with
``Retry-After`` counts, it is an answer), how many got 200 and 503, the slowest answer, and
the probe's worst latency and its unanswered probes. The load generator and the prober run
in processes of their own, so their work does not share the server's interpreter.

Exits non-zero only when something did not work at all (the server died, a probe was
never answered while no load ran), never for timing.

    uv run python benchmarks/bench_page_load.py [--short] [--connections 1000]
        [--expensive 100] [--deadline 30] [--tabs 50] [--rounds 5] [--tab-versions 500]
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import resource
import sys
import tempfile
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

PROBE_TIMEOUT = 3.0
"""The Deployment's liveness probe timeout (config/base/deployment.yaml)."""
PROBE_EVERY = 0.2


@dataclass
class Outcome:
    statuses: list[int]
    """One per request: the HTTP status, or 0 when no complete answer came in time."""
    slowest: float


def _raise_fd_limit() -> None:
    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


async def _one(port: int, path: str, deadline: float) -> tuple[int, float]:
    start = time.monotonic()
    writer = None
    try:
        async with asyncio.timeout(deadline):
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(f"GET {path} HTTP/1.0\r\nHost: 127.0.0.1:{port}\r\n\r\n".encode())
            await writer.drain()
            answer = await reader.read()  # HTTP/1.0: the server closes after the answer
    except (TimeoutError, OSError):
        return 0, time.monotonic() - start
    finally:
        if writer is not None:
            writer.close()
    status_line = answer.split(b"\r\n", 1)[0].split()
    complete = b"\r\n\r\n" in answer and len(status_line) >= 2 and status_line[1].isdigit()
    return (int(status_line[1]) if complete else 0), time.monotonic() - start


async def _crowd(port: int, path: str, count: int, deadline: float) -> Outcome:
    results = await asyncio.gather(*(_one(port, path, deadline) for _ in range(count)))
    return Outcome([status for status, _ in results], max(took for _, took in results))


def load(port: int, path: str, count: int, deadline: float, queue: Any) -> None:
    """The load generator's process: ``count`` requests for ``path`` at once."""
    _raise_fd_limit()
    queue.put(asyncio.run(_crowd(port, path, count, deadline)))


def probe(port: int, stop: Any, queue: Any) -> None:
    """The prober's process: ``/healthz`` every 0.2 s, 3 s timeout, until ``stop``."""
    import httpx

    worst, failed, count = 0.0, 0, 0
    while not stop.is_set():
        start = time.monotonic()
        try:
            answer = httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=PROBE_TIMEOUT)
            ok = answer.status_code == 200
        except httpx.HTTPError:
            ok = False
        took = time.monotonic() - start
        worst, count = max(worst, took), count + 1
        failed += not ok
        stop.wait(max(0.0, PROBE_EVERY - took))
    queue.put((count, failed, worst))


def scenario(name: str, port: int, path: str, count: int, deadline: float) -> bool:
    context = multiprocessing.get_context("spawn")
    results, probes, stop = context.Queue(), context.Queue(), context.Event()
    prober = context.Process(target=probe, args=(port, stop, probes))
    prober.start()
    time.sleep(1.0)  # the prober's first answers come from an idle server
    loader = context.Process(target=load, args=(port, path, count, deadline, results))
    start = time.monotonic()
    loader.start()
    outcome: Outcome = results.get(timeout=deadline + 60)
    took = time.monotonic() - start
    loader.join(timeout=10)
    stop.set()
    probed, failed, worst = probes.get(timeout=PROBE_TIMEOUT + 30)
    prober.join(timeout=10)
    answered = sum(1 for status in outcome.statuses if status)
    ok = sum(1 for status in outcome.statuses if status == 200)
    busy = sum(1 for status in outcome.statuses if status == 503)
    print(
        f"{name:<28} answered {answered}/{count} ({answered / count:6.1%}) within "
        f"{deadline:g} s: {ok} x 200, {busy} x 503; slowest {outcome.slowest:5.2f} s; "
        f"all done in {took:5.2f} s"
    )
    print(
        f"{'':<28} /healthz: {probed} probes, worst {worst * 1000:7.1f} ms, "
        f"{failed} unanswered or failing (timeout {PROBE_TIMEOUT:g} s)"
    )
    return probed > 0


def _tab(base: str, rounds: int, statuses: list[int]) -> None:
    """One open tab: ``rounds`` refreshes, each the page's three conditional requests."""
    import httpx

    etags: dict[str, str] = {}
    with httpx.Client(base_url=base, timeout=120) as client:
        for _ in range(rounds):
            for path in ("/api/fleet", "/api/targets", "/api/feeds"):
                headers = {"If-None-Match": etags[path]} if path in etags else {}
                try:
                    answer = client.get(path, headers=headers)
                except httpx.HTTPError:
                    statuses.append(0)
                    continue
                statuses.append(answer.status_code)
                if etag := answer.headers.get("ETag"):
                    etags[path] = etag


def tabs(url: str, count: int, rounds: int) -> None:
    """``count`` tabs at once against a fresh server process on ``url``: its memory after."""
    import threading
    from collections import Counter

    from bench_page import ServerProcess

    server = ServerProcess(url)
    try:
        before, _peak = server.memory()
        idle_cpu = server.cpu()
        statuses: list[int] = []
        workers = [
            threading.Thread(target=_tab, args=(server.base, rounds, statuses))
            for _ in range(count)
        ]
        start = time.monotonic()
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join(timeout=600)
        took = time.monotonic() - start
        rss, peak = server.memory()
        spent = server.cpu() - idle_cpu
        shown = ", ".join(
            f"{n} x {status or 'none'}" for status, n in sorted(Counter(statuses).items())
        )
        print(
            f"{count:>3} tab(s) x {rounds} refreshes: RSS {before:.0f} MB idle, {rss:.0f} MB "
            f"after, peak {peak:.0f} MB; server CPU {spent:.1f} s; answers: {shown}; "
            f"{took:.1f} s"
        )
    finally:
        server.close()


def main() -> int:
    parser = argparse.ArgumentParser(description="the page and probes under load (loopback)")
    parser.add_argument("--short", action="store_true", help="one round per scenario (CI)")
    parser.add_argument("--connections", type=int, default=1000)
    parser.add_argument("--expensive", type=int, default=100)
    parser.add_argument("--deadline", type=float, default=30.0)
    parser.add_argument("--tabs", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--tab-versions", type=int, default=None, help="500 (50 with --short)")
    args = parser.parse_args()
    if not (0 < args.connections <= 5000 and 0 < args.expensive <= 1000):
        parser.error("--connections must be 1..5000 and --expensive 1..1000 (a bounded test)")
    if not (0 < args.tabs <= 200 and 0 < args.rounds <= 100):
        parser.error("--tabs must be 1..200 and --rounds 1..100 (a bounded test)")
    tab_versions = args.tab_versions or (50 if args.short else 500)
    _raise_fd_limit()
    from bench_page import seed

    from releasebot.config import Settings
    from releasebot.web.server import HttpServer
    from releasebot.wiring import open_store
    from releasebot.wiring.web import overview_app

    rounds = 1 if args.short else 2
    now = datetime.now(UTC)
    with tempfile.TemporaryDirectory(prefix="bench-page-load-") as directory:
        url = f"sqlite:///{Path(directory) / 'releasebot.db'}"
        with open_store(url) as store:
            seed(store, 125, 20, now)
            print("seeded 125 Flatcar versions x 20 drivers (2,500 targets, 400 GPU nodes)")
            server = HttpServer(
                "127.0.0.1",
                0,
                alive=lambda: True,
                ready=lambda: (True, "ready (leader)"),
                metrics=lambda: b"",
                pages=overview_app(Settings(), store),
            ).start()
            fine = True
            try:
                for _ in range(rounds):
                    fine &= scenario(
                        f"{args.connections} x GET /",
                        server.port,
                        "/",
                        args.connections,
                        args.deadline,
                    )
                    fine &= scenario(
                        f"{args.expensive} x GET /api/targets",
                        server.port,
                        "/api/targets",
                        args.expensive,
                        args.deadline,
                    )
            finally:
                server.close()
    with tempfile.TemporaryDirectory(prefix="bench-page-tabs-") as directory:
        url = f"sqlite:///{Path(directory) / 'releasebot.db'}"
        with open_store(url) as store:
            seed(store, tab_versions, 20, now)
        print(f"tabs: seeded {tab_versions} Flatcar versions x 20 drivers, 400 GPU nodes")
        for count in (1, args.tabs):
            tabs(url, count, args.rounds)
    return 0 if fine else 1


if __name__ == "__main__":
    raise SystemExit(main())
