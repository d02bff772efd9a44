"""Benchmark: what a cloud registry token costs releasebot (``registry.auth``).

Prints, over real HTTP on loopback:

- one token fetch: boto3 ``GetAuthorizationToken`` against moto's server (the first
  makes the boto3 client, kept after), and google-auth against a fake
  GCE metadata server (its first fetch also discovers the metadata server);
- the cost of a cached token per registry request (``CachedTokenCredentials.basic``);
- a tag listing of a REAL registry (Debian's docker-registry behind the token gate of
  ``tests/support/cloudtokens.py``) with an ECR token, against the same registry without
  auth: the requests each sends, and the time;
- token fetches per simulated day of a ``releasebot run`` asking every 5 minutes, for each
  cloud's token lifetime (on a test clock): how often the cloud's endpoint is called.

The run fails if a cached request fetches again, or a day takes more fetches than
``ceil(24 h / (lifetime - margin)) + 1``.

    uv run python benchmarks/bench_registry_auth.py [--short]
"""

from __future__ import annotations

import argparse
import logging
import math
import os
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from releasebot.registry.credentials import (  # noqa: E402
    REFRESH_MARGIN,
    CachedTokenCredentials,
    Token,
)
from releasebot.registry.ecr import ecr_fetcher  # noqa: E402
from releasebot.registry.oras import OrasRegistry  # noqa: E402
from tests.support.cloudtokens import TokenBook, ecr_emulator, gcp_metadata, token_gate  # noqa: E402
from tests.support.registryserver import run_registry  # noqa: E402


def timed(call: object, rounds: int) -> list[float]:
    samples = []
    for _ in range(rounds):
        start = time.perf_counter()
        call()  # type: ignore[operator]
        samples.append((time.perf_counter() - start) * 1000)
    return samples


def show(name: str, samples: list[float], unit: str = "ms") -> None:
    print(f"{name:58} median {statistics.median(samples):8.3f} {unit}  max {max(samples):8.3f}")


def simulated_day(lifetime: timedelta) -> int:
    clock = [datetime(2026, 1, 1, tzinfo=UTC)]
    fetches = [0]

    def fetch() -> Token:
        fetches[0] += 1
        return Token("u", f"p{fetches[0]}", clock[0] + lifetime)

    credentials = CachedTokenCredentials("sim", fetch, lambda: clock[0])
    end = clock[0] + timedelta(days=1)
    while clock[0] < end:
        credentials.basic()
        clock[0] += timedelta(minutes=5)
    return fetches[0]


def main() -> int:
    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # moto's request lines
    parser = argparse.ArgumentParser()
    parser.add_argument("--short", action="store_true", help="fewer rounds (CI)")
    rounds = 5 if parser.parse_args().short else 30
    failed = False

    with ecr_emulator() as aws:
        os.environ.update(aws.env())
        fetch = ecr_fetcher("127.0.0.1", "us-east-1", timedelta(seconds=10))
        show("ECR token, boto3 -> moto (first: the client)", timed(fetch, 1))
        show("ECR token, boto3 -> moto (then)", timed(fetch, rounds))

        with (
            tempfile.TemporaryDirectory() as work,
            run_registry(Path(work) / "registry") as registry,
        ):
            book = TokenBook()
            aws.book = book
            registry.push_image("bench/driver", "580.1-flatcar1.2.3")
            with token_gate(registry.base_url, book) as gate:
                credentials = CachedTokenCredentials("ecr", fetch, lambda: datetime.now(UTC))
                authed = OrasRegistry(
                    gate.repository("bench/driver"),
                    insecure=True,
                    retries=0,
                    credentials=credentials,
                )
                authed.tags()  # first: the 401 challenge and one fetch
                before = authed.request_count
                show(
                    "tag listing with an ECR token (cached), via the gate",
                    timed(authed.tags, rounds),
                )
                per_call = (authed.request_count - before) / rounds
                plain = OrasRegistry(registry.repository("bench/driver"), insecure=True, retries=0)
                show("tag listing without auth, same registry", timed(plain.tags, rounds))
                print(f"{'requests per cached listing (1 = no challenge again)':58} {per_call:g}")
                print(f"{'tokens fetched for all of that':58} {credentials.fetch_count}")
                if credentials.fetch_count != 1 or per_call != 1:
                    failed = True
                hits = timed(credentials.basic, rounds * 1000)
                show("cached token per request (basic())", [s * 1000 for s in hits], "us")

    with gcp_metadata() as metadata:
        os.environ.update(metadata.env())
        os.environ["CLOUDSDK_CONFIG"] = tempfile.mkdtemp()
        os.environ.pop("GOOGLE_APPLICATION_CREDENTIALS", None)
        from google.auth.compute_engine import _metadata

        _metadata._GCE_METADATA_HOST = metadata.host  # read once at import
        from releasebot.registry.gcp import gcp_fetcher

        google = gcp_fetcher(timedelta(seconds=10))
        show("GCP token, google-auth -> metadata server (first: discovery)", timed(google, 1))
        show("GCP token, google-auth -> metadata server (then)", timed(google, rounds))

    print()
    for cloud, lifetime in (
        ("ECR (12 h)", timedelta(hours=12)),
        ("ACR refresh token (3 h)", timedelta(hours=3)),
        ("Google access token (1 h)", timedelta(hours=1)),
    ):
        fetches = simulated_day(lifetime)
        bound = math.ceil(timedelta(days=1) / (lifetime - REFRESH_MARGIN)) + 1
        print(f"{'token fetches per day, ' + cloud:58} {fetches:4d}  (bound {bound})")
        failed |= fetches > bound
    if failed:
        print("FAILED: a cached token was fetched again, or a day took too many fetches")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
