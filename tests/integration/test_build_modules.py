"""The recipe's unprivileged preparation of a Flatcar build tree (``scripts/build-modules``).

``build-modules prepare`` runs on a hand-made ``flatcar-container.tar.gz`` laid out like
the real one (members start with ``./``; ``/usr/lib/modules/<kv>/build`` with host tools;
``/usr/lib64`` with the loader and libc, here copies of this machine's), into temporary
directories instead of ``/lib/modules``. Covers: only the module tree and ``/usr/lib64``
are extracted and the tarball is deleted; every dynamically linked host tool is pointed at
the tarball's loader (and still runs), scripts and static files are left alone; the banner
is read from the vmlinuz; a tarball without the kernel's tree, a tree without
``Module.symvers`` and a vmlinuz without the banner stop the build with a message. And
``build-modules gcc-major``: the compiler major from ``CONFIG_GCC_VERSION``, refusing
clang-built kernels and configs without it. Only the tools kbuild runs for an external
module (fixdep, modpost, objtool, genksyms, recordmcount) must resolve with the tarball's
loader: one of them that does not stops the build with its name, any other tool that does
not (sign-file, needing a library the tarball lacks) is left as it was with a warning.
``build`` is covered by ``test_build_modules_build.py``, the real compile by ``tests/recipe``.
"""

from __future__ import annotations

import gzip
import io
import os
import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest

from tests.support.tools import missing_tool

SCRIPT = Path(__file__).resolve().parents[2] / "releasebot" / "recipe" / "scripts" / "build-modules"
KV = "6.12.102-flatcar"
BANNER = f"Linux version {KV} (build@host) (gcc 14.3.0, GNU ld 2.44) #1 SMP PREEMPT_DYNAMIC 2026"
CONFIG = 'CONFIG_CC_VERSION_TEXT="x86_64-cros-linux-gnu-gcc 14.3.0"\nCONFIG_GCC_VERSION=140300\n'


def require(tool: str) -> str:
    path = shutil.which(tool)
    if path is None:
        if os.environ.get("CI"):
            pytest.fail(f"{tool} is not installed; CI must install it (apt-get install {tool})")
        missing_tool(f"{tool} is not installed")
    return path


