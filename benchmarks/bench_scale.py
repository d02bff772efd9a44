"""Benchmark: what releasebot costs at 1,000 / 10,000 / 30,000 targets, against what users
would otherwise run, in one run.

Real parts: a docker-registry on loopback holding every target's tag (one small image
pushed, then its manifest PUT under every other tag through the registry API), synthetic
feeds in the real formats served over HTTP with ETags (100 stable releases; NVIDIA's list
with three branches of 100 drivers: 1,000 targets are 100 releases x 10 drivers of one
branch, 10,000 are 100 x 100, 30,000 are 100 x 100 x 3 branches), SQLite, the fake
Kubernetes API for the Jobs API, and releasebot itself as separate processes, installed
as the image installs it (``uv sync --no-dev --no-editable --compile-bytecode`` into a
scratch environment; ``--dev-venv`` runs this environment instead, whose development
packages and cold bytecode cache add about 2 s and 20 MB to every process):

- ``run``: the service; its steady cycle (feeds answer 304, the listing is unchanged, no
  Job runs), CPU from ``/proc/<pid>/stat`` between the cycle's start and end minus the
  idle rate (as ``bench_run.py`` measures it), wall from its own cycle duration metric;
  RSS is ``VmRSS`` after the steady cycles (``VmHWM`` printed beside it);
- ``page 304``: ``curl`` asking the running service's page and ``/api/targets`` with the
  ``If-None-Match`` of its last answer; the server's CPU per request;
- ``reconcile --once``, ``reconcile --once --dry-run``, ``plan --format json`` (a repeat,
  nothing changed): the process's own rusage (``wait4``), RSS its peak;
- the peer: a shell loop doing one ``curl -I`` per tag (the CronJob users would otherwise
  run), CPU of the shell and every curl (``RUSAGE_CHILDREN``); above ``--peer-max`` tags it
  runs over the first ``--peer-max`` and is scaled (said in the output);
- the floor: one ``skopeo list-tags`` of the repository (one paginated tag listing).

Each mode's line says how many times less CPU than the peer it costs and how many tag
listings it costs. Targets printed against (reported, never failed): at 10,000 targets the
steady cycle >= 100x less than the peer, ``reconcile --once`` and ``plan`` >= 50x; the
steady cycle within 3 listings; steady cycle CPU at 30,000 at most twice that at 1,000;
steady RSS at 10,000 <= 100 MB. Exits non-zero only for functional failures.

    uv run python benchmarks/bench_scale.py [--short] [--sizes 1000,10000,30000]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

from bench_reconcile import RELEASES, flatcar_feed  # noqa: E402
from bench_run import Watcher  # noqa: E402

from releasebot.registry import OCI_MANIFEST  # noqa: E402
from tests.support.feedserver import FeedServer  # noqa: E402
from tests.support.kubeapi import FakeKubeApi  # noqa: E402
from tests.support.registryserver import RunningRegistry, run_registry  # noqa: E402
from tests.support.runprocess import (  # noqa: E402
    ReleasebotProcess,
    cpu_seconds,
    free_port,
    peak_rss_mib,
    wait_for,
    write_config,
)

DRIVERS = 100
BRANCHES = ("580", "570", "560")
SHAPES = {1000: (("580",), 10), 10000: (("580",), 100), 30000: (BRANCHES, 100)}
"""Targets -> (driver branches selected, drivers kept per branch); 100 releases each."""
STEADY_CYCLES = 3
PAGE_REQUESTS = 6
PAGE_PATHS = ("/", "/api/targets")


def nvidia_feed() -> bytes:
    feed = {}
    for branch in BRANCHES:
        info = [
            {
                "release_version": f"{branch}.{200 - n}.01",
                "release_date": "",
                "release_notes": "https://docs.nvidia.com/x",
                "architectures": ["x86_64"],
                "runfile_url": {
                    "x86_64": f"https://us.download.nvidia.com/tesla/{branch}.{200 - n}.01/x.run"
                },
            }
            for n in range(DRIVERS)
        ]
        feed[branch] = {"type": "production branch", "driver_info": info}
    return json.dumps(feed).encode()


def tags_for(size: int) -> list[str]:
    branches, keep = SHAPES[size]
    return [
        f"{branch}.{200 - d}.01-flatcar5000.2.{r}"
        for branch in branches
        for d in range(keep)
        for r in range(RELEASES)
    ]


def seed_registry(registry: RunningRegistry, path: str, tags: list[str]) -> None:
    """One real image pushed, then its manifest PUT under every other tag."""
    registry.push_image(path, tags[0], arch="amd64")
    with httpx.Client(base_url=registry.base_url, timeout=60) as client:
        answer = client.get(f"/v2/{path}/manifests/{tags[0]}", headers={"Accept": OCI_MANIFEST})
        answer.raise_for_status()
        body = answer.content

        def put(tag: str) -> None:
            client.put(
                f"/v2/{path}/manifests/{tag}", content=body, headers={"Content-Type": OCI_MANIFEST}
            ).raise_for_status()

        with ThreadPoolExecutor(8) as pool:
            list(pool.map(put, tags[1:]))


class PatientWatcher(Watcher):
    """``bench_run``'s watcher, waiting out a process too busy to answer ``/metrics`` within
    its 2 s (a long cycle holds the interpreter)."""

    def scrape(self) -> tuple[float, float, float, float]:
        for _ in range(30):
            try:
                return super().scrape()
            except AssertionError:  # no answer from /metrics yet
                time.sleep(1)
        return super().scrape()


@dataclass
class Cost:
    cpu: float
    wall: float
    rss: float | None = None
    note: str = ""


@contextmanager
def installed(venv: Path, *, dev: bool) -> Iterator[list[str]]:
    """The command that starts releasebot as users run it: installed as the image installs
    it (``uv sync --no-dev --no-editable``, bytecode compiled), so that start-up costs what
    it costs in the image, not what a development environment's extra packages (import-linter
    pulls in rich and click, which ``import httpx`` then loads) and a cold bytecode cache
    add. ``dev``: this interpreter as it is."""
    if dev:
        print(f"releasebot runs from this environment ({sys.executable}), as it is")
        yield [sys.executable, "-m", "releasebot"]
        return
    uv = shutil.which("uv")
    if uv is None:
        raise RuntimeError("uv is missing (pip install uv): it installs releasebot for the run")
    env = {**os.environ, "UV_PROJECT_ENVIRONMENT": str(venv)}
    started = time.perf_counter()
    subprocess.run(
        [
            uv,
            "sync",
            "--frozen",
            "--no-dev",
            "--no-editable",
            "--compile-bytecode",
            "--quiet",
            "--reinstall-package",
            "releasebot",
            "--refresh-package",
            "releasebot",
        ],
        cwd=REPO,
        env=env,
        check=True,
    )
    print(
        f"releasebot installed as the image installs it (no dev packages, bytecode compiled) "
        f"in {time.perf_counter() - started:.0f} s"
    )
    # -I: the installed package, never ./releasebot from the working directory.
    yield [str(venv / "bin" / "python"), "-I", "-m", "releasebot"]


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def one_shot(argv: Sequence[str], env: dict[str, str], out: Path) -> Cost:
    """Run one command to its end; its own CPU, wall and peak RSS (``wait4``)."""
    with out.open("wb") as stdout, (out.with_suffix(".err")).open("wb") as stderr:
        started = time.perf_counter()
        process = subprocess.Popen(argv, stdout=stdout, stderr=stderr, env=env, cwd=REPO)
        _, status, usage = os.wait4(process.pid, 0)
        wall = time.perf_counter() - started
    code = os.waitstatus_to_exitcode(status)
    process.returncode = code
    if code != 0:
        tail = out.with_suffix(".err").read_text(errors="replace")[-1500:]
        raise RuntimeError(f"{' '.join(argv[:6])} exited {code}:\n{tail}")
    return Cost(usage.ru_utime + usage.ru_stime, wall, usage.ru_maxrss / 1024)


def peer(registry: RunningRegistry, path: str, tags: list[str], limit: int, work: Path) -> Cost:
    """The per-tag ``curl -I`` loop, over at most ``limit`` tags, scaled to all of them."""
    asked = tags[:limit]
    listing = work / "peer-tags.txt"
    listing.write_text("\n".join(asked) + "\n")
    script = (
        'while IFS= read -r tag; do curl -sS -o /dev/null -I -H "Accept: $2" "$1$tag" || exit 1; '
        'done < "$3"'
    )
    base = f"{registry.base_url}/v2/{path}/manifests/"
    before = children_cpu()
    started = time.perf_counter()
    subprocess.run(["sh", "-c", script, "peer", base, OCI_MANIFEST, str(listing)], check=True)
    wall = time.perf_counter() - started
    cpu = children_cpu() - before
    scale = len(tags) / len(asked)
    note = "" if scale == 1 else f"measured over {len(asked)} tags, scaled x{scale:g}"
    return Cost(cpu * scale, wall * scale, None, note)


def listing(registry: RunningRegistry, path: str, tags: int) -> Cost:
    """One paginated tag listing: ``skopeo list-tags`` when installed, else our own GETs."""
    skopeo = shutil.which("skopeo")
    reference = f"docker://{registry.base_url.split('://', 1)[1]}/{path}"
    if skopeo is not None:
        before = children_cpu()
        started = time.perf_counter()
        done = subprocess.run(
            [skopeo, "list-tags", "--tls-verify=false", reference],
            check=True,
            capture_output=True,
        )
        wall = time.perf_counter() - started
        listed = len(json.loads(done.stdout)["Tags"])
        if listed != tags:
            raise RuntimeError(f"skopeo listed {listed} tags, expected {tags}")
        return Cost(children_cpu() - before, wall, None, "skopeo list-tags")
    # Without skopeo: the same walk by hand (n=1000 pages, Link headers), in this process.
    started, cpu = time.perf_counter(), time.process_time()
    count, url = 0, f"{registry.base_url}/v2/{path}/tags/list?n=1000"
    with httpx.Client(timeout=60) as client:
        while url:
            answer = client.get(url)
            count += len(answer.json()["tags"] or [])
            link = answer.headers.get("link", "")
            url = registry.base_url + link.split(";")[0].strip("<> ") if link else ""
    return Cost(time.process_time() - cpu, time.perf_counter() - started, None, "httpx pages")


def page_304(bot: ReleasebotProcess, watcher: Watcher, interval: float) -> Cost:
    """The server's CPU per conditional request that matched (curl, If-None-Match)."""
    etags = {}
    for path in PAGE_PATHS:
        answer = httpx.get(bot.url + path, timeout=30)
        etags[path] = answer.headers.get("etag")
        if answer.status_code != 200 or etags[path] is None:
            raise RuntimeError(f"{path}: {answer.status_code}, no ETag")
    curl = shutil.which("curl") or "curl"
    for _ in range(3):
        watcher.next_cycle(timeout=interval * 4)  # right after a cycle: none runs meanwhile
        first = watcher.scrape()
        started = time.perf_counter()
        codes = []
        for number in range(PAGE_REQUESTS):
            path = PAGE_PATHS[number % len(PAGE_PATHS)]
            done = subprocess.run(
                [
                    curl,
                    "-s",
                    "-o",
                    "/dev/null",
                    "-w",
                    "%{http_code}",
                    "-H",
                    f"If-None-Match: {etags[path]}",
                    bot.url + path,
                ],
                capture_output=True,
                check=True,
            )
            codes.append(done.stdout.decode())
        wall = time.perf_counter() - started
        cpu = cpu_seconds(bot.pid) - first[1]
        last = watcher.scrape()
        if last[2] != first[2]:
            continue  # a cycle ran meanwhile: measure again
        if set(codes) != {"304"}:
            raise RuntimeError(f"conditional requests answered {sorted(set(codes))}, not 304")
        # Two /metrics scrapes are inside the window too; they are cheap and counted.
        return Cost(cpu / PAGE_REQUESTS, wall / PAGE_REQUESTS)
    return Cost(float("nan"), float("nan"), None, "a cycle ran during every measurement")


