"""The stand-in NVIDIA runfile: a self-extracting shell archive in the ``.run`` layout.

The payload is an UNCOMPRESSED tar (xz would cost minutes per run) after a fixed-size
POSIX sh header. The header implements what the recipe calls: ``--check`` (the payload's
embedded SHA-256, as makeself checks its own sums), ``--extract-only --target DIR``, and
anything else runs the stand-in ``nvidia-installer`` with the arguments. That installer
refuses an option nvidia-installer 535 does not have (its option table, read from the
vendored sources) and a run without ``--no-kernel-modules``, then lays out PLACEHOLDER
user space where the real installer puts it. It proves that the runtime stage's own logic
runs to the end; it proves nothing about NVIDIA's real user space.

Deliberately not here: the kernel and release stand-ins (``standins.py``).
"""

from __future__ import annotations

import re
import shutil
import tarfile
from pathlib import Path
from typing import TYPE_CHECKING

from tests.recipe.parts import run

if TYPE_CHECKING:
    from tests.recipe.standins import Standins

HEADER_SIZE = 8192

HEADER = """#!/bin/sh
# Stand-in for an NVIDIA .run, made by releasebot's recipe suite from Debian's
# nvidia-kernel-source and nvidia-open-kernel-source @VERSION@. Not NVIDIA's installer.
SKIP=@SKIP@
SUM=@SUM@
self=$0
payload() { tail -c "+$((SKIP + 1))" "$self"; }
case "$1" in
--check)
    got=$(payload | sha256sum | cut -d ' ' -f 1)
    if [ "$got" = "$SUM" ]; then echo "Verifying archive integrity... OK"; exit 0; fi
    echo "Verifying archive integrity... Error in SHA256 checksums ($got)" >&2
    exit 1 ;;
--extract-only)
    if [ "$2" != --target ] || [ -z "$3" ]; then
        echo "usage: $0 --extract-only --target DIR" >&2
        exit 2
    fi
    mkdir -p "$3" && payload | tar -xf - -C "$3" && exit 0
    exit 1 ;;
esac
dir=$(mktemp -d) || exit 1
payload | tar -xf - -C "$dir" || exit 1
(cd "$dir" && ./nvidia-installer "$@")
rc=$?
rm -rf "$dir"
exit "$rc"
"""

INSTALLER = """#!/bin/sh
# Stand-in nvidia-installer @VERSION@: placeholder user space only.
here=$(cd "$(dirname "$0")" && pwd)
version=@VERSION@
modules=no
for arg in "$@"; do
    case "$arg" in --*) ;; *) continue ;; esac
    name=${arg#--}
    name=${name%%=*}
    if ! grep -qx -- "$name" "$here/installer-options"; then
        echo "nvidia-installer: unrecognized option: \\"--$name\\"" >&2
        exit 1
    fi
    case "$name" in no-kernel-module|no-kernel-modules) modules=skip ;; esac
done
if [ "$modules" != skip ]; then
    echo "stand-in nvidia-installer: cannot build kernel modules; pass --no-kernel-modules" >&2
    exit 1
fi
echo "stand-in nvidia-installer $version: laying out PLACEHOLDER user space (not NVIDIA's)"
lib=/usr/lib/x86_64-linux-gnu
install -D -m 0755 "$here/placeholders/nvidia-smi" /usr/bin/nvidia-smi
install -D -m 0755 "$here/placeholders/nvidia-persistenced" /usr/bin/nvidia-persistenced
install -D -m 0755 "$here/placeholders/libnvidia-ml.so" "$lib/libnvidia-ml.so.$version"
ln -sf "libnvidia-ml.so.$version" "$lib/libnvidia-ml.so.1"
mkdir -p "/lib/firmware/nvidia/$version"
cp "$here"/firmware/* "/lib/firmware/nvidia/$version/"
ldconfig
"""

PLACEHOLDER = """#!/bin/sh
echo "stand-in $(basename "$0") (a placeholder: no NVIDIA user space, no GPU)"
"""

PCI_CALL = re.compile(r"pci_resize_resource\((\w+), (\w+), (\w+)\)")


