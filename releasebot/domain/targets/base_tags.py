"""A driver base's name: its tag, and what it is made of (``BaseSpec``). Pure.

Apart from ``domain/targets/bases.py`` (the rules of building one) because retention and the
signing facts need the name alone: what a base tag looks like and what it says.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from dataclasses import dataclass

from releasebot.domain.shared.versions import Arch, DriverVersion, is_oci_tag

BASE_LABEL = "releasebot.driver-base"
"""The base image's label: ``<driver>/<arch>`` (the recipe's ``Dockerfile.base`` sets it)."""
BASE_DOCKERFILE = "Dockerfile.base"
"""The recipe file that builds a base, beside the per-release ``Dockerfile``."""
DRIVER_BASE_ARG = "DRIVER_BASE"
"""The per-release build's argument: ``<repository>@sha256:<digest>`` of its arch's base."""
OS_IMAGE_ARGS = ("RUNTIME_IMAGE", "BUILDER_IMAGE")
"""The base OS images: a change of either is another base."""
BASE_ARG_NAMES = frozenset(
    {"NVIDIA_BASE_URL", "NVIDIA_RUNFILE_SHA256", "RECIPE_REVISION", *OS_IMAGE_ARGS}
)
"""The optional build args ``Dockerfile.base`` declares beside the required three."""

_SAFE_REVISION = re.compile(r"[A-Za-z0-9][A-Za-z0-9.]{0,39}")
_TAG = re.compile(
    r"(?P<driver>[0-9][0-9.]*)-base-(?P<arch>amd64|arm64)"
    r"-r(?P<revision>[A-Za-z0-9][A-Za-z0-9.]{0,39})-(?P<os>[0-9a-f]{8})"
)


def revision_text(revision: str) -> str:
    """The recipe revision as it appears in a tag: itself when short and plain (the shipped
    recipe's 12 hex digits), else 12 hex digits of its SHA-256."""
    if _SAFE_REVISION.fullmatch(revision):
        return revision
    return hashlib.sha256(revision.encode()).hexdigest()[:12]


def os_fingerprint(os_images: Sequence[tuple[str, str]]) -> str:
    """Eight hex digits naming the base OS images (the recipe's defaults: no pairs)."""
    text = "\n".join(f"{name}={value}" for name, value in sorted(os_images))
    return hashlib.sha256(text.encode()).hexdigest()[:8]


def base_tag(
    driver: DriverVersion, arch: Arch, revision: str, os_images: Sequence[tuple[str, str]]
) -> str:
    """``<driver>-base-<arch>-r<revision>-<os>``, e.g. ``580.95.05-base-amd64-r1a2b3c4d5e6f-
    9f86d081``.

    Why this shape: it is a valid OCI tag; it can never be an operator tag
    (``<driver>-flatcar<version>``) nor a per-arch tag of one (``…-flatcar<v>-<arch>``), nor a
    signature tag (``sha256-…``); retention recognises it (``parse_base_tag``); and every
    input that makes another base (driver, arch, recipe revision, base OS images) is in it,
    so a new base never overwrites one that published images are built on.
    """
    value = (
        f"{driver.text}-base-{arch.value}-r{revision_text(revision)}-{os_fingerprint(os_images)}"
    )
    if not is_oci_tag(value):  # cannot happen for parsed versions; be safe
        raise ValueError(f"{value!r} is not a valid OCI tag")
    return value


def parse_base_tag(tag: str) -> tuple[DriverVersion, Arch] | None:
    """(driver, arch) of a base tag; ``None`` for any other tag."""
    match = _TAG.fullmatch(tag)
    if match is None or not DriverVersion.is_valid(match["driver"]):
        return None
    return DriverVersion.parse(match["driver"]), Arch(match["arch"])


@dataclass(frozen=True)
class BaseSpec:
    """One base to exist: a driver for one arch, by one recipe revision, on one base OS."""

    driver_version: DriverVersion
    driver_branch: str
    arch: Arch
    revision: str
    os_images: tuple[tuple[str, str], ...] = ()

    @property
    def tag(self) -> str:
        return base_tag(self.driver_version, self.arch, self.revision, self.os_images)

    @property
    def label(self) -> str:
        """The value of ``BASE_LABEL`` the base image must carry."""
        return f"{self.driver_version.text}/{self.arch.value}"