def vm_rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for {pid}")


def measure_size(
    size: int,
    *,
    registry: RunningRegistry,
    feeds: FeedServer,
    api: FakeKubeApi,
    work: Path,
    peer_max: int,
    releasebot_command: Sequence[str],
) -> dict[str, Cost]:
    path = f"bench/driver-{size}"
    tags = tags_for(size)
    started = time.perf_counter()
    seed_registry(registry, path, tags)
    print(
        f"[{size}] registry seeded with {len(tags)} tags in {time.perf_counter() - started:.0f} s"
    )
    branches, keep = SHAPES[size]
    directory = work / str(size)
    directory.mkdir()
    port = free_port()
    interval = max(5, size // 1000)
    config = write_config(
        directory / "releasebot.toml",
        database_url=f"sqlite:///{directory / 'state.db'}",
        flatcar_url=feeds.url("/releases-{channel}.json"),
        nvidia_url=feeds.url("/nvidia.json"),
        repository=registry.repository(path),
        kubeconfig=api.write_kubeconfig(directory / "kubeconfig"),
        namespace=api.namespace,
        port=port,
        interval=interval,
        channels=("stable",),
        keep=RELEASES,
        branches=branches,
        leader_election="none",
    )
    text = config.read_text().replace("[nvidia]\n", f"[nvidia]\nkeep = {keep}\n", 1)
    config.write_text(text)
    env = {"RELEASEBOT_RUN_IDENTITY": "bench"}
    costs: dict[str, Cost] = {}
    with ReleasebotProcess(
        ["run", "--config", str(config)],
        directory / "run.log",
        port=port,
        env=env,
        command=releasebot_command,
    ) as bot:
        bot.wait_serving(timeout=120)
        watcher = PatientWatcher(bot)

        def settled() -> bool:
            samples = bot.metrics()
            required = sum(v for (name, _), v in samples.items() if name == "releasebot_targets")
            unpublished = samples.get(("releasebot_required_tags_unpublished", ()))
            return required == size and unpublished == 0

        try:
            wait_for(settled, timeout=max(120, size / 50), every=1, what="every target published")
        except AssertionError as error:
            lines = [line for line in bot.output().splitlines() if '"action"' not in line]
            raise RuntimeError("\n".join([str(error), *lines[-30:]])) from None
        watcher.next_cycle(timeout=interval * 4)
        idle = None
        for _ in range(3):
            watcher.next_cycle(timeout=interval * 4)
            idle = watcher.idle_rate(interval * 0.5)
            if idle is not None:
                break
        idle = idle or 0.0
        cycles = []
        for _ in range(STEADY_CYCLES):
            wall, cpu, window = watcher.next_cycle(timeout=interval * 4)
            cycles.append((max(0.0, cpu - idle * window), wall))
        rss = vm_rss_mib(bot.pid)
        cpu = statistics.median(c for c, _ in cycles)
        wall = statistics.median(w for _, w in cycles)
        costs["run: steady cycle"] = Cost(
            cpu, wall, rss, f"VmHWM {peak_rss_mib(bot.pid):.0f} MiB; idle {idle * 1000:.1f} ms/s"
        )
        costs["page: 304"] = page_304(bot, watcher, interval)
        failed = bot.metric("releasebot_cycles_total", outcome="failed") or 0
        if failed:
            raise RuntimeError(f"{failed:.0f} cycles failed:\n{bot.output()[-2000:]}")
        bot.terminate(timeout=60)
    command = list(releasebot_command)
    clean = {k: v for k, v in os.environ.items() if not k.startswith("RELEASEBOT_")}
    for name, argv in (
        ("reconcile --once", ["reconcile", "--once"]),
        ("reconcile --once --dry-run", ["reconcile", "--once", "--dry-run"]),
        ("plan --format json", ["plan", "--quiet", "--format", "json"]),
    ):
        out = directory / (name.replace(" ", "_").replace("-", "") + ".out")
        costs[name] = one_shot([*command, *argv, "--config", str(config)], clean, out)
    costs["peer: curl -I per tag"] = peer(registry, path, tags, peer_max, directory)
    costs["floor: one tag listing"] = listing(registry, path, len(tags))
    return costs


def report(size: int, costs: dict[str, Cost]) -> None:
    peer_cpu = costs["peer: curl -I per tag"].cpu
    floor_cpu = costs["floor: one tag listing"].cpu
    print(f"\n{size} targets")
    print(
        f"{'mode':<28} {'cpu s':>8} {'wall s':>8} {'rss MiB':>8} {'peer/x':>8} "
        f"{'x/listing':>9}  note"
    )
    for name, cost in costs.items():
        rss = "" if cost.rss is None else f"{cost.rss:.0f}"
        ratio = f"{peer_cpu / cost.cpu:.0f}" if cost.cpu > 0 else "inf"
        if cost.cpu != cost.cpu:  # NaN: not measured
            ratio = "-"
        listings = f"{cost.cpu / floor_cpu:.2f}" if floor_cpu > 0 else "-"
        print(
            f"{name:<28} {cost.cpu:8.3f} {cost.wall:8.3f} {rss:>8} {ratio:>8} {listings:>9}  "
            f"{cost.note}"
        )


def targets(results: dict[int, dict[str, Cost]]) -> None:
    print("\ntargets (reported, not failed)")

    def line(what: str, ok: bool, value: str) -> None:
        print(f"  {what:<58} {value:>18}  {'ok' if ok else 'MISSED'}")

    if 10000 in results:
        at = results[10000]
        peer_cpu = at["peer: curl -I per tag"].cpu
        for name, want in (
            ("run: steady cycle", 100),
            ("reconcile --once", 50),
            ("plan --format json", 50),
        ):
            ratio = peer_cpu / max(at[name].cpu, 1e-9)
            line(
                f"10,000: {name} >= {want}x less CPU than the peer", ratio >= want, f"{ratio:.0f}x"
            )
        steady = at["run: steady cycle"]
        floor = at["floor: one tag listing"].cpu
        line(
            "10,000: steady cycle within 3 listings",
            steady.cpu <= 3 * floor,
            f"{steady.cpu / floor:.2f}",
        )
        assert steady.rss is not None
        line("10,000: steady RSS <= 100 MB", steady.rss * 1.048576 <= 100, f"{steady.rss:.0f} MiB")
    if 1000 in results and 30000 in results:
        small = results[1000]["run: steady cycle"].cpu
        large = results[30000]["run: steady cycle"].cpu
        ratio = large / max(small, 1e-9)
        line("steady cycle CPU at 30,000 <= 2x that at 1,000", ratio <= 2, f"{ratio:.2f}x")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--short", action="store_true", help="1,000 targets only, for CI")
    parser.add_argument("--sizes", default="1000,10000,30000", help="of 1000, 10000, 30000")
    parser.add_argument(
        "--peer-max", type=int, default=1000, help="curl -I at most this many tags, then scale"
    )
    parser.add_argument(
        "--dev-venv",
        action="store_true",
        help="run releasebot from this (development) environment instead of an installed one",
    )
    args = parser.parse_args()
    sizes = [1000] if args.short else [int(s) for s in args.sizes.split(",")]
    unknown = [s for s in sizes if s not in SHAPES]
    if unknown:
        print(f"FAILED: sizes must be among {sorted(SHAPES)}: {unknown}")
        return 2
    if shutil.which("curl") is None:
        print("FAILED: curl is missing (apt-get install curl): the peer is a curl loop")
        return 1
    results: dict[int, dict[str, Cost]] = {}
    with (
        tempfile.TemporaryDirectory(prefix="bench-scale-") as temporary,
        installed(Path(temporary) / "venv", dev=args.dev_venv) as command,
        run_registry(Path(temporary) / "registry") as registry,
        FeedServer() as feeds,
        FakeKubeApi(namespace="builds") as api,
    ):
        feeds.route("/releases-stable.json", FeedServer.static(flatcar_feed(), etag='"stable"'))
        feeds.route("/nvidia.json", FeedServer.static(nvidia_feed(), etag='"nvidia"'))
        for size in sizes:
            results[size] = measure_size(
                size,
                registry=registry,
                feeds=feeds,
                api=api,
                work=Path(temporary),
                peer_max=args.peer_max,
                releasebot_command=command,
            )
            report(size, results[size])
    targets(results)
    print(
        "(process CPU from /proc has a resolution of 10 ms; peer/x: the peer's CPU over the mode's)"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
