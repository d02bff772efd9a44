"""The reconcile cycle end to end with real parts where they can run here.

Real: the SQLite state store, HTTP feeds on loopback, the OCI registry (Debian's
docker-registry) and the Kubernetes API over HTTP (kmock's emulator, see tests/support/kubeapi.py).
The test plays Kaniko: it pushes a real image under each Job's destination and completes
the Job with the digest, or fails it the way a cluster would.

Covers: the replay of the two real stable snapshots (exactly the new release is built,
published, and a second run launches nothing), multi-arch indexes, verification of the
digest, failures and their retries, ``max_concurrent_builds``, a Job deleted mid-build,
the registry down, and crashes at each step of the cycle with no duplicate Job.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from datetime import timedelta
from pathlib import Path

import httpx
import pytest
from sqlalchemy import Engine

from releasebot.builders.kaniko import KanikoOptions
from releasebot.builders.kubernetes import KubernetesJobLauncher
from releasebot.domain.shared.errors import RegistryError, TargetBusyError
from releasebot.domain.shared.versions import Arch
from releasebot.domain.targets.builds import BuildState, FailureReason
from releasebot.domain.targets.models import TargetRecord, TargetState
from releasebot.domain.targets.policy import DriverPolicy, FlatcarPolicy, Policy
from releasebot.registry.oras import OrasRegistry
from releasebot.service.plan import FeedSpec, PlanService
from releasebot.service.reconcile import CycleReport, ReconcileOptions, ReconcileService
from releasebot.sources.fetch import HttpFeedFetcher
from releasebot.sources.flatcar import parse_flatcar_feed
from releasebot.sources.nvidia import parse_nvidia_feed
from releasebot.store import migrate
from releasebot.store.engine import make_engine
from releasebot.store.sql import SqlStateStore
from tests.support.builds import Clock, Crash, KanikoPlayer, crash_after, crash_before
from tests.support.feedserver import FeedServer
from tests.support.kubeapi import FakeKubeApi
from tests.support.registryserver import RunningRegistry

STABLE_BEFORE = "releases-stable.2026-07-09.json"
STABLE_AFTER = "releases-stable.2026-08-13.json"
CONTEXT = "git://git.example.test/gpu/recipes.git#refs/heads/main#" + "0123456789" * 4


@dataclass
class Rig:
    engine: Engine
    store: SqlStateStore
    feeds: FeedServer
    registry: OrasRegistry
    api: FakeKubeApi
    launcher: KubernetesJobLauncher
    kaniko: KanikoPlayer
    clock: Clock
    planner: PlanService
    options: ReconcileOptions
    overrides: dict[str, object] = field(default_factory=dict)
    nvidia_body: bytes = b""
    """Collaborators every ``service()`` gets (e.g. an artifact source)."""

    def service(self, **overrides: object) -> ReconcileService:
        parts: dict[str, object] = {
            "planner": self.planner,
            "store": self.store,
            "registry": self.registry,
            "launcher": self.launcher,
            "clock": self.clock,
            "options": self.options,
            **self.overrides,
        }
        parts.update(overrides)
        return ReconcileService(**parts)  # type: ignore[arg-type]

    def cycle(self) -> CycleReport:
        return self.service().cycle()

    def target(self, tag: str) -> TargetRecord:
        record = self.store.target(tag)
        assert record is not None, tag
        return record

    def serve_stable(self, data: Path, name: str, etag: str) -> None:
        body = (data / "flatcar" / name).read_bytes()
        self.feeds.route("/releases-stable.json", FeedServer.static(body, etag=etag))


def make_rig(
    tmp_path: Path,
    shared_data: Path,
    plain_registry: RunningRegistry,
    registry_name: str,
    kube_api: FakeKubeApi,
    feeds: FeedServer,
    client: httpx.Client,
    arches: frozenset[Arch],
) -> Rig:
    engine = make_engine(f"sqlite:///{tmp_path / 'state.db'}")
    migrate.upgrade(engine)
    store = SqlStateStore(engine)
    nvidia = (shared_data / "nvidia" / "datacenter-releases.fixture.json").read_bytes()
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
        fetcher=HttpFeedFetcher(client, retries=0),
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
    rig = Rig(
        engine,
        store,
        feeds,
        registry,
        kube_api,
        launcher,
        KanikoPlayer(kube_api, plain_registry),
        clock,
        planner,
        ReconcileOptions(max_concurrent_builds=4, max_attempts=3),
    )
    rig.serve_stable(shared_data, STABLE_BEFORE, '"s1"')
    rig.nvidia_body = nvidia
    return rig


@pytest.fixture
def feeds() -> Iterator[FeedServer]:
    with FeedServer() as server:
        yield server


def _rig(request: pytest.FixtureRequest, arches: frozenset[Arch]) -> Iterator[Rig]:
    names = ("tmp_path", "shared_data", "plain_registry", "registry_name", "kube_api", "feeds")
    parts = [request.getfixturevalue(name) for name in names]
    with httpx.Client(timeout=5) as http:
        rig = make_rig(*parts, http, arches)
        try:
            yield rig
        finally:
            rig.registry.close()
            rig.launcher.close()
            rig.engine.dispose()


@pytest.fixture
def rig(request: pytest.FixtureRequest) -> Iterator[Rig]:
    yield from _rig(request, frozenset({Arch.AMD64}))


@pytest.fixture
def multi_rig(request: pytest.FixtureRequest) -> Iterator[Rig]:
    yield from _rig(request, frozenset({Arch.AMD64, Arch.ARM64}))


NEW = "580.178.04-flatcar4593.2.5"
OLD = ("580.178.04-flatcar4593.2.4", "580.178.04-flatcar4593.2.3")


def publish_existing(rig: Rig, *tags: str) -> None:
    for tag in tags:
        rig.kaniko.registry.push_image(rig.registry.repository.split("/", 1)[1], tag)


def test_replaying_the_real_snapshots_builds_exactly_the_new_release(
    rig: Rig, shared_data: Path
) -> None:
    publish_existing(rig, *OLD)
    first = rig.cycle()
    assert first.launched() == []
    assert {rig.target(tag).state for tag in OLD} == {TargetState.PUBLISHED}

    rig.serve_stable(shared_data, STABLE_AFTER, '"s2"')
    rig.clock.advance(timedelta(minutes=10))
    second = rig.cycle()
    assert [(d.action, d.tag) for d in second.launched()] == [("launched", NEW)]
    assert rig.target(NEW).state is TargetState.BUILDING
    [job] = rig.kaniko.job_names()
    assert rig.kaniko.destination(job)[1] == NEW  # single arch: the tag itself

    digest = rig.kaniko.build(job)
    rig.clock.advance(timedelta(minutes=10))
    third = rig.cycle()
    assert ("published", NEW, digest) in [(d.action, d.tag, d.detail) for d in third.decisions]
    record = rig.target(NEW)
    assert (record.state, record.digest) == (TargetState.PUBLISHED, digest)
    assert record.published_at == rig.clock.now

    fourth = rig.cycle()
    assert fourth.launched() == []
    assert rig.kaniko.job_names() == [job]  # no Job was ever launched twice
    [build] = rig.store.builds(tag=NEW)
    assert (build.state, build.digest, build.attempt) == (BuildState.SUCCEEDED, digest, 1)


def test_multi_arch_builds_natively_and_publishes_an_index(multi_rig: Rig) -> None:
    rig = multi_rig
    rig.cycle()
    jobs = rig.kaniko.job_names()
    destinations = sorted(rig.kaniko.destination(job)[1:] for job in jobs)
    tag = "580.178.04-flatcar4593.2.4"
    assert (f"{tag}-amd64", "amd64") in destinations
    assert (f"{tag}-arm64", "arm64") in destinations
    assert len(jobs) == 4  # two releases x two arches
    rig.kaniko.build_all()
    rig.cycle()
    record = rig.target(tag)
    assert record.state is TargetState.PUBLISHED
    assert record.digest is not None
    assert rig.registry.digest(tag) == record.digest
    manifest = httpx.get(
        f"{rig.kaniko.registry.base_url}/v2/{rig.registry.repository.split('/', 1)[1]}"
        f"/manifests/{tag}",
        headers={"Accept": "application/vnd.oci.image.index.v1+json"},
    ).json()
    assert manifest["mediaType"] == "application/vnd.oci.image.index.v1+json"
    assert sorted(m["platform"]["architecture"] for m in manifest["manifests"]) == [
        "amd64",
        "arm64",
    ]


def test_a_digest_the_registry_does_not_hold_is_not_published(rig: Rig) -> None:
    rig.cycle()
    job = rig.kaniko.job_names()[0]
    rig.kaniko.api.succeed(job, "sha256:" + "f" * 64)  # reported, never pushed
    rig.cycle()
    [build] = [b for b in rig.store.builds() if b.job_name == job]
    assert build.reason is FailureReason.PUSH_UNVERIFIED
    assert rig.target(build.tag).state is TargetState.RETRYING


def test_an_image_whose_labels_contradict_its_tag_is_not_published(rig: Rig) -> None:
    rig.cycle()
    job = rig.kaniko.job_names()[0]
    labels = {**rig.kaniko.labels(job), "releasebot.driver-version": "470.256.02"}
    digest = rig.kaniko.push(job, labels=labels)  # a recipe that ignored DRIVER_VERSION
    rig.kaniko.api.succeed(job, digest)
    rig.cycle()
    [build] = [b for b in rig.store.builds() if b.job_name == job]
    assert build.reason is FailureReason.WRONG_CONTENT
    assert "470.256.02" in (build.message or "")
    record = rig.target(build.tag)
    assert record.state is TargetState.FAILED  # permanent: the recipe needs a human
    rig.cycle()
    assert rig.target(build.tag).state is TargetState.FAILED  # the tag exists, still wrong


def test_garbage_termination_message_is_a_retryable_failure(rig: Rig) -> None:
    rig.cycle()
    job = rig.kaniko.job_names()[0]
    rig.kaniko.push(job)
    rig.kaniko.api.succeed(job, "INFO pushed somewhere\x00\x01")
    report = rig.cycle()
    [build] = [b for b in rig.store.builds() if b.job_name == job]
    assert build.reason is FailureReason.BAD_TERMINATION_MESSAGE
    assert "not a digest" in (build.message or "")
    assert any(d.action == "retrying" for d in report.decisions)


def test_transient_failures_back_off_then_give_up(rig: Rig) -> None:
    rig.options = ReconcileOptions(
        max_concurrent_builds=4,
        max_attempts=2,
        retry_base=timedelta(minutes=5),
        retry_cap=timedelta(hours=1),
    )
    rig.cycle()
    tag = "580.178.04-flatcar4593.2.4"
    first = next(b for b in rig.store.builds(tag=tag))
    rig.kaniko.api.oom_kill(first.job_name, log="compiling nv-kernel.o\nKilled\n")
    rig.cycle()
    record = rig.target(tag)
    assert record.state is TargetState.RETRYING
    assert record.next_attempt_at == rig.clock.now + timedelta(minutes=5)
    assert "OOMKilled" in (record.last_error or "")

    rig.clock.advance(timedelta(minutes=4))
    rig.cycle()
    assert rig.target(tag).attempts == 1  # not yet due
    rig.clock.advance(timedelta(minutes=2))
    rig.cycle()
    assert rig.target(tag).attempts == 2
    second = next(b for b in rig.store.builds(tag=tag) if b.attempt == 2)
    assert second.job_name != first.job_name
    rig.kaniko.api.evict(second.job_name)
    rig.cycle()
    record = rig.target(tag)
    assert record.state is TargetState.FAILED
    assert (record.last_error or "").startswith("retries exhausted")


def test_a_failed_build_keeps_reason_and_log_and_waits_for_a_human(rig: Rig) -> None:
    rig.cycle()
    tag = "580.178.04-flatcar4593.2.4"
    job = next(b for b in rig.store.builds(tag=tag)).job_name
    log = "".join(f"line {n}\n" for n in range(500)) + "error: nvidia.ko: undefined symbol\n"
    rig.kaniko.api.exit_nonzero(job, 2, log=log)
    rig.cycle()
    [build] = rig.store.builds(tag=tag)
    assert build.reason is FailureReason.EXIT_CODE
    assert (build.log_tail or "").rstrip().endswith("undefined symbol")
    assert len(build.log_tail or "") <= 4000
    assert rig.target(tag).state is TargetState.FAILED
    rig.clock.advance(timedelta(days=1))
    rig.cycle()
    assert len(rig.store.builds(tag=tag)) == 1  # permanent: no automatic retry


def test_executor_image_that_cannot_be_pulled_is_deleted_and_ends_with_a_human(rig: Rig) -> None:
    rig.options = ReconcileOptions(max_concurrent_builds=4, max_attempts=2)
    tag = "580.178.04-flatcar4593.2.4"
    for attempt in (1, 2):
        rig.cycle()
        job = next(b for b in rig.store.builds(tag=tag) if b.attempt == attempt).job_name
        rig.kaniko.api.image_pull_error(job)
        rig.cycle()
        assert job not in rig.kaniko.job_names()  # a Pod stuck pulling is not left behind
        rig.clock.advance(timedelta(hours=1))
    record = rig.target(tag)
    assert record.state is TargetState.FAILED
    assert "ImagePull" in (record.last_error or "")


def test_a_job_deleted_mid_build_is_retried(rig: Rig) -> None:
    rig.cycle()
    tag = "580.178.04-flatcar4593.2.4"
    job = next(b for b in rig.store.builds(tag=tag)).job_name
    rig.kaniko.api.delete_job(job)
    rig.cycle()
    [build] = rig.store.builds(tag=tag)
    assert build.reason is FailureReason.JOB_DELETED
    assert rig.target(tag).state is TargetState.RETRYING


def test_a_failed_push_is_retried_not_handed_to_a_human(rig: Rig) -> None:
    rig.cycle()
    tag = "580.178.04-flatcar4593.2.4"
    job = next(b for b in rig.store.builds(tag=tag)).job_name
    log = "INFO Pushing image\nerror pushing image: failed to push to destination: 503\n"
    rig.kaniko.api.exit_nonzero(job, 1, log=log)
    rig.cycle()
    [build] = rig.store.builds(tag=tag)
    assert build.reason is FailureReason.PUSH_FAILED
    assert rig.target(tag).state is TargetState.RETRYING


def test_the_retry_budget_starts_again_after_a_publish(rig: Rig) -> None:
    rig.options = ReconcileOptions(max_concurrent_builds=4, max_attempts=2)
    tag = "580.178.04-flatcar4593.2.4"
    rig.cycle()
    first = next(b for b in rig.store.builds(tag=tag))
    rig.kaniko.api.oom_kill(first.job_name)
    rig.cycle()  # attempt 1 failed: retrying
    rig.clock.advance(timedelta(hours=1))
    rig.cycle()  # attempt 2
    rig.kaniko.build_all()
    rig.cycle()
    assert rig.target(tag).state is TargetState.PUBLISHED
    rig.service().build_by_hand("580.178.04", "4593.2.4", arches=None, force=True)
    third = next(b for b in rig.store.builds(tag=tag) if b.attempt == 3)
    rig.kaniko.api.oom_kill(third.job_name)
    report = rig.cycle()
    # Counting every attempt ever made (3 >= 2) would give up; since the publish it is 1.
    assert ("retrying", tag) in [(d.action, d.tag) for d in report.decisions]


def test_a_human_retry_after_the_budget_is_spent_gets_the_full_budget(rig: Rig) -> None:
    rig.options = ReconcileOptions(max_concurrent_builds=4, max_attempts=2)
    tag = "580.178.04-flatcar4593.2.4"
    rig.cycle()
    for attempt in (1, 2):
        job = next(b for b in rig.store.builds(tag=tag) if b.attempt == attempt).job_name
        rig.kaniko.api.oom_kill(job)
        rig.cycle()
        rig.clock.advance(timedelta(hours=1))
        rig.cycle()
    spent = rig.target(tag)
    assert spent.state is TargetState.FAILED
    assert (spent.last_error or "").startswith("retries exhausted")
    rig.service().retry(spent)  # a person asks: attempt 3 starts a new budget of 2
    assert (rig.target(tag).attempts, rig.target(tag).budget_start) == (3, 2)
    third = next(b for b in rig.store.builds(tag=tag) if b.attempt == 3)
    rig.kaniko.api.oom_kill(third.job_name)
    rig.cycle()
    assert rig.target(tag).state is TargetState.RETRYING  # not "retries exhausted" at once
    rig.clock.advance(timedelta(hours=1))
    rig.cycle()  # attempt 4: the budget's second and last
    fourth = next(b for b in rig.store.builds(tag=tag) if b.attempt == 4)
    rig.kaniko.api.oom_kill(fourth.job_name)
    rig.cycle()
    assert rig.target(tag).state is TargetState.FAILED


def test_a_driver_that_does_not_compile_is_incompatible_and_told_once(rig: Rig) -> None:
    rig.cycle()
    tag = "580.178.04-flatcar4593.2.4"  # kernel 6.12.95
    job = next(b for b in rig.store.builds(tag=tag)).job_name
    log = (
        "nvidia/nv-pci.c:812:17: error: too few arguments to function 'pci_resize_resource'\n"
        "incompatible: NVIDIA 580.178.04 does not compile for kernel 6.12.95-flatcar"
        " (kernel (proprietary))\n"
        "build-modules: ERROR: kernel (proprietary): compiling NVIDIA 580.178.04 failed\n"
    )
    rig.kaniko.api.exit_nonzero(job, 1, log=log)
    report = rig.cycle()
    [build] = rig.store.builds(tag=tag)
    assert build.reason is FailureReason.INCOMPATIBLE
    record = rig.target(tag)
    assert record.state is TargetState.INCOMPATIBLE
    assert ("incompatible", tag) in [(d.action, d.tag) for d in report.decisions]
    rig.clock.advance(timedelta(days=2))
    rig.cycle()
    rig.cycle()
    assert len(rig.store.builds(tag=tag)) == 1  # never retried
    told = [
        stored.event
        for stored in rig.store.pending_events(rig.clock.now)
        if stored.event.subject == tag and stored.event.kind.value == "build_incompatible"
    ]
    assert len(told) == 1  # one alert, with no other selected branch to offer
    assert told[0].payload["alternative_branch"] is None


def test_build_by_hand_cannot_change_a_targets_arches(multi_rig: Rig) -> None:
    rig = multi_rig
    rig.cycle()
    with pytest.raises(TargetBusyError, match="--arch cannot change it"):
        rig.service().build_by_hand(
            "580.178.04", "4593.2.4", arches=frozenset({Arch.ARM64}), force=True
        )


def test_changed_arches_rebuild_a_published_tag(rig: Rig, shared_data: Path) -> None:
    publish_existing(rig, *OLD)
    rig.cycle()
    assert rig.target(OLD[0]).state is TargetState.PUBLISHED
    both = frozenset({Arch.AMD64, Arch.ARM64})
    rig.planner._policy = replace(  # the operator adds arm64 to the configuration
        rig.planner._policy, flatcar=replace(rig.planner._policy.flatcar, arches=both)
    )
    report = rig.cycle()
    assert rig.target(OLD[0]).state is TargetState.BUILDING
    assert ("launched", OLD[0]) in [(d.action, d.tag) for d in report.decisions]


def test_a_permanent_index_failure_does_not_leave_the_target_building(multi_rig: Rig) -> None:
    rig = multi_rig
    rig.cycle()
    rig.kaniko.build_all()
    registry = rig.registry

    def refuse(tag: str, manifests: object) -> str:
        raise RegistryError("registry 127.0.0.1: manifest unknown")

    report = rig.service(registry=_Patched(registry, push_index=refuse)).cycle()
    assert any(d.action == "failed" for d in report.decisions)
    assert {rig.target(tag).state for tag in OLD} == {TargetState.FAILED}
    jobs = rig.kaniko.job_names()
    rig.service().build_by_hand("580.178.04", "4593.2.4", arches=None, force=False)
    # A person's retry: both arch images are still there, so only the index is pushed again.
    assert rig.target(OLD[0]).state is TargetState.PUBLISHED
    assert rig.kaniko.job_names() == jobs


def test_max_concurrent_builds_is_respected(rig: Rig) -> None:
    rig.options = ReconcileOptions(max_concurrent_builds=1)
    report = rig.cycle()
    assert len(report.launched()) == 1
    assert any(d.action == "deferred" for d in report.decisions)
    rig.kaniko.build_all()
    rig.cycle()
    assert len(rig.kaniko.job_names()) == 2


def test_registry_down_launches_nothing_and_loses_nothing(rig: Rig, feeds: FeedServer) -> None:
    rig.cycle()
    job = rig.kaniko.job_names()[0]
    digest = rig.kaniko.build(job)
    down = OrasRegistry("127.0.0.1:9/nvidia/driver", insecure=True, retries=0)
    report = rig.service(registry=down).cycle()
    down.close()
    assert report.errors
    assert report.launched() == []
    [build] = [b for b in rig.store.builds() if b.job_name == job]
    assert build.state is BuildState.RUNNING  # verification waits for the registry
    rig.cycle()
    record = rig.target(build.tag)
    assert (record.state, record.digest) == (TargetState.PUBLISHED, digest)
    [build] = [b for b in rig.store.builds() if b.job_name == job]
    assert (build.state, build.digest) == (BuildState.SUCCEEDED, digest)


def test_api_server_down_postpones_and_recovers(rig: Rig) -> None:
    rig.kaniko.api.fail_requests(503)
    report = rig.cycle()
    assert report.errors
    assert rig.kaniko.job_names() == []
    launching = rig.store.builds(active_only=True)
    assert {b.state for b in launching} == {BuildState.LAUNCHING}
    rig.kaniko.api.clear_faults()
    rig.cycle()
    assert len(rig.kaniko.job_names()) == 2
    assert {b.state for b in rig.store.builds(active_only=True)} == {BuildState.RUNNING}


# -- crashes ---------------------------------------------------------------------------


def test_killed_after_launch_before_record_adopts_the_job(rig: Rig) -> None:
    launcher = rig.launcher
    crashing = rig.service(launcher=_Patched(launcher, launch=crash_after(launcher.launch)))
    with pytest.raises(Crash):
        crashing.cycle()
    assert len(rig.kaniko.job_names()) == 1  # the Job exists, its build row says launching
    report = rig.cycle()
    actions = sorted(d.action for d in report.launched())
    assert actions == ["adopted", "launched"]
    assert len(rig.kaniko.job_names()) == 2  # no twin
    assert {b.state for b in rig.store.builds()} == {BuildState.RUNNING}


def test_killed_before_the_job_is_created_launches_it_next_time(rig: Rig) -> None:
    launcher = rig.launcher
    crashing = rig.service(launcher=_Patched(launcher, launch=crash_before(launcher.launch)))
    with pytest.raises(Crash):
        crashing.cycle()
    assert rig.kaniko.job_names() == []
    rig.cycle()
    assert len(rig.kaniko.job_names()) == 2


def assert_published_by_our_builds(rig: Rig, pushed: dict[str, str]) -> None:
    """Each target published with the digest its Job pushed, its build row succeeded."""
    for build in rig.store.builds():
        assert build.state is BuildState.SUCCEEDED
        assert build.digest == pushed[build.job_name]
        record = rig.target(build.tag)
        assert (record.state, record.digest) == (TargetState.PUBLISHED, build.digest)


def test_killed_after_success_before_verify_publishes_next_time(rig: Rig) -> None:
    rig.cycle()
    pushed = rig.kaniko.build_all()
    registry = rig.registry
    crashing = rig.service(registry=_Patched(registry, digest=crash_before(registry.digest)))
    with pytest.raises(Crash):
        crashing.cycle()
    assert {b.state for b in rig.store.builds()} == {BuildState.RUNNING}
    rig.cycle()
    assert_published_by_our_builds(rig, pushed)
    assert len(rig.kaniko.job_names()) == 2


def test_killed_after_verify_before_record_verifies_again(rig: Rig) -> None:
    rig.cycle()
    pushed = rig.kaniko.build_all()
    registry = rig.registry
    crashing = rig.service(registry=_Patched(registry, digest=crash_after(registry.digest)))
    with pytest.raises(Crash):
        crashing.cycle()
    rig.cycle()
    assert_published_by_our_builds(rig, pushed)
    assert len(rig.kaniko.job_names()) == 2


def test_killed_after_the_index_push_before_record(multi_rig: Rig) -> None:
    rig = multi_rig
    rig.cycle()
    rig.kaniko.build_all()
    registry = rig.registry
    crashing = rig.service(registry=_Patched(registry, push_index=crash_after(registry.push_index)))
    with pytest.raises(Crash):
        crashing.cycle()
    rig.cycle()
    assert {rig.target(tag).state for tag in OLD} == {TargetState.PUBLISHED}
    assert len(rig.kaniko.job_names()) == 4


class _Patched:
    """An adapter with some methods replaced (the crash switches); the rest delegate."""

    def __init__(self, inner: object, **methods: object) -> None:
        self._inner = inner
        self._methods = methods

    def __getattr__(self, name: str) -> object:
        if name in self._methods:
            return self._methods[name]
        return getattr(self._inner, name)
