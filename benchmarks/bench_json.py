"""Benchmark: the bounded JSON reader (``edge.json.decode_json``) against plain ``json.loads``.

Every answer from outside goes through ``decode_json``, which checks the nesting depth (a
pass over the text in ``re``/``str`` C code) and every integer's digits (a ``parse_int``
hook) before and while ``json`` decodes. This prints what that costs on bodies shaped like
releasebot's real ones: a Flatcar feed (the beta channel is ~1.1 MB; the real copy from
../shared/data when present, else a synthetic one of that size), an NVIDIA feed, and a
page of 500 Kubernetes Nodes (~10 MB, the fleet's page size): milliseconds per call and
per MB for both, and the overhead as a ratio. It fails if a document is refused.

Then the other direction, the CLI's JSON writer (``cli.tables.write_json``) against what
it replaced, ``json.dump(value, stdout, indent=2)``, on the JSON of 10,000 targets (1,000
with ``--short``) written to a stream that passes every write on to the system, as stdout
does under ``PYTHONUNBUFFERED=1`` (the image sets it): writes and milliseconds for both. It
fails if the two do not write the same bytes.

    uv run python benchmarks/bench_json.py [--short]
"""

from __future__ import annotations

import argparse
import io
import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from releasebot.cli.tables import write_json  # noqa: E402
from releasebot.edge.json import JsonLimits, decode_json  # noqa: E402

LIMITS = JsonLimits(max_bytes=64 * 1024 * 1024)


def flatcar_feed(releases: int) -> bytes:
    shared = REPO.parent / "shared" / "data" / "flatcar" / "releases-beta.json"
    if shared.is_file() and releases >= 1000:
        return shared.read_bytes()
    entry = {
        "channel": "beta",
        "architectures": ["amd64", "arm64"],
        "release_date": "2025-11-30 12:00:00 +0000",
        "major_software": {"kernel": ["6.12.102"], "docker": ["28.0.4"], "systemd": ["257"]},
        "release_notes": "## Security fixes\n- " + "x" * 600,
        "github_release": None,
    }
    return json.dumps({f"4593.{i // 10}.{i % 10}": entry for i in range(releases)}).encode()


def node_page(nodes: int) -> bytes:
    node = json.loads((REPO / "tests" / "data" / "fleet" / "nodes.json").read_text())
    items = node["items"] if isinstance(node, dict) else node
    page = [items[i % len(items)] for i in range(nodes)]
    return json.dumps({"kind": "NodeList", "apiVersion": "v1", "items": page}).encode()


def targets_json(count: int) -> list[dict[str, object]]:
    """What ``plan --format json`` prints for ``count`` targets (``cli.tables.target_json``)."""
    return [
        {
            "tag": f"580.{n % 100}.01-flatcar5000.2.{n // 100}",
            "driver_version": f"580.{n % 100}.01",
            "driver_branch": "580",
            "flatcar_version": f"5000.2.{n // 100}",
            "flatcar_channel": "stable",
            "kernel": f"6.12.{n // 100}",
            "kernel_release": f"6.12.{n // 100}-flatcar",
            "arches": ["amd64", "arm64"],
            "reasons": ["channel"],
            "state": "published",
            "next": "none",
            "digest": "sha256:" + f"{n:064x}",
            "attempts": 1,
            "last_error": None,
            "first_planned_at": "2026-08-13T15:48:35+00:00",
            "proven_at": None,
            "proven_node": None,
        }
        for n in range(count)
    ]


class SystemStream(io.TextIOWrapper):
    """A text stream on /dev/null that writes through at every write, and counts them."""

    def __init__(self) -> None:
        super().__init__(open(os.devnull, "wb", buffering=0), write_through=True)  # noqa: SIM115
        self.writes = 0

    def write(self, text: str) -> int:
        self.writes += 1
        return super().write(text)


def old_write(value: object, out: io.TextIOBase) -> None:
    json.dump(value, out, indent=2)
    out.write("\n")


def bench_writer(count: int, runs: int) -> str | None:
    """Prints the writer's line; returns a failure, if any."""
    value = targets_json(count)
    old, new = io.StringIO(), io.StringIO()
    old_write(value, old)
    write_json(value, new)
    if old.getvalue() != new.getvalue():
        return "write_json does not write the bytes json.dump wrote"
    print(f"\n{'writer':<26} {'targets':>8} {'writes':>8} {'ms':>8}")
    for name, write in (("json.dump(indent=2)", old_write), ("write_json", write_json)):
        with SystemStream() as stream:
            seconds = best_of(runs, lambda write=write, stream=stream: write(value, stream))  # type: ignore[misc]
            writes = stream.writes // runs
        print(f"{name:<26} {count:>8} {writes:>8} {seconds * 1e3:>8.1f}")
    return None


def best_of(runs: int, call: Callable[[], object]) -> float:
    best = float("inf")
    for _ in range(runs):
        started = time.perf_counter()
        call()
        best = min(best, time.perf_counter() - started)
    return best


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--short", action="store_true", help="smaller bodies, fewer runs (CI)")
    args = parser.parse_args()
    runs = 3 if args.short else 10
    bodies = {
        "flatcar feed": flatcar_feed(200 if args.short else 1600),
        "nvidia feed": (REPO / "tests" / "data" / "nvidia" / "releases.json").read_bytes(),
        "node page": node_page(50 if args.short else 500),
    }
    print(f"{'body':<14} {'MB':>7} {'json.loads ms':>14} {'decode_json ms':>15} "
          f"{'ms/MB':>7} {'ratio':>6}")  # fmt: skip
    for name, body in bodies.items():
        plain = best_of(runs, lambda body=body: json.loads(body))  # type: ignore[misc]
        bounded = best_of(runs, lambda body=body: decode_json(body, LIMITS))  # type: ignore[misc]
        megabytes = len(body) / 1e6
        print(
            f"{name:<14} {megabytes:>7.2f} {plain * 1e3:>14.2f} {bounded * 1e3:>15.2f} "
            f"{bounded * 1e3 / megabytes:>7.1f} {bounded / plain:>6.2f}"
        )
    failure = bench_writer(1000 if args.short else 10_000, runs)
    if failure is not None:
        print(f"FAILED: {failure}")
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
