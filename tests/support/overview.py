"""A real store seeded for the coverage page, and the page served on it over real HTTP.

``seed_overview`` writes, through the store's own methods, the project's stable feed
(4593.2.5 and 4593.2.4 among others), a failing NVIDIA feed whose error is hostile text,
four targets (580.178.04 and 570.195.03 on 4593.2.5: published; on 4593.2.4: failed with a
hostile log tail, and building; 580.178.04 is the fleet's driver, 570.195.03 only the
channel policy's: ``planned_targets``) and a fleet of two GPU nodes on 4593.2.5 and an
Ubuntu GPU node ignored.
``PageServer`` serves ``wiring.web.overview_app`` for that store on a loopback port.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta
from pathlib import Path

from releasebot.config import Settings
from releasebot.domain.fleet.nodes import parse_node
from releasebot.domain.ports import StateStore
from releasebot.domain.shared.versions import Arch
from releasebot.domain.targets.builds import BuildRecord, BuildState, FailureReason, job_name
from releasebot.domain.targets.models import (
    Target,
    TargetReason,
    TargetRecord,
    TargetState,
    Validators,
)
from releasebot.sources.flatcar import parse_flatcar_feed
from releasebot.web.server import HttpServer
from releasebot.wiring.web import overview_app
from tests.support.fleetnodes import gpu_node, ubuntu_gpu_node
from tests.support.targets import make_target

REPO = Path(__file__).resolve().parents[2]
HOSTILE = "<img src=x onerror=\"document.title='owned'\">\x1b[31m<script>alert(1)</script>"
"""Text a feed, a registry or a build log could carry: markup and a terminal escape."""
COVERED_TAGS = ("580.178.04-flatcar4593.2.5", "570.195.03-flatcar4593.2.5")
FAILED_TAG = "580.178.04-flatcar4593.2.4"
BUILDING_TAG = "570.195.03-flatcar4593.2.4"


def seed_overview(store: StateStore, now: datetime) -> None:
    body = (REPO / "tests/data/flatcar/releases-stable.json").read_bytes()
    releases = parse_flatcar_feed("flatcar/stable", body)
    store.record_flatcar_feed(
        "flatcar/stable", "https://example.test/stable.json", releases, Validators(), now
    )
    store.record_feed_failure("nvidia", "https://example.test/nvidia.json", HOSTILE, now)
    records = {record.tag: record for record in store.sync_targets(planned_targets(), now)}
    builds: list[BuildRecord] = []
    changed: list[TargetRecord] = []
    for tag in COVERED_TAGS:
        digest = "sha256:" + "ab" * 32
        changed.append(
            replace(
                records[tag],
                state=TargetState.PUBLISHED,
                digest=digest,
                attempts=1,
                published_at=now - timedelta(hours=3),
            )
        )
        builds.append(_build(tag, 1, BuildState.SUCCEEDED, now, digest=digest))
    changed.append(
        replace(records[FAILED_TAG], state=TargetState.FAILED, attempts=1, last_error=HOSTILE)
    )
    builds.append(
        _build(
            FAILED_TAG,
            1,
            BuildState.FAILED,
            now,
            reason=FailureReason.EXIT_CODE,
            message="exit 2",
            log_tail="make: *** [modules] Error 2\n" + HOSTILE,
        )
    )
    changed.append(replace(records[BUILDING_TAG], state=TargetState.BUILDING, attempts=1))
    builds.append(_build(BUILDING_TAG, 1, BuildState.RUNNING, now))
    store.save(targets=changed, builds=builds)
    nodes = [gpu_node("gpu-a", "4593.2.5"), gpu_node("gpu-b", "4593.2.5"), ubuntu_gpu_node("gpu-u")]
    store.record_fleet([parse_node(node) for node in nodes], now)


FLEET_DRIVER = "580.178.04"
"""The driver the GPU Operator gives the nodes; 570.195.03 is only the channel policy's."""


def planned_targets(*extra: Target) -> list[Target]:
    """The seeded plan (and ``extra``): 580.178.04 for the fleet and the channel policy,
    570.195.03 for the channel policy only."""
    return [
        replace(
            make_target(driver=driver, flatcar=flatcar),
            reasons=frozenset({TargetReason.FLEET, TargetReason.CHANNEL})
            if driver == FLEET_DRIVER
            else frozenset({TargetReason.CHANNEL}),
        )
        for flatcar in ("4593.2.5", "4593.2.4")
        for driver in (FLEET_DRIVER, "570.195.03")
    ] + list(extra)


def set_state(store: StateStore, tag: str, state: TargetState) -> None:
    """Move one target to ``state`` (the registry lost the tag: ``missing``)."""
    record = store.target(tag)
    assert record is not None
    store.save(targets=[replace(record, state=state)])


def _build(
    tag: str, attempt: int, state: BuildState, now: datetime, **fields: object
) -> BuildRecord:
    return BuildRecord(
        tag=tag,
        arch=Arch.AMD64,
        attempt=attempt,
        job_name=job_name(tag, Arch.AMD64, attempt),
        destination_tag=tag,
        state=state,
        created_at=now - timedelta(minutes=30),
        **fields,
    )


class PageServer:
    """The page and API of ``store`` on 127.0.0.1, on a free port."""

    def __init__(self, store: StateStore, settings: Settings | None = None) -> None:
        self.server = HttpServer("127.0.0.1", 0, pages=overview_app(settings or Settings(), store))

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.port}"

    def __enter__(self) -> PageServer:
        self.server.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self.server.close()
