"""The target kernel booted under QEMU (TCG) with a busybox initrd: the ground truth.

``qemu-system-x86_64 -accel tcg -cpu max`` boots the stand-in release's own vmlinuz with an
uncompressed cpio initrd holding Debian's static busybox, the in-tree modules the NVIDIA
modules depend on (decompressed, in the order real kmod resolves them) and each flavour's
``nvidia.ko``. Its ``/init`` prints ``/proc/version`` as hex bytes (a tty would rewrite the
line end), inserts the dependencies, then each ``nvidia.ko`` and prints the kernel's
messages about it. KVM is not used: ``-cpu host`` aborts on these machines, and TCG boots
in seconds.

What it shows: the banner the recipe packed equals this kernel's ``/proc/version`` byte for
byte; the kernel accepts the linked module's vermagic, symbol versions and relocations (it
gets as far as ``NVRM: No NVIDIA GPU found.`` and returns ENODEV, which is success without
a GPU). Deliberately not here: building anything (the modules come from the built image).
"""

from __future__ import annotations

import lzma
import re
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from tests.recipe.parts import run

BUSYBOX = Path("/bin/busybox")
INIT = """#!/bin/busybox sh
/bin/busybox --install -s /bin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
echo "@@VERSION"
od -An -v -tx1 /proc/version
echo "@@END"
for m in $(cat /modules/order); do
    insmod "/modules/$m" || echo "@@DEPFAIL $m"
done
dmesg -c >/dev/null
for flavour in $(ls /nvidia); do
    insmod "/nvidia/$flavour/nvidia.ko"
    echo "@@RC $flavour $?"
    dmesg -c | sed "s/^/@@KMSG $flavour /"
    rmmod nvidia 2>/dev/null
done
echo "@@DONE"
poweroff -f
"""


@dataclass
class Boot:
    """What the booted kernel said."""

    proc_version: bytes
    output: str
    results: dict[str, int] = field(default_factory=dict)
    messages: dict[str, list[str]] = field(default_factory=dict)
    failed_dependencies: list[str] = field(default_factory=list)


def dependency_order(module_root: Path, kv: str, module: str) -> list[Path]:
    """The in-tree modules ``module`` needs, in load order, as real kmod resolves them."""
    result = run(["modprobe", "-d", module_root, "-S", kv, "--show-depends", module])
    paths = [
        Path(line.split()[1]) for line in result.stdout.splitlines() if line.startswith("insmod ")
    ]
    return [path for path in paths if "/video/" not in str(path)]


def initrd(work: Path, dependencies: list[Path], flavours: dict[str, Path]) -> Path:
    root = work / "initrd"
    for sub in ("bin", "proc", "sys", "dev", "modules", "nvidia"):
        (root / sub).mkdir(parents=True)
    shutil.copy(BUSYBOX, root / "bin" / "busybox")
    (root / "init").write_text(INIT)
    (root / "init").chmod(0o755)
    order = []
    for index, path in enumerate(dependencies):
        name = f"{index:03d}-{path.name.removesuffix('.xz')}"
        data = path.read_bytes()
        (root / "modules" / name).write_bytes(
            lzma.decompress(data) if path.suffix == ".xz" else data
        )
        order.append(name)
    (root / "modules" / "order").write_text("\n".join(order) + "\n")
    for flavour, module in flavours.items():
        (root / "nvidia" / flavour).mkdir()
        shutil.copy(module, root / "nvidia" / flavour / "nvidia.ko")
    image = work / "initrd.cpio"
    listing = subprocess.run(
        ["find", ".", "-print0"], cwd=root, capture_output=True, check=True
    ).stdout
    with image.open("wb") as out:
        subprocess.run(
            ["cpio", "--null", "-o", "-H", "newc", "--quiet"],
            cwd=root,
            input=listing,
            stdout=out,
            check=True,
        )
    return image


def boot(vmlinuz: Path, image: Path, log: Path, memory_mib: int = 2048) -> Boot:
    command = [
        "qemu-system-x86_64",
        "-accel",
        "tcg",
        "-cpu",
        "max",
        "-m",
        str(memory_mib),
        "-smp",
        "1",
        "-kernel",
        str(vmlinuz),
        "-initrd",
        str(image),
        "-append",
        "console=ttyS0 panic=-1 loglevel=3",
        "-nographic",
        "-no-reboot",
        "-monitor",
        "none",
    ]
    result = subprocess.run(
        command, capture_output=True, text=True, errors="replace", timeout=900, check=False
    )
    log.parent.mkdir(parents=True, exist_ok=True)
    log.write_text(result.stdout + result.stderr)
    output = result.stdout.replace("\r\n", "\n")
    assert "@@DONE" in output, f"the VM did not finish its /init (log: {log}):\n{output[-3000:]}"
    hex_dump = output.split("@@VERSION\n", 1)[1].split("@@END", 1)[0]
    found = Boot(bytes.fromhex("".join(hex_dump.split())), output)
    for match in re.finditer(r"^@@RC (\S+) (\d+)$", output, re.MULTILINE):
        found.results[match[1]] = int(match[2])
    for match in re.finditer(r"^@@KMSG (\S+) (.*)$", output, re.MULTILINE):
        found.messages.setdefault(match[1], []).append(match[2])
    found.failed_dependencies = re.findall(r"^@@DEPFAIL (\S+)$", output, re.MULTILINE)
    return found
