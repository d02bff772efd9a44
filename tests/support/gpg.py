"""``gpg`` in a throwaway home, without prompts, for the tests that sign and verify."""

from __future__ import annotations

import subprocess
from pathlib import Path


def gpg(home: Path, *args: str, faked: int | None = None) -> str:
    """Run gpg on ``home`` with ``args`` (at the faked Unix time ``faked`` if given); its
    standard output. A failure fails the test with gpg's own message."""
    command = ["gpg", "--homedir", str(home), "--batch", "--passphrase", ""]
    command += ["--pinentry-mode", "loopback"]
    if faked is not None:
        command += ["--faked-system-time", f"{faked}!"]
    result = subprocess.run(
        [*command, *args], capture_output=True, text=True, timeout=120, check=False
    )
    assert result.returncode == 0, result.stderr
    return result.stdout
