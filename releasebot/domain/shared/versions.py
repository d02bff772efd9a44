"""Versions, architectures and the image tag rule.

Versions compare as integer tuples, never as strings (``4081.3.10`` is newer than
``4081.3.9``; NVIDIA's ``580.178.04`` has a zero-padded part). Each version keeps the exact
string upstream published, because the GPU Operator builds image tags from those bytes.
"""

from __future__ import annotations

import enum
import functools
import re
from dataclasses import dataclass, field

from releasebot.domain.shared.errors import InvalidTagError, VersionError
from releasebot.domain.shared.references import is_tag

_FLATCAR_RE = re.compile(r"(0|[1-9][0-9]{0,8})\.(0|[1-9][0-9]{0,8})\.(0|[1-9][0-9]{0,8})")
_DRIVER_RE = re.compile(r"([1-9][0-9]{0,5})\.([0-9]{1,6})(?:\.([0-9]{1,6}))?")
_BRANCH_RE = re.compile(r"[1-9][0-9]{0,5}")
_KERNEL_RE = re.compile(r"[0-9]+\.[0-9]+(?:\.[0-9]+)?")


@dataclass(frozen=True, order=True)
class FlatcarVersion:
    """A Flatcar release version ``MAJOR.MINOR.PATCH`` (e.g. ``4593.2.5``)."""

    key: tuple[int, int, int] = field(repr=False)
    text: str = field(compare=False)

    @classmethod
    def parse(cls, text: str) -> FlatcarVersion:
        return _parse_flatcar(text)

    @staticmethod
    def is_valid(text: str) -> bool:
        return _FLATCAR_RE.fullmatch(text) is not None

    def __str__(self) -> str:
        return self.text


@dataclass(frozen=True, order=True)
class DriverVersion:
    """An NVIDIA datacenter driver version (``580.178.04``); its branch is the first part."""

    key: tuple[int, ...] = field(repr=False)
    text: str = field(compare=False)

    @classmethod
    def parse(cls, text: str) -> DriverVersion:
        return _parse_driver(text)

    @staticmethod
    def is_valid(text: str) -> bool:
        return _DRIVER_RE.fullmatch(text) is not None

    @property
    def branch(self) -> str:
        return self.text.split(".", 1)[0]

    def __str__(self) -> str:
        return self.text


# Every cycle reads every release and target back from the store: a version is parsed once
# per process (they are immutable; only valid, short strings are ever cached).
@functools.lru_cache(maxsize=8192)
def _parse_flatcar(text: str) -> FlatcarVersion:
    match = _FLATCAR_RE.fullmatch(text)
    if match is None:
        raise VersionError(f"{text!r} is not a Flatcar version (expected MAJOR.MINOR.PATCH)")
    major, minor, patch = (int(part) for part in match.groups())
    return FlatcarVersion((major, minor, patch), text)


@functools.lru_cache(maxsize=8192)
def _parse_driver(text: str) -> DriverVersion:
    match = _DRIVER_RE.fullmatch(text)
    if match is None:
        raise VersionError(f"{text!r} is not an NVIDIA driver version (expected e.g. 580.178.04)")
    return DriverVersion(tuple(int(part) for part in match.groups() if part is not None), text)


def is_driver_branch(text: str) -> bool:
    """True when ``text`` names a driver branch such as ``580``."""
    return _BRANCH_RE.fullmatch(text) is not None


def kernel_release(kernel: str) -> str:
    """The kernel release ``uname -r`` reports on a Flatcar node for the upstream kernel
    version the feed lists: ``6.12.102`` runs as ``6.12.102-flatcar``."""
    return f"{kernel}-flatcar"


def is_kernel_version(text: str) -> bool:
    """True for an upstream kernel version as Flatcar's feed lists it (``6.12.102``)."""
    return _KERNEL_RE.fullmatch(text) is not None


class Arch(enum.StrEnum):
    """A CPU architecture in Flatcar's and Kubernetes' spelling."""

    AMD64 = "amd64"
    ARM64 = "arm64"

    @classmethod
    def from_nvidia(cls, name: str) -> Arch | None:
        """Map NVIDIA's spelling (``x86_64``, ``aarch64``); ``None`` for arches we never build."""
        return _NVIDIA_ARCHES.get(name)

    @property
    def nvidia_name(self) -> str:
        return _NVIDIA_NAMES[self]

    @property
    def flatcar_board(self) -> str:
        """The board directory on Flatcar's release server (``amd64-usr``)."""
        return f"{self.value}-usr"


_NVIDIA_ARCHES = {"x86_64": Arch.AMD64, "aarch64": Arch.ARM64}
_NVIDIA_NAMES = {arch: name for name, arch in _NVIDIA_ARCHES.items()}


def sorted_arches(arches: frozenset[Arch]) -> tuple[Arch, ...]:
    return tuple(sorted(arches, key=lambda arch: arch.value))


def is_oci_tag(text: str) -> bool:
    """The OCI distribution spec's tag grammar (``domain.shared.references``, written once)."""
    return is_tag(text)


def image_tag(driver: DriverVersion, flatcar: FlatcarVersion) -> str:
    """The tag the GPU Operator pulls for ``driver`` on a node running ``flatcar``.

    The operator appends ``ID + VERSION_ID`` from the node's os-release (``flatcar4593.2.5``)
    to the driver version with a dash, so the tag is byte-for-byte
    ``<driver>-flatcar<version>``.
    """
    tag = f"{driver.text}-flatcar{flatcar.text}"
    if not is_oci_tag(tag):
        raise InvalidTagError(f"{tag!r} is not a valid OCI tag")
    return tag
