"""The recipe's banner extraction (``releasebot/recipe/scripts/kernel-banner``).

mkprecompiled packs the string the node's ``/proc/version`` must equal, so the recipe reads
the release's own "Linux version ..." banner out of its vmlinuz. These tests build fake
kernel images the way real ones are laid out (a decompressor stub with random bytes, then
an xz, gzip or zstd payload holding the banner, then trailing bytes; or an uncompressed
arm64-style Image) and check that the banner comes out byte for byte, that the release
filter picks the right one, and that an image without the banner fails (exit 1). Every
kernel from 6.1 on holds two banners, the provisional ``__weak`` one (``# SMP``, no build
number) linked first and the real one (``#1 SMP``) that ``/proc/version`` shows: the real
one must win, and distinct real candidates must be refused, each named.
"""

from __future__ import annotations

import gzip
import lzma
import random
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.support.tools import missing_tool

SCRIPT = Path(__file__).resolve().parents[2] / "releasebot" / "recipe" / "scripts" / "kernel-banner"
RELEASE = "6.12.102-flatcar"
BUILDER = (
    f"Linux version {RELEASE} (build@pony-truck.infra.kinvolk.io) "
    "(x86_64-cros-linux-gnu-gcc (Gentoo Hardened 14.3.0 p8) 14.3.0, GNU ld (Gentoo 2.44 p1) "
    "2.44.0)"
)
BANNER = f"{BUILDER} #1 SMP PREEMPT_DYNAMIC Tue Aug 12 19:58:16 -00 2026"
PROVISIONAL = f"{BUILDER} # SMP PREEMPT_DYNAMIC Tue Aug 12 19:58:16 -00 2026"
"""The __weak banner of init/version.c: no build number after the '#'."""
MAGICS = (b"\xfd7zXZ\x00", b"\x1f\x8b\x08", b"\x28\xb5\x2f\xfd")


def noise(size: int, seed: int) -> bytes:
    """Random bytes without any compression magic (a seeded, repeatable stand-in for code)."""
    data = random.Random(seed).randbytes(size)
    for magic in MAGICS:
        data = data.replace(magic, b"\x00" * len(magic))
    return data.replace(b"Linux version", b"linux_version")


def kernel(*banners: str) -> bytes:
    """What a decompressed kernel looks like around linux_banner: code, strings, code."""
    strings = b"".join(b"\x00" + banner.encode() + b"\n\x00" for banner in banners)
    # A format string that is not a banner must not be taken for one.
    return noise(20000, 1) + b"\x00Linux version %s\x00" + strings + noise(20000, 2)


def bzimage(payload: bytes) -> bytes:
    return noise(4096, 3) + payload + noise(800, 4)


def run(image: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(SCRIPT), str(image), *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@pytest.mark.parametrize(
    "compress",
    [
        pytest.param(lambda data: lzma.compress(data, format=lzma.FORMAT_XZ), id="xz"),
        pytest.param(gzip.compress, id="gzip"),
    ],
)
def test_the_banner_comes_out_of_a_compressed_bzimage(
    tmp_path: Path, compress: Callable[[bytes], bytes]
) -> None:
    image = tmp_path / "vmlinuz"
    image.write_bytes(bzimage(compress(kernel(BANNER))))
    result = run(image, RELEASE)
    assert result.returncode == 0, result.stderr
    assert result.stdout == BANNER + "\n"


def test_a_zstd_payload_is_read_too(tmp_path: Path) -> None:
    if shutil.which("zstd") is None:
        missing_tool("zstd is not installed")
    raw = tmp_path / "kernel"
    raw.write_bytes(kernel(BANNER))
    subprocess.run(["zstd", "-q", "-f", str(raw), "-o", str(tmp_path / "kernel.zst")], check=True)
    image = tmp_path / "vmlinuz"
    image.write_bytes(bzimage((tmp_path / "kernel.zst").read_bytes()))
    assert run(image, RELEASE).stdout == BANNER + "\n"


def test_an_uncompressed_image_is_read_as_it_is(tmp_path: Path) -> None:
    image = tmp_path / "Image"
    image.write_bytes(kernel(BANNER))
    result = run(image)
    assert result.returncode == 0, result.stderr
    assert result.stdout == BANNER + "\n"


def test_the_release_filter_skips_other_banners(tmp_path: Path) -> None:
    other = BANNER.replace(RELEASE, "5.15.0-flatcar")
    image = tmp_path / "vmlinuz"
    image.write_bytes(bzimage(lzma.compress(kernel(other, BANNER), format=lzma.FORMAT_XZ)))
    assert run(image, RELEASE).stdout == BANNER + "\n"


@pytest.mark.parametrize("release", [RELEASE, ""])
def test_the_real_banner_wins_over_the_provisional_one(tmp_path: Path, release: str) -> None:
    # The layout of every 6.1+ kernel: the __weak banner is linked first.
    image = tmp_path / "vmlinuz"
    image.write_bytes(bzimage(lzma.compress(kernel(PROVISIONAL, BANNER), format=lzma.FORMAT_XZ)))
    result = run(image, *([release] if release else []))
    assert result.returncode == 0, result.stderr
    assert result.stdout == BANNER + "\n"


def test_the_same_real_banner_twice_is_one_banner(tmp_path: Path) -> None:
    image = tmp_path / "Image"
    image.write_bytes(kernel(BANNER, PROVISIONAL, BANNER))
    assert run(image, RELEASE).stdout == BANNER + "\n"


def test_distinct_real_banners_are_refused_and_named(tmp_path: Path) -> None:
    rebuilt = BANNER.replace("#1 SMP", "#2 SMP")
    image = tmp_path / "vmlinuz"
    image.write_bytes(bzimage(gzip.compress(kernel(PROVISIONAL, BANNER, rebuilt))))
    result = run(image, RELEASE)
    assert result.returncode == 1
    assert result.stdout == ""
    assert "2 different kernel banners; refusing to guess" in result.stderr
    assert f"  {BANNER}\n" in result.stderr
    assert f"  {rebuilt}\n" in result.stderr
    assert PROVISIONAL not in result.stderr


def test_only_a_provisional_banner_is_no_banner(tmp_path: Path) -> None:
    image = tmp_path / "vmlinuz"
    image.write_bytes(bzimage(gzip.compress(kernel(PROVISIONAL))))
    result = run(image, RELEASE)
    assert result.returncode == 1
    assert f'no "Linux version {RELEASE}" banner' in result.stderr


def test_no_banner_for_the_release_fails(tmp_path: Path) -> None:
    image = tmp_path / "vmlinuz"
    image.write_bytes(bzimage(gzip.compress(kernel(BANNER))))
    result = run(image, "6.12.103-flatcar")
    assert result.returncode == 1
    assert result.stdout == ""
    assert 'no "Linux version 6.12.103-flatcar" banner' in result.stderr


def test_usage(tmp_path: Path) -> None:
    assert run(tmp_path / "missing").returncode == 64
