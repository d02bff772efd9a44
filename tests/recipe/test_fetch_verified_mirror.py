"""``fetch-verified`` against the signed loopback mirror of the stand-in release.

The mirror has the Flatcar layout and format (``<channel>/amd64-usr/<version>/``, DIGESTS
with MD5, SHA1 and SHA512 sections, clearsigned ``.asc`` by a throwaway key whose primary
certifies only and whose subkey signs). The good release is accepted with the stand-in
container tarball, vmlinuz and kernel config as they are; a release with a file changed
after signing, one signed by a foreign key, one whose ``.asc`` is not signed and one
without ``.asc`` are refused with the documented exit codes and one-line messages. The
image build fetches the same good release through the same mirror.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.recipe.mirror import BAD_RELEASES, BOARD, CHANNEL, FILES, VERSION, Key, Mirror
from tests.recipe.parts import RECIPE

SCRIPT = RECIPE / "scripts" / "fetch-verified"


def fetch(
    mirror: Mirror, key: Key, version: str, dest: Path, *files: str
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            "bash",
            str(SCRIPT),
            "flatcar",
            "--base-url",
            mirror.flatcar_base_url,
            "--channel",
            CHANNEL,
            "--version",
            version,
            "--board",
            BOARD,
            "--fingerprint",
            key.fingerprint,
            "--key-url",
            mirror.key_url,
            "--dest",
            str(dest),
            *files,
        ],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
        env={**os.environ, "FETCH_RETRIES": "0"},
    )


def test_the_good_release_is_accepted_as_published(
    mirror: Mirror, keys: tuple[Key, Key], tmp_path: Path
) -> None:
    result = fetch(mirror, keys[0], VERSION, tmp_path)
    assert result.returncode == 0, result.stderr
    for name in FILES:
        assert (tmp_path / name).read_bytes() == (
            mirror.root / CHANNEL / BOARD / VERSION / name
        ).read_bytes()
        assert f"{name}: SHA512 matches DIGESTS signed by {keys[0].fingerprint}" in result.stderr


@pytest.mark.parametrize(
    ("case", "code", "message"),
    [
        ("tampered", 65, "SHA512 mismatch for flatcar_production_image_kernel_config.txt"),
        ("foreign-key", 66, "DIGESTS for flatcar_production_image_kernel_config.txt not signed by"),
        ("unsigned", 66, "DIGESTS for flatcar_production_image_kernel_config.txt not signed by"),
        (
            "no-signature",
            75,
            "waiting: flatcar_production_image_kernel_config.txt.DIGESTS.asc not published yet",
        ),
    ],
)
def test_a_bad_release_is_refused(
    mirror: Mirror, keys: tuple[Key, Key], tmp_path: Path, case: str, code: int, message: str
) -> None:
    result = fetch(mirror, keys[0], BAD_RELEASES[case], tmp_path, FILES[2])
    assert result.returncode == code, result.stderr
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith(message), last
    assert not (tmp_path / FILES[2]).exists()
