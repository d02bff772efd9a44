"""The stand-ins for one Flatcar release and one NVIDIA runfile, made from Debian packages.

What stands in for what (``docs/recipe.md`` says what this cannot prove):

- ``flatcar-container.tar.gz``: Debian trixie's kernel build tree (``linux-headers-<kv>``,
  its ``-common`` and ``linux-kbuild``) merged into ONE self-contained tree at
  ``./usr/lib/modules/<kv>/build`` with ``source -> build`` (the upstream layout Flatcar
  ships from 4593), the dependency closure of the in-tree modules NVIDIA's need (drm,
  video, ipmi, ib_core...) as ``.ko.xz``, and ``./usr/lib64`` with trixie's loader, libc,
  libelf, libz, libzstd and libcrypto (Flatcar's glibc is newer than the builder's as a
  rule; here they are equal). Debian's headers ship a ``vmlinux`` for BTF; it is left out,
  as Flatcar's tree is assumed not to have one (else kbuild would need ``pahole``).
- ``flatcar_production_image.vmlinuz`` and ``..._kernel_config.txt``: ``/boot/vmlinuz-<kv>``
  and ``/boot/config-<kv>`` of ``linux-image-<kv>-unsigned``.
- ``NVIDIA-Linux-x86_64-<ver>.run``: a self-extracting shell archive in the ``.run``
  layout (``kernel/`` from ``nvidia-kernel-source``, ``kernel-open/`` from
  ``nvidia-open-kernel-source``, ``mkprecompiled`` built from the vendored
  nvidia-installer sources, ``firmware/``), with the three entry points the recipe uses:
  ``--check`` (an embedded SHA-256 of the payload), ``--extract-only --target DIR``, and
  the installer, which accepts only options nvidia-installer 535 has and lays out
  PLACEHOLDER user space (``nvidia-smi``, ``nvidia-persistenced``, a ``libnvidia-ml.so.1``
  exporting one dummy symbol, GSP firmware files holding text).

One adaptation is made to NVIDIA's open source, never to the recipe, and printed: the
trixie kernels declare ``pci_resize_resource()`` with a fourth argument (``exclude_bars``)
that Debian's 550 source does not pass; it is given ``0``.

Deliberately not here: downloading (``debian.py``), signing and serving (``mirror.py``).
"""

from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from tests.recipe.debian import Archive, extract
from tests.recipe.parts import CACHE, VENDOR, UnavailableError, digest, run

ARCH_FLAVOUR = "amd64"
IN_TREE_ROOTS = (
    *("drm", "drm_kms_helper", "drm_ttm_helper", "ttm", "video", "wmi", "backlight"),
    *("i2c-algo-bit", "ipmi_msghandler", "ipmi_devintf", "ib_core", "ib_uverbs"),
)
LIBRARIES = (
    "ld-linux-x86-64.so.2",
    "libc.so.6",
    "libelf.so.1",
    "libz.so.1",
    "libzstd.so.1",
    "libcrypto.so.3",
)
LIBRARY_PACKAGES = ("libc6", "libelf1t64", "zlib1g", "libzstd1", "libssl3t64")
INSTALLER_SOURCES = VENDOR / "nvidia-installer-535.113.01"
HERE = Path(__file__).resolve().parent


@dataclass(frozen=True)
class Standins:
    root: Path
    kernel_version: str
    driver_version: str
    versions: tuple[tuple[str, str], ...]

    @property
    def flatcar(self) -> Path:
        """The release's files as the release server names them."""
        return self.root / "flatcar"

    @property
    def runfile(self) -> Path:
        return self.root / "nvidia" / f"NVIDIA-Linux-x86_64-{self.driver_version}.run"

    @property
    def mkprecompiled(self) -> Path:
        return self.root / "mkprecompiled"

    @property
    def vmlinuz(self) -> Path:
        return self.flatcar / "flatcar_production_image.vmlinuz"

    @property
    def modules(self) -> Path:
        """The release's in-tree module tree (as in the tarball), for the QEMU initrd."""
        return self.root / "modules" / self.kernel_version

    @property
    def adaptations(self) -> str:
        return (self.root / "ADAPTATIONS").read_text()