def installer_options(sources: Path) -> list[str]:
    """nvidia-installer 535's options, with --no-X for its boolean ones."""
    options: list[str] = []
    for name, flags in re.findall(
        r'^\s*\{\s*"([a-z0-9-]+)",\s*[^,]+,\s*([^,]+),',
        (sources / "option_table.h").read_text(),
        re.MULTILINE,
    ):
        options.append(name)
        if "NVGETOPT_IS_BOOLEAN" in flags:
            options.append(f"no-{name}")
    return sorted(set(options))


def adapt_pci_resize(kernel_open: Path, headers: Path) -> str:
    """Give ``pci_resize_resource()`` the fourth argument the kernel declares, if it does."""
    declaration = re.search(
        r"pci_resize_resource\(([^;]*)\);", (headers / "include/linux/pci.h").read_text()
    )
    if declaration is None or declaration[1].count(",") < 3:
        return ""
    source = kernel_open / "nvidia" / "nv-pci.c"
    text = source.read_text()
    adapted, count = PCI_CALL.subn(r"pci_resize_resource(\1, \2, \3, 0)", text)
    if not count:
        return ""
    source.write_text(adapted)
    return (
        "STAND-IN ADAPTATION (not the recipe): kernel-open/nvidia/nv-pci.c calls "
        f"pci_resize_resource() with 3 arguments, this kernel declares 4; passed "
        f"exclude_bars=0 at {count} call(s)"
    )


def build_runfile(
    debs: dict[str, Path], unpacked: Path, kv: str, driver: str, work: Path, standins: Standins
) -> None:
    from tests.recipe.standins import INSTALLER_SOURCES

    payload = work / "payload"
    payload.mkdir()
    for package, directory, inner in (
        ("nvidia-kernel-source", "kernel", "nvidia-kernel"),
        ("nvidia-open-kernel-source", "kernel-open", "nvidia-open-kernel"),
    ):
        scratch = work / package
        run(["dpkg-deb", "-x", debs[package], scratch])
        archive = next((scratch / "usr" / "src").glob("nvidia-*kernel.tar.xz"))
        run(["tar", "-xJf", archive, "-C", scratch])
        (scratch / "modules" / inner).rename(payload / directory)
        shutil.rmtree(scratch)
    base = kv.removesuffix("-amd64")
    note = adapt_pci_resize(
        payload / "kernel-open", unpacked / f"usr/src/linux-headers-{base}-common"
    )
    (standins.root / "ADAPTATIONS").write_text(note + "\n" if note else "")

    shutil.copy(standins.mkprecompiled, payload / "mkprecompiled")
    (payload / "installer-options").write_text(
        "\n".join(installer_options(INSTALLER_SOURCES)) + "\n"
    )
    (payload / "nvidia-installer").write_text(INSTALLER.replace("@VERSION@", driver))
    (payload / "nvidia-installer").chmod(0o755)
    placeholders = payload / "placeholders"
    placeholders.mkdir()
    for name in ("nvidia-smi", "nvidia-persistenced"):
        (placeholders / name).write_text(PLACEHOLDER)
        (placeholders / name).chmod(0o755)
    (work / "nvml.c").write_text("int nvmlInit_v2(void) { return 999; /* NVML_ERROR_UNKNOWN */ }\n")
    run(
        [
            "gcc",
            "-shared",
            "-fPIC",
            "-Wl,-soname,libnvidia-ml.so.1",
            "-o",
            placeholders / "libnvidia-ml.so",
            work / "nvml.c",
        ]
    )
    firmware = payload / "firmware"
    firmware.mkdir()
    for name in ("gsp_ga10x.bin", "gsp_tu10x.bin"):
        (firmware / name).write_text(f"stand-in GSP firmware {name} (placeholder, not NVIDIA's)\n")

    body = work / "payload.tar"
    with tarfile.open(body, "w", format=tarfile.GNU_FORMAT) as tar:
        tar.add(payload, arcname=".")
    from tests.recipe.standins import sha256

    header = (
        HEADER.replace("@VERSION@", driver)
        .replace("@SKIP@", str(HEADER_SIZE))
        .replace("@SUM@", sha256(body))
    ).encode()
    assert len(header) < HEADER_SIZE
    standins.runfile.parent.mkdir(parents=True)
    with standins.runfile.open("wb") as out:
        out.write(header + b"#" * (HEADER_SIZE - len(header) - 1) + b"\n")
        with body.open("rb") as source:
            shutil.copyfileobj(source, out, 1 << 20)
    body.unlink()
