"""Benchmark: the bounded JSON reader (``edge.json.decode_json``) against plain ``json.loads``.

Every answer from outside goes through ``decode_json``, which checks the nesting depth (a
pass over the text in ``re``/``str`` C code) and every integer's digits (a ``parse_int``
hook) before and while ``json`` decodes. This prints what that costs on bodies shaped like
releasebot's real ones: a Flatcar feed (the beta channel is ~1.1 MB; the real copy from
../shared/data when present, else a synthetic one of that size), an NVIDIA feed, and a
page of 500 Kubernetes Nodes (~10 MB, the fleet's page size): milliseconds per call and
per MB for both, and the overhead as a ratio. It fails if a document is refused.

    uv run python benchmarks/bench_json.py [--short]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

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
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