def newest_abi(archive: Archive) -> str:
    """The kernel ABI (``6.12.118+deb13-amd64``) ``linux-image-amd64`` depends on."""
    image = next(
        (dep for dep in archive.depends(f"linux-image-{ARCH_FLAVOUR}") if dep[-6:] == "-amd64"),
        None,
    )
    if image is None:
        raise UnavailableError(f"stand-in package linux-image-{ARCH_FLAVOUR} has no kernel")
    return image.removeprefix("linux-image-")


def abi_key(abi: str) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", abi))


def previous_abi(archive: Archive, abi: str) -> str:
    """The newest ABI of the same kernel series (6.12) older than ``abi`` whose headers,
    kbuild and unsigned image the archive has: the release before the stand-in's. The same
    gcc major builds it (checked by the recipe itself against its kernel config)."""
    series = ".".join(abi.split(".")[:2])
    pattern = re.compile(rf"linux-headers-({re.escape(series)}\.\d+\+deb\d+(?:\.\d+)?-amd64)")
    found = [
        match[1]
        for name in archive.names(f"linux-headers-{series}.")
        if (match := pattern.fullmatch(name)) and abi_key(match[1]) < abi_key(abi)
    ]
    for candidate in sorted(found, key=abi_key, reverse=True):
        base = candidate.removesuffix(f"-{ARCH_FLAVOUR}")
        try:
            for name in (
                f"linux-image-{candidate}-unsigned",
                f"linux-headers-{base}-common",
                f"linux-kbuild-{base}",
            ):
                archive.candidate(name)
        except UnavailableError:
            continue
        return candidate
    raise UnavailableError(f"no kernel of the {series} series older than {abi} in Debian's archive")


def resolve(archive: Archive, abi: str | None = None) -> dict[str, str]:
    """Package name -> version of every stand-in input, from the (private) index: for the
    newest kernel, or for ``abi``."""
    abi = abi or newest_abi(archive)
    base = abi.removesuffix(f"-{ARCH_FLAVOUR}")
    names = [
        f"linux-image-{abi}-unsigned",
        f"linux-headers-{abi}",
        f"linux-headers-{base}-common",
        f"linux-kbuild-{base}",
        "nvidia-kernel-source",
        "nvidia-open-kernel-source",
        *LIBRARY_PACKAGES,
    ]
    return {name: archive.candidate(name) for name in names}


def build_both(archive: Archive) -> tuple[Standins, Standins]:
    """The stand-in release (newest kernel) and the one before it (``previous_abi``); the
    runfile of the first is the driver's. Stand-ins of other versions are deleted."""
    latest = build_standins(archive)
    before = build_standins(archive, previous_abi(archive, newest_abi(archive)))
    for old in latest.root.parent.glob("*"):  # other versions' (or half-built) stand-ins
        if old not in (latest.root, before.root):
            shutil.rmtree(old, ignore_errors=True)
    return latest, before


def build_standins(archive: Archive, abi: str | None = None) -> Standins:
    versions = resolve(archive, abi)
    kv = next(name for name in versions if name.startswith("linux-headers-")).removeprefix(
        "linux-headers-"
    )
    driver = versions["nvidia-kernel-source"].split("-")[0]
    key = digest(repr(sorted(versions.items())), Path(__file__), HERE / "runfile.py")
    standins = Standins(CACHE / "standins" / key, kv, driver, tuple(sorted(versions.items())))
    if (standins.root / "DONE").exists():
        return standins
    debs = {name: archive.download(name, version) for name, version in versions.items()}
    if not INSTALLER_SOURCES.is_dir():
        raise UnavailableError(
            f"NVIDIA's nvidia-installer sources not found at {INSTALLER_SOURCES}"
        )
    shutil.rmtree(standins.root, ignore_errors=True)  # half-built
    standins.root.mkdir(parents=True)
    with tempfile.TemporaryDirectory(dir=standins.root) as scratch:
        work = Path(scratch)
        unpacked = work / "debs"
        for name, deb in debs.items():
            if not name.startswith("nvidia"):
                extract(deb, unpacked)
        build_mkprecompiled(work / "installer", standins.mkprecompiled)
        flatcar_release(unpacked, kv, work, standins)
        from tests.recipe.runfile import build_runfile

        build_runfile(debs, unpacked, kv, driver, work, standins)
    (standins.root / "DONE").write_text(repr(versions) + "\n")
    return standins


