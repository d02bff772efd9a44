"""``nvidia-driver init`` run inside the BUILT runtime image, as a node would run it.

The image's root (mounted out of buildah's storage) is entered with ``chroot`` in a user
namespace of the suite's unprivileged user (``unshare --map-root-user --map-auto``, the
ids mapped as rootless buildah mapped them when it built the image), so the image's own
bash, kmod, ld, mkprecompiled, flock and ``/opt/nvidia-driver`` do the work.
Fakes stand in only for what needs root on the target kernel or a GPU: ``mount`` and
``umount`` (the bind mount of the root), ``nvidia-smi`` and ``nvidia-persistenced`` (a
GPU), ``uname -r`` (the running kernel is this machine's, not the target's). ``modprobe``
is the image's real kmod with ``MODPROBE_OPTIONS=--dry-run --verbose``: it resolves the
modules and their dependencies (``.ko.xz`` in-tree modules included) from the private
module root, and prints the insertions instead of making them; inserting into the target
kernel is what the QEMU boot proves. ``/proc/version`` is the booted target kernel's own
bytes, so ``mkprecompiled --match`` compares against the ground truth.

The node's paths (``/run/nvidia``, ``/sys/module``, the firmware directory, os-release)
are moved under ``/tmp/node`` of the image through the script's own variables.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from tests.recipe.user_namespaces import ENTER

NODE = "/tmp/node"
FAKES = "/tmp/fakes"
READY = "Done, now waiting for signal"
WAIT_SECONDS = 120.0

RECORD = 'printf "%s\\n" "${0##*/} $*" >>' + NODE + "/calls.log\n"
FAKE_SCRIPTS = {
    "mount": RECORD,
    "umount": RECORD,
    "nvidia-smi": RECORD + 'echo "fake nvidia-smi: no GPU here"\n',
    "nvidia-persistenced": RECORD,
}


@dataclass
class InitRun:
    """What one ``init`` run did."""

    output: str
    exit_code: int
    modules: Path
    """The modules init linked, copied out of the image."""
    dependencies: list[Path]
    """The in-tree modules ``nvidia`` needs, in load order (real kmod's answer)."""
    calls: list[str]
    spin_cpu_seconds: float | None = None


@dataclass
class Node:
    """A prepared node inside the mounted image ``root``."""

    root: Path
    kernel_version: str
    flatcar_version: str
    proc_version: bytes

    def host(self, path: str) -> Path:
        return self.root / path.lstrip("/")

    def prepare(self) -> None:
        # As root of the namespace: what the last init left (the firmware it copied keeps
        # its read-only modes) is the user's own there, whatever its modes.
        subprocess.run(
            [*ENTER, "rm", "-rf", str(self.host(NODE)), str(self.host(FAKES))], check=True
        )
        for sub in ("run/nvidia", "proc", "sys/module", "sys/pci", "firmware", "drivers"):
            self.host(f"{NODE}/{sub}").mkdir(parents=True)
        self.host(f"{NODE}/proc/version").write_bytes(self.proc_version)
        self.host(f"{NODE}/os-release").write_text(
            f'NAME="Flatcar Container Linux by Kinvolk"\nID=flatcar\n'
            f"VERSION_ID={self.flatcar_version}\n"
        )
        self.host(f"{NODE}/sys/firmware_path").write_text("\n")
        self.host(f"{NODE}/mounts").write_text("proc /proc proc rw 0 0\n")
        fakes = self.host(FAKES)
        fakes.mkdir(parents=True)
        scripts = {
            **FAKE_SCRIPTS,
            "uname": RECORD
            + f'if [ "$1" = -r ]; then echo "{self.kernel_version}"; exit 0; fi\n'
            + 'exec /usr/bin/uname "$@"\n',
        }
        for name, body in scripts.items():
            (fakes / name).write_text("#!/bin/sh\n" + body)
            (fakes / name).chmod(0o755)

    def environment(self, **extra: str) -> list[str]:
        values = {
            "PATH": f"{FAKES}:/opt/nvidia-driver/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:"
            "/usr/bin:/sbin:/bin",
            "HOME": "/root",
            "LANG": "C.UTF-8",
            "RUN_DIR": f"{NODE}/run/nvidia",
            "PROC_DIR": f"{NODE}/proc",
            "SYSFS_MODULE_DIR": f"{NODE}/sys/module",
            "SYSFS_FIRMWARE_PATH": f"{NODE}/sys/firmware_path",
            "SYSFS_PCI_DEVICES": f"{NODE}/sys/pci",
            "FIRMWARE_DIR": f"{NODE}/firmware",
            "FIRMWARE_HOST_PATH": "/run/nvidia/driver/lib/firmware",
            "DRIVER_CONFIG_DIR": f"{NODE}/drivers",
            "PERSISTENCED_PID_FILE": f"{NODE}/persistenced.pid",
            "MOUNTS_FILE": f"{NODE}/mounts",
            "HOST_OS_RELEASE": f"{NODE}/os-release",
            "MODPROBE_OPTIONS": "--dry-run --verbose",
            **extra,
        }
        return [f"{name}={value}" for name, value in values.items()]

    def calls(self) -> list[str]:
        log = self.host(f"{NODE}/calls.log")
        return log.read_text().splitlines() if log.exists() else []


class Init:
    """``nvidia-driver init`` started in the image, in its own process group."""

    def __init__(self, node: Node, **env: str) -> None:
        self.node = node
        self.output = node.host(f"{NODE}/init.out")
        self._file = self.output.open("w")
        self.process = subprocess.Popen(
            [
                *ENTER,
                "chroot",
                str(node.root),
                "/usr/bin/env",
                "-i",
                *node.environment(**env),
                "/usr/local/bin/nvidia-driver",
                "init",
            ],
            stdout=self._file,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    def text(self) -> str:
        return self.output.read_text(errors="replace")

    def wait_for(self, line: str) -> None:
        deadline = time.monotonic() + WAIT_SECONDS
        while line not in self.text():
            if self.process.poll() is not None:
                raise AssertionError(f"init exited {self.process.returncode}:\n{self.text()}")
            if time.monotonic() > deadline:
                raise AssertionError(f"no {line!r} within {WAIT_SECONDS}s:\n{self.text()}")
            time.sleep(0.05)

    def sleepers(self) -> list[int]:
        pid = self.process.pid
        children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
        return [int(c) for c in children if Path(f"/proc/{c}/comm").read_text().strip() == "sleep"]

    def new_sleeper(self, other_than: int | None = None) -> int:
        deadline = time.monotonic() + WAIT_SECONDS
        while time.monotonic() < deadline:
            found = [pid for pid in self.sleepers() if pid != other_than]
            if found:
                return found[0]
            time.sleep(0.05)
        raise AssertionError(f"no new sleeper under init within {WAIT_SECONDS}s")

    def cpu_seconds(self) -> float:
        fields = Path(f"/proc/{self.process.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def terminate(self) -> int:
        self.process.send_signal(signal.SIGTERM)
        return self.process.wait(timeout=WAIT_SECONDS)

    def close(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=WAIT_SECONDS)
        self._file.close()
