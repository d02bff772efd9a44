"""Readiness: whether a build's inputs exist yet, and what the build must be told about them.

Flatcar's build artefacts can appear hours after the feed entry and NVIDIA runfiles can
vanish for good; neither is a build failure. A target whose inputs are missing WAITS and is
checked again; only a runfile that stays missing is permanent.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

_GCC_RE = re.compile(r"^CONFIG_GCC_VERSION=([0-9]{5,6})$", re.MULTILINE)


@dataclass(frozen=True)
class Readiness:
    """The answer for one (target, arch)."""

    missing: tuple[str, ...] = ()
    """URLs (or file names) not there yet; empty when the build can start."""
    runfile_missing: bool = False
    """The NVIDIA runfile is among the missing (gone for good if it stays so)."""
    build_args: tuple[tuple[str, str], ...] = field(default=())
    """What the recipe needs to know from the inputs, e.g. ``GCC_MAJOR``."""

    @property
    def ready(self) -> bool:
        return not self.missing


def gcc_major(kernel_config: str) -> int | None:
    """The compiler major the kernel was built with, from ``CONFIG_GCC_VERSION=140200``."""
    match = _GCC_RE.search(kernel_config)
    if match is None:
        return None
    return int(match.group(1)) // 10000
