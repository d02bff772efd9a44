"""A real cosign for tests: Debian 13's cosign 2.5, unpacked aside by ``.ci/cosign``.

``TEST_COSIGN`` names the binary (``.ci/run`` sets it); without it a ``cosign`` on
``PATH`` is used. Missing: skipped here, failed in CI (``tests.support.tools``).

What the tests ask of it: ``generate-key-pair`` (the keys people make by following the
docs), ``public-key`` (whether cosign reads a key releasebot wrote), and ``verify`` /
``verify-attestation`` against a registry on loopback over plain HTTP, keyed, without
a transparency log (releasebot makes no Rekor entries). cosign gets a HOME of its own so
nothing of the user's (a TUF cache, a docker config) takes part.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from tests.support.tools import missing_tool

TIMEOUT = 120
"""Seconds for one cosign command: scrypt and a few registry requests on loopback."""


@dataclass(frozen=True)
class Cosign:
    binary: str
    workdir: Path

    def run(
        self, *args: str, password: str | None = None, cwd: Path | None = None
    ) -> subprocess.CompletedProcess[str]:
        home = self.workdir / "home"
        home.mkdir(parents=True, exist_ok=True)
        environment = {
            "HOME": str(home),
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "DOCKER_CONFIG": str(home / ".docker"),
            "TUF_ROOT": str(home / ".sigstore"),
        }
        if password is not None:
            environment["COSIGN_PASSWORD"] = password
        return subprocess.run(
            [self.binary, *args],
            capture_output=True,
            text=True,
            timeout=TIMEOUT,
            env=environment,
            cwd=cwd or self.workdir,
            stdin=subprocess.DEVNULL,
        )

    def generate_key_pair(self, directory: Path, password: str) -> tuple[Path, Path]:
        """``cosign generate-key-pair`` in ``directory``: ``(cosign.key, cosign.pub)``."""
        directory.mkdir(parents=True, exist_ok=True)
        made = self.run("generate-key-pair", password=password, cwd=directory)
        assert made.returncode == 0, made.stderr
        return directory / "cosign.key", directory / "cosign.pub"

    def public_key(self, key: Path, password: str) -> subprocess.CompletedProcess[str]:
        return self.run("public-key", "--key", str(key), password=password)

    def verify(self, reference: str, public: Path, *extra: str) -> subprocess.CompletedProcess[str]:
        return self.run("verify", "--key", str(public), *_keyed_on_loopback(), *extra, reference)

    def verify_attestation(
        self, reference: str, public: Path, kind: str
    ) -> subprocess.CompletedProcess[str]:
        return self.run(
            "verify-attestation",
            "--key", str(public), "--type", kind, *_keyed_on_loopback(), reference,
        )  # fmt: skip


def _keyed_on_loopback() -> list[str]:
    # No Rekor entry is made (releasebot signs keyed, offline), and the test registry
    # speaks plain HTTP on 127.0.0.1.
    return ["--insecure-ignore-tlog=true", "--allow-http-registry", "--allow-insecure-registry"]


def find_cosign(workdir: Path) -> Cosign:
    workdir.mkdir(parents=True, exist_ok=True)
    configured = os.environ.get("TEST_COSIGN")
    if configured and Path(configured).is_file():
        return Cosign(configured, workdir)
    system = shutil.which("cosign")
    if system is not None:
        return Cosign(system, workdir)
    missing_tool("no cosign: run .ci/cosign DIR and set TEST_COSIGN to the path it prints")
