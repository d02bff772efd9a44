"""An independent verifier for tests: skopeo with sigstore support, and its configuration.

Debian 12's skopeo (1.9) is built with sigstore verification disabled ("Debian-local
change: sigstore disabled"); Debian 13's skopeo 1.18 has it. ``.ci/skopeo-sigstore``
unpacks Debian 13's skopeo and its libraries into a directory and writes a wrapper that runs
it with their own loader; ``TEST_SKOPEO_SIGSTORE`` names that wrapper. Without it the
system's skopeo is used when it is not the 1.9 build. Missing: skipped here, failed in CI.

``skopeo_copy`` runs ``skopeo copy`` under a ``policy.json`` that requires a
``sigstoreSigned`` signature by the public key for the repository (identity
``matchRepository``, as cosign records the repository without the tag) and a
``registries.d`` with ``use-sigstore-attachments: true`` for the registry host.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from tests.support.tools import missing_tool


@dataclass(frozen=True)
class Skopeo:
    binary: str
    workdir: Path

    def copy(
        self, reference: str, public_key: bytes, *, repository: str, all_images: bool = False
    ) -> subprocess.CompletedProcess[str]:
        """``skopeo copy docker://reference`` into a fresh directory under the policy."""
        key = self.workdir / "cosign.pub"
        key.write_bytes(public_key)
        policy = {
            "default": [{"type": "reject"}],
            "transports": {
                "docker": {
                    repository: [
                        {
                            "type": "sigstoreSigned",
                            "keyPath": str(key),
                            "signedIdentity": {"type": "matchRepository"},
                        }
                    ]
                }
            },
        }
        (self.workdir / "policy.json").write_text(json.dumps(policy))
        registries = self.workdir / "registries.d"
        registries.mkdir(exist_ok=True)
        host = repository.split("/", 1)[0]
        (registries / "releasebot-test.yaml").write_text(
            f"docker:\n  {host}:\n    use-sigstore-attachments: true\n"
        )
        target = self.workdir / f"copy-{len(list(self.workdir.glob('copy-*')))}"
        argv = [
            self.binary,
            "--policy", str(self.workdir / "policy.json"),
            "--registries.d", str(registries),
            "copy", "--src-tls-verify=false", "--remove-signatures",
            *(["--all"] if all_images else []),
            f"docker://{reference}", f"dir:{target}",
        ]  # fmt: skip
        environment = {**os.environ, "HOME": str(self.workdir)}
        return subprocess.run(argv, capture_output=True, text=True, timeout=60, env=environment)


def find_skopeo(workdir: Path) -> Skopeo:
    wrapper = os.environ.get("TEST_SKOPEO_SIGSTORE")
    if wrapper and Path(wrapper).is_file():
        return Skopeo(wrapper, workdir)
    system = shutil.which("skopeo")
    if system is not None:
        version = subprocess.run([system, "--version"], capture_output=True, text=True).stdout
        if " 1.9." not in version:
            return Skopeo(system, workdir)
    missing_tool(
        "no skopeo with sigstore support (Debian 12's is built without it): run "
        ".ci/skopeo-sigstore DIR and set TEST_SKOPEO_SIGSTORE=DIR/skopeo"
    )
