"""Driver bases end to end: one base Job per driver and arch, then kernel Jobs FROM it.

Real: the state store (SQLite, and PostgreSQL), HTTP feeds on loopback (the project's own
small feeds: Flatcar stable 4593.2.5 and 4593.2.4, NVIDIA 580.178.04), the OCI registry
(Debian's docker-registry) and the Kubernetes API over HTTP (the fake API server). The
test plays Kaniko (``tests/support/builds.py``): a base Job pushes a few layers, a
per-release Job reads its base from the registry by the ``DRIVER_BASE`` digest and pushes
the base's layers plus one kernel layer.

Covers: two Flatcar releases of one driver launch exactly one base Job and two kernel Jobs
per arch; no kernel Job starts before its base is published (the targets wait, saying
for which base); the two published manifests list the same layer digests in the same
order but the last; a second cycle launches nothing; retention keeps the base (neither
deleted nor counted as a foreign tag); a base that fails for good is ONE outbox event and
no kernel Job, and a person's retry builds the base again; with a signing key, a base is
signed, with an SBOM and provenance that verify, before a kernel Job is built FROM it;
base Jobs take build slots (``max_concurrent_builds``) like any Job.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

import httpx
import pytest
from sqlalchemy import Engine

from releasebot.builders.kaniko import KanikoOptions
from releasebot.builders.kubernetes import KubernetesJobLauncher
from releasebot.domain.fleet.retention import BASE_KEPT, RetentionInputs, plan_retention
from releasebot.domain.shared.versions import Arch
from releasebot.domain.targets.base_tags import parse_base_tag
from releasebot.domain.targets.bases import BaseRules, BaseState
from releasebot.domain.targets.builds import FailureReason
from releasebot.domain.targets.events import EventKind
from releasebot.domain.targets.models import TargetState
from releasebot.domain.targets.policy import DriverPolicy, FlatcarPolicy, Policy
from releasebot.registry.artifacts import OrasArtifacts
from releasebot.registry.oras import OrasRegistry
from releasebot.service.plan import FeedSpec, PlanService
from releasebot.service.reconcile import CycleReport, ReconcileOptions, ReconcileService
from releasebot.signing import formats as oci
from releasebot.signing.attestor import RegistryAttestor
from releasebot.signing.documents import Builder
from releasebot.signing.keyfiles import KeyFiles
from releasebot.signing.keys import SigningKey, encrypt_key, generate_key
from releasebot.signing.verifier import SignatureVerifier
from releasebot.sources.fetch import HttpFeedFetcher
from releasebot.sources.flatcar import parse_flatcar_feed
from releasebot.sources.nvidia import parse_nvidia_feed
from releasebot.store import migrate
from releasebot.store.engine import make_engine
from releasebot.store.sql import SqlStateStore
from tests.support.builds import Clock, KanikoPlayer
from tests.support.feedserver import FeedServer
from tests.support.kubeapi import FakeKubeApi
from tests.support.layers import read_manifest
from tests.support.postgres import fresh_postgres_database
from tests.support.registryserver import RunningRegistry

CONTEXT = "git://git.example.test/gpu/recipes.git#refs/heads/main#" + "0123456789" * 4
RULES = BaseRules(revision="0123456789ab", build_args=(("RECIPE_REVISION", "0123456789ab"),))
TAGS = ("580.178.04-flatcar4593.2.5", "580.178.04-flatcar4593.2.4")
PASSWORD = b"s3cret"


@dataclass
class Rig:
    store: SqlStateStore
    service: ReconcileService
    registry: OrasRegistry
    kaniko: KanikoPlayer
    clock: Clock
    launcher: KubernetesJobLauncher
    path: str
    """The repository's path in the registry."""

    def cycle(self) -> CycleReport:
        self.clock.advance(timedelta(minutes=5))
        return self.service.cycle()

    def jobs(self) -> tuple[list[str], list[str]]:
        """(base Jobs, kernel Jobs)."""
        names = self.kaniko.job_names()
        bases = [name for name in names if self.kaniko.is_base(name)]
        return bases, [name for name in names if name not in bases]


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def engine(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Engine]:
    if request.param == "sqlite":
        engine = make_engine(f"sqlite:///{tmp_path / 'state.db'}")
        migrate.upgrade(engine)
        yield engine
        engine.dispose()
        return
    with fresh_postgres_database() as url:
        engine = make_engine(url.render_as_string(hide_password=False))
        migrate.upgrade(engine)
        yield engine
        engine.dispose()


