"""Versions order numerically, keep upstream's exact text, and tags follow the operator's rule."""

from __future__ import annotations

import pytest

from releasebot.domain.shared.errors import InvalidTagError, VersionError
from releasebot.domain.shared.versions import (
    Arch,
    DriverVersion,
    FlatcarVersion,
    image_tag,
    is_oci_tag,
)


def test_flatcar_versions_order_as_integers_not_strings() -> None:
    texts = ["4081.3.2", "4081.3.10", "4081.3.1", "3510.3.8"]
    ordered = sorted(FlatcarVersion.parse(text) for text in texts)
    assert [version.text for version in ordered] == [
        "3510.3.8",
        "4081.3.1",
        "4081.3.2",
        "4081.3.10",
    ]


@pytest.mark.parametrize(
    "text", ["4593.2", "4593.2.5.1", "v4593.2.5", "4593.2.5 ", "4593.02.5", "", "current", "a.b.c"]
)
def test_malformed_flatcar_versions_are_rejected(text: str) -> None:
    with pytest.raises(VersionError, match="not a Flatcar version"):
        FlatcarVersion.parse(text)


def test_driver_version_keeps_zero_padding_for_the_tag() -> None:
    version = DriverVersion.parse("580.178.04")
    assert version.key == (580, 178, 4)
    assert version.text == "580.178.04"
    assert version.branch == "580"
    assert DriverVersion.parse("580.65.06") < version


@pytest.mark.parametrize("text", ["580", "580.1; rm -rf /", "580..1", "0580.1.1", "580.1.1.1"])
def test_malformed_driver_versions_are_rejected(text: str) -> None:
    with pytest.raises(VersionError):
        DriverVersion.parse(text)


def test_tag_is_byte_exact_to_the_gpu_operator_rule() -> None:
    tag = image_tag(DriverVersion.parse("580.178.04"), FlatcarVersion.parse("4593.2.5"))
    assert tag == "580.178.04-flatcar4593.2.5"


def test_oci_tag_rule() -> None:
    assert is_oci_tag("a" * 128)
    assert not is_oci_tag("a" * 129)
    assert not is_oci_tag(".hidden")
    assert not is_oci_tag("-dash")
    assert not is_oci_tag("has/slash")


def test_a_tag_that_would_be_too_long_is_refused() -> None:
    driver = DriverVersion.parse("999999.999999.999999")
    flatcar = FlatcarVersion.parse("999999999.999999999.999999999")
    assert len(f"{driver}-flatcar{flatcar}") <= 128  # the grammar bounds every part
    assert image_tag(driver, flatcar).endswith(flatcar.text)
    with pytest.raises(InvalidTagError):
        image_tag(DriverVersion((1,), "x" * 130), flatcar)


def test_arch_names_map_between_nvidia_and_flatcar() -> None:
    assert Arch.from_nvidia("x86_64") is Arch.AMD64
    assert Arch.from_nvidia("aarch64") is Arch.ARM64
    assert Arch.from_nvidia("ppc64le") is None
    assert Arch.ARM64.nvidia_name == "aarch64"
    assert Arch.AMD64.flatcar_board == "amd64-usr"
