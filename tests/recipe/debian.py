"""Debian trixie packages and a trixie base image, fetched without touching the machine's apt.

``Archive`` is a PRIVATE apt configuration under the cache folder: its own sources list
(trixie and trixie-security: main, contrib, non-free), its own state and cache
directories, the machine's Debian keyring to check the archive's signatures. ``apt-get
download`` writes the
packages into the cache; ``/etc/apt`` and dpkg's database are never read or written, so
this runs beside other people's apt without taking their locks. A package that cannot be
downloaded raises ``UnavailableError`` naming it (one line).

``base_image_tar`` is ``mmdebstrap --mode=unshare --variant=minbase trixie``, run by the
suite's unprivileged user (the root's owners set in a user namespace, no debootstrap as
root, mmdebstrap's own apt configuration, never the machine's), written as a tar in the
cache (keyed by trixie's libc6 version, so a point release makes a new
one) and imported into the suite's own container storage by buildah (``buildah.py``): no
registry is involved. mmdebstrap leaves no apt lists or package caches in it.

Deliberately not here: what is made of the packages (``standins.py``).
"""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote

from tests.recipe.parts import CACHE, UnavailableError, run

MIRROR = "http://deb.debian.org/debian"
SECURITY_MIRROR = "http://deb.debian.org/debian-security"
SUITE = "trixie"
KEYRING = Path("/usr/share/keyrings/debian-archive-keyring.gpg")


@dataclass(frozen=True)
class Archive:
    root: Path
    mirror: str = MIRROR

    @property
    def config(self) -> Path:
        return self.root / "apt.conf"

    @property
    def debs(self) -> Path:
        return self.root / "debs"

    def setup(self) -> None:
        for sub in ("state/lists/partial", "cache/archives/partial", "debs"):
            (self.root / sub).mkdir(parents=True, exist_ok=True)
        (self.root / "state" / "status").touch()
        sources = f"deb [signed-by={KEYRING}] {self.mirror} {SUITE} main contrib non-free\n"
        if self.mirror == MIRROR:  # the security suite holds the other 6.12 kernels' ABIs
            sources += (
                f"deb [signed-by={KEYRING}] {SECURITY_MIRROR} {SUITE}-security "
                "main contrib non-free\n"
            )
        (self.root / "sources.list").write_text(sources)
        self.config.write_text(
            "\n".join(
                [
                    f'Dir::Etc::SourceList "{self.root}/sources.list";',
                    'Dir::Etc::SourceParts "/nonexistent";',
                    'Dir::Etc::Preferences "/nonexistent";',
                    'Dir::Etc::PreferencesParts "/nonexistent";',
                    f'Dir::State "{self.root}/state";',
                    f'Dir::State::status "{self.root}/state/status";',
                    f'Dir::Cache "{self.root}/cache";',
                    'APT::Architecture "amd64";',
                    'APT::Architectures { "amd64"; };',
                    'Acquire::Languages "none";',
                    'Acquire::Retries "2";',
                    "",
                ]
            )
        )

    def apt(self, *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["apt-get", "-q", "-c", str(self.config), *args],
            capture_output=True,
            text=True,
            timeout=900,
            check=False,
            cwd=cwd,
        )

    def update(self) -> None:
        """Refresh the index; an unreachable archive is fine while a cached index exists."""
        self.setup()
        result = self.apt("update")
        lists = list((self.root / "state" / "lists").glob("*Packages*"))
        failed = result.returncode != 0 or "Failed to fetch" in result.stderr
        if failed and not lists:
            raise UnavailableError(
                f"Debian's archive ({self.mirror} {SUITE}) is unreachable: "
                + (result.stderr.strip().splitlines() or ["no output"])[-1]
            )

    def candidate(self, package: str) -> str:
        result = subprocess.run(
            ["apt-cache", "-c", str(self.config), "policy", package],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        match = re.search(r"^\s*Candidate: (\S+)", result.stdout, re.MULTILINE)
        if match is None or match[1] == "(none)":
            raise UnavailableError(f"stand-in package {package} is not in Debian {SUITE}")
        return match[1]

    def names(self, prefix: str) -> list[str]:
        """Package names in the index that start with ``prefix``."""
        result = subprocess.run(
            ["apt-cache", "-c", str(self.config), "pkgnames", prefix],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        return sorted(set(result.stdout.split()))

    def depends(self, package: str) -> list[str]:
        result = subprocess.run(
            ["apt-cache", "-c", str(self.config), "depends", package],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        return re.findall(r"^\s*Depends: (\S+)", result.stdout, re.MULTILINE)

    def download(self, package: str, version: str) -> Path:
        """The package's .deb, from the cache or the archive."""
        for cached in self.debs.glob(f"{package}_*.deb"):
            if unquote(cached.name.split("_")[1]) == version:
                return cached
        result = self.apt("download", f"{package}={version}", cwd=self.debs)
        found = [
            path
            for path in self.debs.glob(f"{package}_*.deb")
            if unquote(path.name.split("_")[1]) == version
        ]
        if result.returncode != 0 or not found:
            last = (result.stderr.strip().splitlines() or ["no output"])[-1]
            raise UnavailableError(f"stand-in package {package}={version} not downloaded: {last}")
        return found[0]


def extract(deb: Path, into: Path) -> None:
    run(["dpkg-deb", "-x", deb, into], what=f"dpkg-deb -x {deb.name}")


def base_image_tar(archive: Archive) -> Path:
    """``mmdebstrap --mode=unshare --variant=minbase trixie`` as a tar in the cache."""
    key = archive.candidate("libc6")
    tar = CACHE / "base" / f"trixie-minbase-libc6-{key}.tar"
    if tar.exists():
        return tar
    tar.parent.mkdir(parents=True, exist_ok=True)
    partial = tar.with_suffix(".partial.tar")
    result = subprocess.run(
        [
            "mmdebstrap",
            "--mode=unshare",
            "--variant=minbase",
            "--format=tar",
            "--quiet",
            SUITE,
            str(partial),
            f"deb [signed-by={KEYRING}] {MIRROR} {SUITE} main",
        ],
        capture_output=True,
        text=True,
        errors="replace",
        timeout=1800,
        check=False,
    )
    if result.returncode != 0:
        partial.unlink(missing_ok=True)
        raise UnavailableError(
            "mmdebstrap of Debian trixie failed: "
            + (result.stderr.strip().splitlines() or ["no output"])[-1]
        )
    partial.rename(tar)
    return tar
