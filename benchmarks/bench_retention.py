"""Benchmark: retention's decision over a big repository and a 5,000-node fleet.

Pure parts only (``domain.fleet.retention``): the repository holds ``drivers`` x ``versions``
tags of releasebot's shape plus a per-arch tag each for a third of them, cosign
attachment tags and a few foreign tags; the store's feed history lists every version in
two feeds (the newest tenth still listed, the rest dropped over the past three years);
5,000 GPU nodes (parsed from ``tests/data/fleet/nodes.json`` clones) run the newest
versions, a twentieth about to reboot; the store's fleet history holds a record per node.
Every image reaches what signing attaches (a signature, an attestation, the referrers
tag's index and its SBOM and provenance). Prints wall and CPU time of ``plan_retention``
and ``guard_shared_digests`` (the protected set: everything a kept tag reaches), the
candidates and keeps, and the registry requests a run makes before deleting (one
``tags/list`` page per 1,000 tags, one manifest HEAD per non-attachment tag, and for what
the tags reach, each manifest once: a GET, three HEADs, a referrers GET).

    uv run python benchmarks/bench_retention.py [--short]
"""

from __future__ import annotations

import argparse
import copy
import hashlib
import json
import resource
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from releasebot.domain.fleet.nodes import (  # noqa: E402
    FLUO_NEW_VERSION,
    GPU_PRESENT,
    NFD_OS_ID,
    NFD_VERSION_ID,
    parse_node,
)
from releasebot.domain.fleet.records import FleetObservation, FleetRecord  # noqa: E402
from releasebot.domain.fleet.retention import (  # noqa: E402
    Listing,
    RetentionInputs,
    guard_shared_digests,
    plan_retention,
)
from releasebot.service.retention import ATTACHMENT_PREFIX  # noqa: E402

NOW = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)
ATTACHED = (".sig", ".att", "-referrers", "-sbom", "-provenance")
"""What signing attaches to each image: five more manifests it reaches."""
REQUESTS_PER_MANIFEST = 5
"""``OrasJanitor.reachable`` per manifest: GET (an index?), HEAD .sig, .att and the
referrers tag, GET referrers; asked of every manifest even where the registry answered
once that it has no referrers API, since a registry that says so for one digest and
lists referrers for another must not hide what a kept tag reaches. Measured on Debian's
distribution 2.8: 20 signed images reach 120 manifests in 600 requests."""
TEMPLATE = REPO / "tests" / "data" / "fleet" / "nodes.json"


def cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def digest(text: str) -> str:
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--short", action="store_true", help="a small repository (CI)")
    args = parser.parse_args()
    drivers, versions, node_count = (10, 50, 500) if args.short else (40, 500, 5000)
    flatcar = [f"{3000 + n}.2.{n % 7}" for n in range(versions)]
    tags = [f"580.{d}.01-flatcar{v}" for d in range(drivers) for v in flatcar]
    tags += [f"{t}-amd64" for t in tags[::3]]
    tags += [f"{ATTACHMENT_PREFIX}{digest(t)[7:]}.sig" for t in tags[::2]]
    tags += ["latest", "nightly", "cache"]
    listings = []
    for number, version in enumerate(flatcar):
        current = number >= versions * 9 // 10
        at = NOW - timedelta(days=3 * 365 * (versions - number) // versions)
        listings += [Listing(feed, version, current, at) for feed in ("stable", "lts")]
    template = next(
        node
        for node in json.loads(TEMPLATE.read_text())
        if node["metadata"]["labels"].get(GPU_PRESENT) == "true"
        and node["metadata"]["labels"].get(NFD_OS_ID) == "flatcar"
    )
    nodes = []
    for number in range(node_count):
        raw = copy.deepcopy(template)
        raw["metadata"]["name"] = f"gpu-{number:05d}"
        raw["metadata"]["labels"][NFD_VERSION_ID] = flatcar[-1 - number % 5]
        pending = flatcar[-1] if number % 20 == 0 else "0.0.0"
        raw["metadata"].setdefault("annotations", {})[FLUO_NEW_VERSION] = pending
        nodes.append(parse_node(raw))
    history = [
        FleetRecord(
            FleetObservation(f"gpu-{n:05d}", flatcar[-1 - n % 5], None, "amd64", True, None, None),
            NOW - timedelta(days=400),
            NOW,
        )
        for n in range(node_count)
    ]
    inputs = RetentionInputs(tags, nodes, listings, (), history)

    wall, started = time.perf_counter(), cpu()
    plan = plan_retention(inputs, now=NOW, max_deletions=1000)
    plan_wall, plan_cpu = time.perf_counter() - wall, cpu() - started
    digests = {t: digest(t) for t in tags if not t.startswith(ATTACHMENT_PREFIX)}
    reaches = {
        d: frozenset({d, *(digest(f"{d}{what}") for what in ATTACHED)}) for d in digests.values()
    }
    wall, started = time.perf_counter(), cpu()
    guarded = guard_shared_digests(plan, digests, reaches)
    guard_wall, guard_cpu = time.perf_counter() - wall, cpu() - started
    print(f"repository: {len(tags)} tags, fleet: {node_count} GPU nodes, {len(listings)} listings")
    print(f"plan_retention: {plan_wall * 1000:.1f} ms wall, {plan_cpu * 1000:.1f} ms CPU")
    print(f"guard_shared_digests: {guard_wall * 1000:.1f} ms wall, {guard_cpu * 1000:.1f} ms CPU")
    print(
        f"candidates {len(guarded.delete)} (limit 1000), kept {len(guarded.keep)}, "
        f"foreign {guarded.foreign}"
    )
    pages = -(-len(tags) // 1000)
    reached = set().union(*reaches.values())
    print(
        f"registry requests before deleting: {pages} tag page(s) + {len(digests)} HEADs + "
        f"{len(reached) * REQUESTS_PER_MANIFEST} for the {len(reached)} manifests the tags reach"
    )
    print(f"protected digests: {len(guarded.protected)}")
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"peak RSS: {rss:.0f} MiB")
    if not guarded.delete or guarded.held is not None:
        raise SystemExit("the benchmark's repository should have candidates")


if __name__ == "__main__":
    main()