def host_loader_and_libc() -> tuple[Path, Path]:
    interp = subprocess.run(
        ["patchelf", "--print-interpreter", "/usr/bin/true"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    ldd = subprocess.run(["ldd", "/usr/bin/true"], capture_output=True, text=True, check=True)
    libc = next(
        line.split("=>")[1].split()[0] for line in ldd.stdout.splitlines() if "libc.so" in line
    )
    return Path(os.path.realpath(interp)), Path(libc)


def needing_a_missing_library(work: Path) -> bytes:
    """/usr/bin/true, asking for a library no tarball has (as sign-file asks libcrypto)."""
    work.mkdir(parents=True, exist_ok=True)
    tool = work / "needy"
    shutil.copy("/usr/bin/true", tool)
    subprocess.run(["patchelf", "--add-needed", "libreleasebot-absent.so.9", str(tool)], check=True)
    return tool.read_bytes()


def make_tarball(
    path: Path,
    *,
    kv: str = KV,
    symvers: bool = True,
    needy: tuple[str, ...] = (),
    without: tuple[str, ...] = (),
) -> str:
    """A container tarball; returns the loader's name under /usr/lib64. ``needy`` tools
    want a library the tarball lacks; ``without`` tools are left out."""
    require("patchelf")
    loader, libc = host_loader_and_libc()
    true = Path("/usr/bin/true").read_bytes()
    lacking = needing_a_missing_library(path.parent / "needy") if needy else b""
    build = f"./usr/lib/modules/{kv}/build"
    tools = {
        "scripts/basic/fixdep": true,
        "scripts/mod/modpost": true,
        "tools/objtool/objtool": true,
        "scripts/sign-file": true,
    }
    entries: list[tuple[str, bytes, int]] = [
        (f"{build}/Makefile", b"# kernel Makefile\n", 0o644),
        (f"{build}/.config", CONFIG.encode(), 0o644),
        *(
            (f"{build}/{name}", lacking if name in needy else data, 0o755)
            for name, data in tools.items()
            if name not in without
        ),
        (f"{build}/scripts/checkstack.pl", b"#!/usr/bin/perl\n", 0o755),
        (f"./usr/lib/modules/{kv}/kernel/drivers/i2c/i2c-core.ko.xz", b"xz", 0o644),
        (f"./usr/lib64/{loader.name}", loader.read_bytes(), 0o755),
        ("./usr/lib64/libc.so.6", libc.read_bytes(), 0o755),
        ("./usr/share/flatcar/release", b"FLATCAR_RELEASE_VERSION=4593.2.5\n", 0o644),
    ]
    if symvers:
        entries.append(
            (f"{build}/Module.symvers", b"0x0\tprintk\tvmlinux\tEXPORT_SYMBOL\t\n", 0o644)
        )
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for name, data, mode in entries:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            info.mode = mode
            tar.addfile(info, io.BytesIO(data))
    path.write_bytes(gzip.compress(buffer.getvalue()))
    return loader.name


def vmlinuz(path: Path, banner: str = BANNER) -> Path:
    path.write_bytes(b"MZ stub\x00" * 100 + gzip.compress(b"\x00" + banner.encode() + b"\n\x00"))
    return path


def prepare(tmp_path: Path, tarball: Path, image: Path) -> subprocess.CompletedProcess[str]:
    config = tmp_path / "kernel_config.txt"
    config.write_text(CONFIG)
    return subprocess.run(
        [
            "bash",
            str(SCRIPT),
            "prepare",
            "--tarball",
            str(tarball),
            "--kernel-version",
            KV,
            "--flatcar-root",
            str(tmp_path / "flatcar"),
            "--vmlinuz",
            str(image),
            "--kernel-config",
            str(config),
            "--modules-dir",
            str(tmp_path / "modules"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_prepare_extracts_relocates_and_reads_the_banner(tmp_path: Path) -> None:
    tarball = tmp_path / "flatcar-container.tar.gz"
    loader_name = make_tarball(tarball)
    result = prepare(tmp_path, tarball, vmlinuz(tmp_path / "vmlinuz"))
    assert result.returncode == 0, result.stderr

    assert not tarball.exists()
    flatcar = tmp_path / "flatcar"
    assert (flatcar / "banner").read_text() == BANNER + "\n"
    assert not (flatcar / "usr" / "share").exists()  # only what the build needs
    tree = tmp_path / "modules" / KV / "build"
    assert (tmp_path / "modules" / KV / "kernel" / "drivers" / "i2c" / "i2c-core.ko.xz").exists()
    loader = flatcar / "usr" / "lib64" / loader_name
    for tool in (tree / "scripts/basic/fixdep", tree / "tools/objtool/objtool"):
        interp = subprocess.run(
            ["patchelf", "--print-interpreter", str(tool)],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        assert interp == str(loader)
        rpath = subprocess.run(
            ["patchelf", "--print-rpath", str(tool)], capture_output=True, text=True, check=True
        ).stdout.strip()
        assert rpath.startswith(f"{flatcar}/usr/lib64:")
        assert subprocess.run([str(tool)], check=False, timeout=30).returncode == 0
    assert (tree / "scripts/checkstack.pl").read_bytes() == b"#!/usr/bin/perl\n"
    assert "host tools relocated to Flatcar's loader: 4\n" in result.stderr


def test_a_tool_kbuild_does_not_run_may_lack_libraries(tmp_path: Path) -> None:
    tarball = tmp_path / "flatcar-container.tar.gz"
    make_tarball(tarball, needy=("scripts/sign-file",))
    result = prepare(tmp_path, tarball, vmlinuz(tmp_path / "vmlinuz"))
    assert result.returncode == 0, result.stderr
    assert "warning: scripts/sign-file lacks libraries: libreleasebot-absent.so.9" in result.stderr
    assert "host tools relocated to Flatcar's loader: 3 (1 others left alone)" in result.stderr
    tree = tmp_path / "modules" / KV / "build"
    interp = subprocess.run(
        ["patchelf", "--print-interpreter", str(tree / "scripts/sign-file")],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert not interp.startswith(str(tmp_path))  # put back as it was


@pytest.mark.parametrize("tool", ["scripts/mod/modpost", "tools/objtool/objtool"])
def test_a_tool_kbuild_runs_must_resolve(tmp_path: Path, tool: str) -> None:
    tarball = tmp_path / "flatcar-container.tar.gz"
    make_tarball(tarball, needy=(tool,))
    result = prepare(tmp_path, tarball, vmlinuz(tmp_path / "vmlinuz"))
    assert result.returncode == 1
    assert f"ERROR: {tool} lacks libraries: libreleasebot-absent.so.9" in result.stderr


def test_a_tree_without_modpost_stops_the_build(tmp_path: Path) -> None:
    tarball = tmp_path / "flatcar-container.tar.gz"
    make_tarball(tarball, without=("scripts/mod/modpost",))
    result = prepare(tmp_path, tarball, vmlinuz(tmp_path / "vmlinuz"))
    assert result.returncode == 1
    assert "the build tree has no scripts/.../modpost" in result.stderr


def test_a_tarball_without_the_kernel_tree_stops_the_build(tmp_path: Path) -> None:
    tarball = tmp_path / "flatcar-container.tar.gz"
    make_tarball(tarball, kv="6.12.101-flatcar")
    result = prepare(tmp_path, tarball, vmlinuz(tmp_path / "vmlinuz"))
    assert result.returncode != 0
    assert f"the container tarball lacks ./usr/lib/modules/{KV}" in result.stderr


def test_a_tree_without_module_symvers_stops_the_build(tmp_path: Path) -> None:
    tarball = tmp_path / "flatcar-container.tar.gz"
    make_tarball(tarball, symvers=False)
    result = prepare(tmp_path, tarball, vmlinuz(tmp_path / "vmlinuz"))
    assert result.returncode != 0
    assert "has no Module.symvers" in result.stderr


def test_a_vmlinuz_of_another_kernel_stops_the_build(tmp_path: Path) -> None:
    tarball = tmp_path / "flatcar-container.tar.gz"
    make_tarball(tarball)
    image = vmlinuz(tmp_path / "vmlinuz", BANNER.replace(KV, "6.12.101-flatcar"))
    result = prepare(tmp_path, tarball, image)
    assert result.returncode != 0
    assert f"no 'Linux version {KV}' banner" in result.stderr


@pytest.mark.parametrize(
    ("config", "expected"),
    [
        (CONFIG, "14"),
        ("CONFIG_GCC_VERSION=130300\n", "13"),
        ("CONFIG_GCC_VERSION=150100\n", "15"),
    ],
)
def test_gcc_major_comes_from_the_kernel_config(tmp_path: Path, config: str, expected: str) -> None:
    path = tmp_path / "config"
    path.write_text(config)
    result = subprocess.run(
        ["bash", str(SCRIPT), "gcc-major", "--kernel-config", str(path)],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout == f"{expected}\n"


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ("CONFIG_CC_IS_CLANG=y\nCONFIG_CLANG_VERSION=180000\n", "built with clang"),
        ("CONFIG_64BIT=y\n", "no CONFIG_GCC_VERSION"),
    ],
)
def test_gcc_major_refuses_what_it_cannot_build_with(
    tmp_path: Path, config: str, message: str
) -> None:
    path = tmp_path / "config"
    path.write_text(config)
    result = subprocess.run(
        ["bash", str(SCRIPT), "gcc-major", "--kernel-config", str(path)],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert result.returncode != 0
    assert message in result.stderr