def make_rig(
    engine: Engine,
    test_data: Path,
    plain_registry: RunningRegistry,
    registry_name: str,
    kube_api: FakeKubeApi,
    feeds: FeedServer,
    http: httpx.Client,
    arches: frozenset[Arch],
    key_file: Path | None = None,
    max_builds: int = 8,
) -> Rig:
    store = SqlStateStore(engine)
    stable = (test_data / "flatcar" / "releases-stable.json").read_bytes()
    feeds.route("/releases-stable.json", FeedServer.static(stable, etag='"s1"'))
    nvidia = (test_data / "nvidia" / "releases.json").read_bytes()
    feeds.route("/nvidia.json", FeedServer.static(nvidia, etag='"n1"'))
    repository = plain_registry.repository(registry_name)
    registry = OrasRegistry(repository, insecure=True, retries=0)
    options = KanikoOptions(
        namespace=kube_api.namespace,
        registry_repository=repository,
        registry_secret="registry-push",
        context=CONTEXT,
        insecure_registry=True,
    )
    launcher = KubernetesJobLauncher(kube_api.client(), options, sleep=lambda _delay: None)
    clock = Clock()
    planner = PlanService(
        store=store,
        fetcher=HttpFeedFetcher(http, retries=0),
        flatcar_feeds=[FeedSpec.flatcar("stable", feeds.url("/releases-stable.json"))],
        nvidia_feed=FeedSpec.nvidia(feeds.url("/nvidia.json")),
        parse_flatcar=parse_flatcar_feed,
        parse_nvidia=parse_nvidia_feed,
        policy=Policy(
            FlatcarPolicy(("stable",), arches, keep=2),
            DriverPolicy(frozenset({"580"}), frozenset(), keep=1),
        ),
        clock=clock,
    )
    service = ReconcileService(
        planner=planner,
        store=store,
        registry=registry,
        launcher=launcher,
        clock=clock,
        options=ReconcileOptions(max_concurrent_builds=max_builds, max_attempts=2),
        base_rules=RULES,
        attestor=None if key_file is None else attestor_for(registry, key_file),
    )
    return Rig(
        store,
        service,
        registry,
        KanikoPlayer(kube_api, plain_registry),
        clock,
        launcher,
        registry_name,
    )


def attestor_for(registry: OrasRegistry, key_file: Path) -> RegistryAttestor:
    return RegistryAttestor(
        OrasArtifacts(registry),
        keys=KeyFiles(str(key_file), password=PASSWORD).load,
        builder=Builder("0.1.0", "ghcr.io/osscontainertools/kaniko:v1.28.0"),
    )


@pytest.fixture
def feeds() -> Iterator[FeedServer]:
    with FeedServer() as server:
        yield server


def _rig(
    request: pytest.FixtureRequest,
    engine: Engine,
    arches: frozenset[Arch],
    key_file: Path | None = None,
    max_builds: int = 8,
) -> Iterator[Rig]:
    names = ("test_data", "plain_registry", "registry_name", "kube_api", "feeds")
    parts = [request.getfixturevalue(name) for name in names]
    with httpx.Client(timeout=5) as http:
        rig = make_rig(engine, *parts, http, arches, key_file, max_builds)
        try:
            yield rig
        finally:
            rig.registry.close()
            rig.launcher.close()


@pytest.fixture
def rig(request: pytest.FixtureRequest, engine: Engine) -> Iterator[Rig]:
    yield from _rig(request, engine, frozenset({Arch.AMD64}))


@pytest.fixture
def multi_rig(request: pytest.FixtureRequest, engine: Engine) -> Iterator[Rig]:
    yield from _rig(request, engine, frozenset({Arch.AMD64, Arch.ARM64}))


def layer_digests(rig: Rig, reference: str) -> list[str]:
    return [
        layer["digest"]
        for layer in read_manifest(rig.kaniko.registry, rig.path, reference)["layers"]
    ]


def test_two_releases_share_one_base_and_differ_only_in_the_kernel_layer(
    multi_rig: Rig,
) -> None:
    rig = multi_rig
    first = rig.cycle()
    bases, kernels = rig.jobs()
    assert len(bases) == 2
    assert kernels == []
    base_tags = {rig.kaniko.destination(job)[1]: rig.kaniko.destination(job)[2] for job in bases}
    assert sorted(base_tags.values()) == ["amd64", "arm64"]
    assert all(parse_base_tag(tag) is not None for tag in base_tags)
    for tag in TAGS:
        record = rig.store.target(tag)
        assert record is not None
        assert record.state is TargetState.WAITING
        assert record.last_error is not None
        assert record.last_error.startswith("waiting for driver base 580.178.04-base-")
    assert ("waiting", TAGS[0]) in [(d.action, d.tag) for d in first.decisions]

    rig.cycle()  # the base Jobs still run: nothing more starts
    assert rig.jobs() == (bases, [])

    base_digests = {job: rig.kaniko.build(job) for job in bases}
    rig.cycle()  # verifies the bases, then launches the kernel Jobs FROM them
    stored = {record.tag: record for record in rig.store.bases()}
    assert {record.state for record in stored.values()} == {BaseState.PUBLISHED}
    assert sorted(r.digest or "" for r in stored.values()) == sorted(base_digests.values())
    _, kernels = rig.jobs()
    assert len(kernels) == 4  # two releases x two arches
    for job in kernels:
        arch = rig.kaniko.destination(job)[2]
        [base_job] = [b for b in bases if rig.kaniko.destination(b)[2] == arch]
        expected = f"{rig.registry.repository}@{base_digests[base_job]}"
        assert rig.kaniko.build_arg(job, "DRIVER_BASE") == expected

    rig.kaniko.build_all()
    rig.cycle()
    for tag in TAGS:
        record = rig.store.target(tag)
        assert record is not None
        assert record.state is TargetState.PUBLISHED
    for arch in ("amd64", "arm64"):
        [base] = [tag for tag, a in base_tags.items() if a == arch]
        lower = layer_digests(rig, base)
        newer, older = (layer_digests(rig, f"{tag}-{arch}") for tag in TAGS)
        assert newer[:-1] == older[:-1] == lower  # the same blobs, in the same order
        assert newer[-1] != older[-1]  # only the kernel layer differs

    again = rig.cycle()
    assert again.launched() == []
    assert len(rig.kaniko.job_names()) == 6  # 2 base Jobs + 4 kernel Jobs, ever

    plan = plan_retention(
        RetentionInputs(
            tags=rig.registry.tags(), nodes=[], listings=[], targets=rig.store.targets()
        ),
        now=rig.clock.now,
    )
    kept = {kept.tag: kept.reason for kept in plan.keep}
    assert all(kept.get(tag) == BASE_KEPT for tag in base_tags)
    assert plan.foreign == 0  # a base is releasebot's own tag, not an unknown one
    assert not {deletion.tag for deletion in plan.delete} & set(base_tags)


