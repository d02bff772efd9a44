"""Targets for tests in one line: ``make_target()`` is 580.178.04 on Flatcar 4593.2.5 stable
for amd64; every field can be changed, versions are given as upstream spells them."""

from __future__ import annotations

from releasebot.domain.shared.versions import Arch, DriverVersion, FlatcarVersion, image_tag
from releasebot.domain.targets.models import Target


def make_target(
    tag: str | None = None,
    *,
    driver: str = "580.178.04",
    flatcar: str = "4593.2.5",
    channel: str = "stable",
    kernel: str = "6.12.102",
    arches: tuple[Arch, ...] = (Arch.AMD64,),
) -> Target:
    """A target; its tag is the GPU Operator's (``image_tag``) unless ``tag`` is given."""
    driver_version = DriverVersion.parse(driver)
    flatcar_version = FlatcarVersion.parse(flatcar)
    return Target(
        tag=tag or image_tag(driver_version, flatcar_version),
        driver_version=driver_version,
        driver_branch=driver_version.branch,
        flatcar_version=flatcar_version,
        flatcar_channel=channel,
        kernel=kernel,
        arches=arches,
    )