def build_mkprecompiled(work: Path, out: Path) -> None:
    shutil.copytree(INSTALLER_SOURCES, work)
    run(["chmod", "-R", "u+w", work])
    run(["make", "-C", work, "_out/Linux_x86_64/mkprecompiled"], what="make mkprecompiled")
    shutil.copy(work / "_out" / "Linux_x86_64" / "mkprecompiled", out)


def in_tree_closure(modules: Path) -> list[str]:
    """Relative paths of IN_TREE_ROOTS and everything they depend on (modules.dep)."""
    deps: dict[str, list[str]] = {}
    for line in (modules / "modules.dep").read_text().splitlines():
        path, _, rest = line.partition(":")
        deps[path] = rest.split()

    def name(path: str) -> str:
        return re.sub(r"\.ko(\.[a-z]+)?$", "", path.rsplit("/", 1)[-1]).replace("-", "_")

    wanted = {root.replace("-", "_") for root in IN_TREE_ROOTS}
    todo = [path for path in deps if name(path) in wanted]
    closure: set[str] = set()
    while todo:
        path = todo.pop()
        if path not in closure:
            closure.add(path)
            todo.extend(deps.get(path, []))
    return sorted(closure)


def flatcar_release(unpacked: Path, kv: str, work: Path, standins: Standins) -> None:
    base = kv.removesuffix(f"-{ARCH_FLAVOUR}")
    root = work / "container"
    tree = root / "usr" / "lib" / "modules" / kv / "build"
    tree.mkdir(parents=True)
    src = unpacked / "usr" / "src"
    run(["cp", "-a", f"{src}/linux-headers-{base}-common/.", tree])
    for entry in (src / f"linux-headers-{kv}").iterdir():
        if entry.name not in ("Makefile", "scripts", "tools"):  # the stub and the symlinks
            run(["cp", "-a", entry, tree])
    kbuild = unpacked / "usr" / "lib" / f"linux-kbuild-{base}"
    for part in ("scripts", "tools"):  # Debian's are symlinks into linux-kbuild
        if (tree / part).is_symlink():
            (tree / part).unlink()
        run(["cp", "-a", f"{kbuild}/{part}/.", tree / part])
    (tree / "vmlinux").unlink(missing_ok=True)
    (tree.parent / "source").symlink_to("build")

    modules = unpacked / "usr" / "lib" / "modules" / kv
    if not (unpacked / "lib").exists():  # depmod -b looks in <base>/lib/modules
        (unpacked / "lib").symlink_to("usr/lib")
    run(["depmod", "-b", unpacked, kv], what="depmod of the stand-in kernel's modules")
    closure = in_tree_closure(modules)
    for relative in closure:
        for target in (tree.parent / relative, standins.modules / relative):
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(modules / relative, target)
    for extra in ("modules.builtin", "modules.builtin.modinfo", "modules.order"):
        if (modules / extra).exists():
            shutil.copy2(modules / extra, tree.parent / extra)
            shutil.copy2(modules / extra, standins.modules / extra)

    lib64 = root / "usr" / "lib64"
    lib64.mkdir(parents=True)
    multiarch = unpacked / "usr" / "lib" / "x86_64-linux-gnu"
    for library in LIBRARIES:
        found = multiarch / library
        if not found.exists():
            raise UnavailableError(f"stand-in library {library} not in the trixie packages")
        shutil.copy(found.resolve(), lib64 / library)

    standins.flatcar.mkdir(parents=True)
    run(
        [
            "tar",
            "-C",
            root,
            "--numeric-owner",
            "--owner=0",
            "--group=0",
            "-I",
            "gzip -1",
            "-cf",
            standins.flatcar / "flatcar-container.tar.gz",
            "./usr",
        ],
        what="tar of the stand-in container",
    )
    boot = unpacked / "boot"
    shutil.copy(boot / f"vmlinuz-{kv}", standins.vmlinuz)
    shutil.copy(
        boot / f"config-{kv}", standins.flatcar / "flatcar_production_image_kernel_config.txt"
    )


def sha256(path: Path) -> str:
    return subprocess.run(
        ["sha256sum", str(path)], capture_output=True, text=True, check=True
    ).stdout.split()[0]
