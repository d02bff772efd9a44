"""What the suite does when a stand-in cannot be had: one line, failed in CI, skipped else.

Runs without the suite's heavy fixtures: a private apt configuration pointed at a closed
loopback port stands for an unreachable archive, and a small pytest run in a subprocess
shows how ``unavailable`` reports it with and without ``CI``.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.recipe.debian import Archive
from tests.recipe.parts import REPO, UnavailableError

CLOSED = "http://127.0.0.1:9/debian"


def test_an_unreachable_archive_is_named(tmp_path: Path) -> None:
    with pytest.raises(UnavailableError) as caught:
        Archive(tmp_path / "apt", CLOSED).update()
    assert str(caught.value).startswith(f"Debian's archive ({CLOSED} trixie) is unreachable")
    assert "\n" not in str(caught.value)


def test_a_package_that_cannot_be_downloaded_is_named(tmp_path: Path) -> None:
    archive = Archive(tmp_path / "apt", CLOSED)
    archive.setup()
    with pytest.raises(UnavailableError) as caught:
        archive.download("nvidia-kernel-source", "550.163.01-2")
    assert str(caught.value).startswith(
        "stand-in package nvidia-kernel-source=550.163.01-2 not downloaded"
    )
    assert "\n" not in str(caught.value)


@pytest.mark.parametrize("ci", [True, False])
def test_ci_fails_with_one_line_and_a_user_skips(tmp_path: Path, ci: bool) -> None:
    probe = tmp_path / "test_probe.py"
    probe.write_text(
        "from tests.recipe.parts import unavailable\n\n"
        "def test_needs_a_standin():\n"
        "    unavailable('stand-in package nvidia-kernel-source=550.163.01-2 not downloaded')\n"
    )
    env = {key: value for key, value in os.environ.items() if key != "CI"}
    if ci:
        env["CI"] = "true"
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-rs",
            "-p",
            "no:cacheprovider",
            "-p",
            "no:kmock",
            "--rootdir",
            str(tmp_path),
            "-c",
            "/dev/null",
            str(probe),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env=env,
        cwd=REPO,
    )
    reason = "stand-in package nvidia-kernel-source=550.163.01-2 not downloaded"
    if ci:
        assert result.returncode == 1, result.stdout
        failures = [line for line in result.stdout.splitlines() if reason in line]
        assert failures
        assert all("Traceback" not in line for line in failures)
        assert "CI is set: this is an error, not a skip" in result.stdout
        assert "Traceback" not in result.stdout
    else:
        assert result.returncode == 0, result.stdout
        assert "1 skipped" in result.stdout
        assert f": {reason}\n" in result.stdout