def test_a_failing_base_is_one_alert_and_no_kernel_job(rig: Rig) -> None:
    rig.cycle()
    [base_job] = rig.kaniko.job_names()
    rig.kaniko.api.exit_nonzero(base_job, 2, log="make: *** [nvidia-installer] Error 2")
    rig.cycle()  # permanent (the recipe failed): no retry, one alert
    rig.cycle()
    rig.cycle()
    [record] = rig.store.bases()
    assert record.state is BaseState.FAILED
    assert record.reason is FailureReason.EXIT_CODE
    assert rig.kaniko.job_names() == [base_job]  # no kernel Job, no second base Job
    events = [e.event for e in rig.store.pending_events(rig.clock.now, limit=500)]
    assert [e.kind for e in events if e.kind is EventKind.BASE_FAILED] == [EventKind.BASE_FAILED]
    assert all(e.kind is not EventKind.BUILD_STARTED for e in events)
    for tag in TAGS:
        target = rig.store.target(tag)
        assert target is not None
        assert target.state is TargetState.WAITING
        assert target.last_error is not None
        assert "failed" in target.last_error

    retried = rig.service.retry(rig.store.target(TAGS[0]))  # type: ignore[arg-type]
    assert [d.action for d in retried.decisions if d.tag == record.tag] == ["launched"]
    bases, kernels = rig.jobs()
    assert len(bases) == 2
    assert kernels == []
    [again] = rig.store.bases()
    assert (again.state, again.attempts) == (BaseState.RUNNING, 2)


@pytest.fixture
def key() -> SigningKey:
    return generate_key()


@pytest.fixture
def signed_rig(
    request: pytest.FixtureRequest, engine: Engine, tmp_path: Path, key: SigningKey
) -> Iterator[Rig]:
    key_file = tmp_path / "cosign.key"
    key_file.write_bytes(encrypt_key(key, PASSWORD))
    yield from _rig(request, engine, frozenset({Arch.AMD64}), key_file)


def test_a_base_is_signed_with_an_sbom_and_provenance_before_it_is_used(
    signed_rig: Rig, key: SigningKey
) -> None:
    rig = signed_rig
    rig.cycle()
    [base_job] = rig.kaniko.job_names()
    digest = rig.kaniko.build(base_job)
    rig.cycle()
    [base] = rig.store.bases()
    assert (base.state, base.digest) == (BaseState.PUBLISHED, digest)
    artifacts = OrasArtifacts(rig.registry)
    assert artifacts.manifest(oci.signature_tag(digest)) is not None
    verification = SignatureVerifier(artifacts, key.public).verify(digest)
    assert verification.fingerprint == key.public.fingerprint
    assert verification.sbom_components > 0
    kernels = [job for job in rig.kaniko.job_names() if job != base_job]
    assert len(kernels) == 2  # FROM the signed base, for both releases


@pytest.fixture
def narrow_rig(request: pytest.FixtureRequest, engine: Engine) -> Iterator[Rig]:
    yield from _rig(request, engine, frozenset({Arch.AMD64, Arch.ARM64}), max_builds=1)


def test_base_jobs_count_against_max_concurrent_builds(narrow_rig: Rig) -> None:
    rig = narrow_rig
    first = rig.cycle()
    [only] = rig.kaniko.job_names()  # one slot: one base Job, the other arch's deferred
    assert rig.kaniko.is_base(only)
    assert "deferred" in [d.action for d in first.decisions]
    rig.kaniko.build(only)
    rig.cycle()  # the first base is published; the slot goes to the other arch's base
    bases, kernels = rig.jobs()
    assert len(bases) == 2
    assert kernels == []
