"""Build naming and failure classification: pure rules the build loop depends on."""

from __future__ import annotations

from datetime import timedelta

import pytest

from releasebot.domain.builds import (
    FailureReason,
    build_request,
    classify_exit,
    job_name,
    retry_delay,
)
from releasebot.domain.versions import Arch
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
