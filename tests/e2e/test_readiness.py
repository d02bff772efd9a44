"""The readiness gate in the build loop: a target waits for its inputs, then builds.

Real registry, fake Kubernetes API, SQLite, and a local HTTP server standing in for Flatcar's
release server and NVIDIA's download server. Covers: waiting (not failed) while an artefact
is missing, the compiler major read from the kernel config reaching the build args, the
transition waiting -> building -> published once the artefacts appear, and a runfile that
stays missing becoming a permanent failure.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta

import httpx
import pytest

from releasebot.domain.shared.versions import Arch
from releasebot.domain.targets.models import TargetState
from releasebot.service.reconcile import ReconcileOptions
from releasebot.sources.artifacts import FLATCAR_FILES, HttpArtifactSource
from tests.e2e.test_reconcile import OLD, Rig, _rig, feeds  # noqa: F401 - a fixture
from tests.support.feedserver import FeedServer, Reply
from tests.support.targets import make_target

KERNEL_CONFIG = (
    'CONFIG_CC_VERSION_TEXT="gcc (Gentoo 14.2.1_p20241221 p7) 14.2.1"\nCONFIG_GCC_VERSION=140201\n'
)


@pytest.fixture
def rig(request: pytest.FixtureRequest) -> Iterator[Rig]:
    yield from _rig(request, frozenset({Arch.AMD64}))


@pytest.fixture
def upstream() -> Iterator[FeedServer]:
    with FeedServer() as server:
        yield server


def publish_inputs(server: FeedServer, flatcar: str, driver: str) -> None:
    for name in FLATCAR_FILES:
        body = KERNEL_CONFIG.encode() if name.endswith("config.txt") else b"x"
        for suffix, content in (("", body), (".DIGESTS", b"d"), (".DIGESTS.asc", b"s")):
            server.route(f"/stable/amd64-usr/{flatcar}/{name}{suffix}", Reply(200, {}, content))
    runfile = f"/nvidia/{driver}/NVIDIA-Linux-x86_64-{driver}.run"
    server.route(runfile, Reply(200, {}, b"#!/bin/sh\n"))


def gated(rig: Rig, upstream: FeedServer, client: httpx.Client) -> None:
    source = HttpArtifactSource(
        client,
        flatcar_base_url=upstream.url("/{channel}"),
        nvidia_base_url=upstream.url("/nvidia"),
    )
    rig.overrides["artifacts"] = source


def test_a_target_waits_for_its_inputs_then_builds_and_publishes(
    rig: Rig, upstream: FeedServer
) -> None:
    tag = OLD[0]  # 580.178.04-flatcar4593.2.4
    with httpx.Client(timeout=5) as client:
        gated(rig, upstream, client)
        rig.options = ReconcileOptions(
            waiting_recheck=timedelta(minutes=30), recipe_args=(("RECIPE_REVISION", "7"),)
        )
        report = rig.cycle()
        record = rig.target(tag)
        assert record.state is TargetState.WAITING
        assert "flatcar-container.tar.gz" in (record.last_error or "")
        assert rig.kaniko.job_names() == []
        assert ("waiting", tag) in [(d.action, d.tag) for d in report.decisions]

        publish_inputs(upstream, "4593.2.4", "580.178.04")
        rig.cycle()
        assert rig.target(tag).state is TargetState.WAITING  # not due before the recheck
        rig.clock.advance(timedelta(minutes=31))
        rig.cycle()
        assert rig.target(tag).state is TargetState.BUILDING
        [job] = [j for j in rig.kaniko.job_names() if j.startswith("rb-580-178-04-flatcar4593-2-4")]
        args = rig.kaniko.api.job(job)["spec"]["template"]["spec"]["containers"][0]["args"]
        assert "--build-arg=GCC_MAJOR=14" in args
        assert "--build-arg=RECIPE_REVISION=7" in args

        rig.kaniko.build(job)
        rig.cycle()
        assert rig.target(tag).state is TargetState.PUBLISHED


def test_a_runfile_that_stays_missing_is_permanent(rig: Rig, upstream: FeedServer) -> None:
    tag = OLD[0]
    with httpx.Client(timeout=5) as client:
        gated(rig, upstream, client)
        publish_inputs(upstream, "4593.2.4", "580.178.04")
        upstream.route("/nvidia/580.178.04/NVIDIA-Linux-x86_64-580.178.04.run", Reply(404, {}, b""))
        rig.options = ReconcileOptions(runfile_grace=timedelta(days=3))
        rig.cycle()
        assert rig.target(tag).state is TargetState.WAITING
        rig.clock.advance(timedelta(days=3, minutes=1))
        rig.cycle()
        record = rig.target(tag)
        assert record.state is TargetState.FAILED
        assert "runfile still missing" in (record.last_error or "")


def test_gcc_major_comes_from_the_kernel_config(upstream: FeedServer) -> None:
    publish_inputs(upstream, "4593.2.5", "580.178.04")
    target = make_target()
    with httpx.Client(timeout=5) as client:
        source = HttpArtifactSource(
            client,
            flatcar_base_url=upstream.url("/{channel}"),
            nvidia_base_url=upstream.url("/nvidia"),
        )
        answer = source.readiness(target, Arch.AMD64)
        assert answer.ready
        assert answer.build_args == (("GCC_MAJOR", "14"),)
        missing = source.readiness(target, Arch.ARM64)
    assert not missing.ready
    assert missing.runfile_missing
    assert any("arm64-usr/4593.2.5/flatcar-container.tar.gz" in url for url in missing.missing)
