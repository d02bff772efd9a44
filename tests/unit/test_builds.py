"""Build naming, failure classification and how a Job's end is judged (its status, then
the registry's digest and labels): pure rules the build loop depends on."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from releasebot.domain.shared.versions import Arch
from releasebot.domain.targets.builds import (
    DRIVER_LABEL,
    FLATCAR_LABEL,
    KERNEL_LABEL,
    BuildRecord,
    BuildState,
    FailureReason,
    JobPhase,
    JobStatus,
    Pushed,
    abandons_job,
    build_request,
    classify_exit,
    describe_build,
    job_name,
    judge_job,
    retry_delay,
    verify_digest,
    verify_labels,
)
from tests.support.targets import make_target

TARGET = make_target(arches=(Arch.AMD64, Arch.ARM64))


@pytest.mark.parametrize(
    ("log", "reason"),
    [
        ("INFO Pushing\nerror pushing image: 503 Service Unavailable\n", FailureReason.PUSH_FAILED),
        (
            "waiting: flatcar-container.tar.gz not published yet\nexit status 75",
            FailureReason.INPUTS_UNAVAILABLE,
        ),
        ("unavailable: us.download.nvidia.com timed out\n", FailureReason.INPUTS_UNAVAILABLE),
        ("gone: NVIDIA-Linux-x86_64-580.178.04.run not found\n", FailureReason.EXIT_CODE),
        ("SHA512 mismatch for flatcar_production_image.vmlinuz\n", FailureReason.EXIT_CODE),
        ("make: *** [Makefile:42] Error 2\n", FailureReason.EXIT_CODE),
        ("the word waiting: in the middle of a line\n", FailureReason.EXIT_CODE),
        (None, FailureReason.EXIT_CODE),
    ],
)
def test_exit_classification(log: str | None, reason: FailureReason) -> None:
    assert classify_exit(log) is reason


def test_only_failures_a_retry_can_fix_are_transient() -> None:
    assert FailureReason.INPUTS_UNAVAILABLE.transient
    assert FailureReason.PUSH_FAILED.transient
    assert not FailureReason.EXIT_CODE.transient
    assert not FailureReason.REJECTED.transient


def test_job_names_are_dns_labels_unique_per_arch_and_attempt() -> None:
    names = {job_name(TARGET.tag, arch, attempt) for arch in Arch for attempt in (1, 2)}
    assert len(names) == 4
    long_tag = "9" * 100 + "-flatcar1.2.3"
    assert all(len(job_name(tag, Arch.AMD64, 99)) <= 63 for tag in (TARGET.tag, long_tag))
    assert job_name(long_tag, Arch.AMD64, 1) != job_name(long_tag + "4", Arch.AMD64, 1)


def test_multi_arch_builds_push_per_arch_tags_and_extra_args_cannot_override_the_contract() -> None:
    request = build_request(
        TARGET, Arch.ARM64, 1, (("GCC_MAJOR", "14"), ("DRIVER_VERSION", "evil"))
    )
    assert request.destination_tag == f"{TARGET.tag}-arm64"
    args = dict(request.build_args)
    assert args["DRIVER_VERSION"] == "580.178.04"
    assert args["KERNEL_VERSION"] == "6.12.102-flatcar"
    assert args["TARGETARCH"] == "arm64"
    assert args["GCC_MAJOR"] == "14"


def test_retry_delay_doubles_and_is_capped() -> None:
    base, cap = timedelta(minutes=5), timedelta(hours=1)
    delays = [retry_delay(n, base=base, cap=cap) for n in range(1, 7)]
    assert delays[:4] == [timedelta(minutes=m) for m in (5, 10, 20, 40)]
    assert delays[4:] == [cap, cap]


T0 = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
DIGEST = "sha256:" + "c" * 64
BUILD = BuildRecord(
    tag=TARGET.tag,
    arch=Arch.AMD64,
    attempt=1,
    job_name=job_name(TARGET.tag, Arch.AMD64, 1),
    destination_tag=f"{TARGET.tag}-amd64",
    state=BuildState.RUNNING,
    created_at=T0,
)


def status(phase: JobPhase, **fields: object) -> JobStatus:
    return JobStatus(BUILD.job_name, phase, **fields)  # type: ignore[arg-type]


def test_a_running_job_is_asked_again_and_a_deleted_one_failed() -> None:
    assert judge_job(BUILD, status(JobPhase.RUNNING), T0) is None
    gone = judge_job(BUILD, status(JobPhase.MISSING), T0)
    assert isinstance(gone, BuildRecord)
    assert (gone.state, gone.reason, gone.finished_at) == (
        BuildState.FAILED,
        FailureReason.JOB_DELETED,
        T0,
    )


def test_a_failed_job_is_classified_by_its_log_and_a_stuck_pull_abandoned() -> None:
    log = "INFO Pushing\nerror pushing image: 503\n"
    pushed = judge_job(BUILD, status(JobPhase.FAILED, log_tail=log), T0)
    assert isinstance(pushed, BuildRecord)
    assert (pushed.reason, pushed.log_tail) == (FailureReason.PUSH_FAILED, log)
    assert not abandons_job(pushed)
    pull = judge_job(BUILD, status(JobPhase.FAILED, reason=FailureReason.IMAGE_PULL), T0)
    assert isinstance(pull, BuildRecord)
    assert abandons_job(pull)


def test_a_succeeded_job_must_report_a_digest() -> None:
    garbage = judge_job(BUILD, status(JobPhase.SUCCEEDED, termination_message="ok\x00"), T0)
    assert isinstance(garbage, BuildRecord)
    assert garbage.reason is FailureReason.BAD_TERMINATION_MESSAGE
    assert judge_job(BUILD, status(JobPhase.SUCCEEDED, termination_message=DIGEST), T0) == (
        Pushed(DIGEST)
    )


def test_the_registry_must_hold_the_digest_and_the_labels_must_match() -> None:
    unverified = verify_digest(BUILD, Pushed(DIGEST), None, T0)
    assert unverified is not None
    assert unverified.reason is FailureReason.PUSH_UNVERIFIED
    assert "no such tag" in describe_build(unverified)
    assert verify_digest(BUILD, Pushed(DIGEST), DIGEST, T0) is None
    labels = {
        DRIVER_LABEL: "580.178.04",
        FLATCAR_LABEL: "4593.2.5",
        KERNEL_LABEL: "6.12.102-flatcar",
    }
    done = verify_labels(BUILD, TARGET, Pushed(DIGEST), labels, T0)
    assert (done.state, done.digest, describe_build(done)) == (
        BuildState.SUCCEEDED,
        DIGEST,
        DIGEST,
    )
    wrong = verify_labels(BUILD, TARGET, Pushed(DIGEST), {**labels, DRIVER_LABEL: "470.1"}, T0)
    assert wrong.reason is FailureReason.WRONG_CONTENT
    assert "'470.1'" in (wrong.message or "")
