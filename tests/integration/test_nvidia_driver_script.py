"""The driver image's runtime entrypoint (``releasebot/recipe/nvidia-driver``).

Runs the real bash script with recording fakes first on PATH for ``uname``,
``mkprecompiled``, ``ld``, ``depmod``, ``modprobe``, ``rmmod``, ``nvidia-smi``,
``nvidia-persistenced``, ``mount`` and ``umount``, and every path it touches (driver root,
module root, host os-release, /run/nvidia, /proc/version, /sys/module, the firmware
directory and the firmware search-path parameter) pointed at a temporary directory through
its environment variables. The fake ``mkprecompiled`` keeps the real one's quirks: ``--match``
exits 1 on a MATCH and 0 on a mismatch, and exits 1 when it cannot read the package; the
fake ``modprobe``/``rmmod`` create and remove ``/sys/module/<name>`` entries.

Covers: a matching node (link with the shipped ld into the private module root, depmod -b,
modprobe -d of nvidia, nvidia-uvm, nvidia-modeset and not nvidia-drm, firmware copied and
the firmware path written when empty, persistenced, the rbind mount), SIGTERM during the
wait (exit 0, modules unloaded, root unmounted, within a bounded wait), Flatcar version,
kernel and kernel-build mismatches (clear message, nothing loaded), a node that is not
Flatcar, the quoted ``VERSION_ID="4628.0.0"`` form, a missing or corrupt package, a firmware
path already set, extra arguments, the module type choice, a failed modprobe (what was
loaded is unloaded again), the lock, and the RDMA peermem probe and reload commands. Also:
a linked module without the running kernel's vermagic is refused before anything is
loaded; a driver in use is refused with ONE message; a sleeper killed from outside is
replaced (the wait does not spin a CPU); an image built with one flavour only
(``MODULE_TYPES``) serves ``auto`` with it and refuses the other.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import signal
import stat
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "releasebot" / "recipe" / "nvidia-driver"
DRIVER = "580.95.05"
FLATCAR = "4593.2.5"
KERNEL = "6.12.102-flatcar"
BANNER = (
    "Linux version 6.12.102-flatcar (build@pony-truck.infra.kinvolk.io) "
    "(x86_64-cros-linux-gnu-gcc (Gentoo Hardened 14.3.0 p8) 14.3.0, GNU ld 2.44) "
    "#1 SMP PREEMPT_DYNAMIC Tue Aug 12 19:58:16 -00 2026"
)
WAIT_SECONDS = 20.0  # an upper bound only: every wait polls and returns as soon as it can

RECORD = 'printf "%s\\n" "${0##*/} $*" >>"${CALLS_LOG}"\n'
FAKES = {
    "uname": RECORD + 'if [ "$1" = -r ]; then echo "${FAKE_UNAME_R}"; else echo Linux; fi\n',
    # Package format of the fake: "FAKEPKG", then version=..., banner=...
    "mkprecompiled": RECORD
    + """action=$1; pkg=$2; shift 2
if [ "$(head -n 1 "$pkg" 2>/dev/null)" != FAKEPKG ]; then
    echo "Unable to read package file '$pkg'." >&2; exit 1
fi
version=$(sed -n 's/^version=//p' "$pkg"); banner=$(sed -n 's/^banner=//p' "$pkg")
proc=/proc; out=.
while [ $# -gt 0 ]; do
    case "$1" in --proc-mount-point) proc=$2; shift 2 ;; -o) out=$2; shift 2 ;; *) shift ;; esac
done
case "$action" in
--info) printf 'description: fake\\nversion: %s\\nproc version: %s\\nnumber of files: 4\\n' \
            "$version" "$banner"; exit 0 ;;
--match) if [ "$(head -n 1 "$proc/version")" = "$banner" ]; then
             echo "kernel interface matches."; exit 1
         fi
         echo "kernel interface doesn't match."; exit 0 ;;
--unpack) for f in nv-linux.o nv-modeset-linux.o nvidia-uvm.ko nvidia-peermem.ko; do
              printf '%s\nvermagic=%s\n' "$f" "${FAKE_VERMAGIC-${FAKE_UNAME_R} SMP mod_unload}" \
                  >"$out/$f"; done; exit 0 ;;
esac
exit 2
""",
    # The linked module carries the interface's vermagic line, as ld -r keeps .modinfo.
    "ld": RECORD
    + """out=""; inputs=""
while [ $# -gt 0 ]; do
    case "$1" in -o) out=$2; shift ;; -*) ;; *) inputs="$inputs $1" ;; esac; shift
done
{ echo "linked by fake ld"; cat $inputs | grep '^vermagic=' | head -n 1; } >"$out"
""",
    "modinfo": RECORD + 'sed -n "s/^vermagic=//p" "$3"\n',
    "depmod": RECORD,
    "modprobe": RECORD
    + """while [ $# -gt 0 ]; do
    case "$1" in
    -d|-S) shift 2; continue ;;
    -*|*=*) shift; continue ;;
    esac
    name=$(echo "$1" | tr - _)
    if [ "$1" = "${FAKE_MODPROBE_FAIL:-}" ]; then echo "modprobe: ERROR: $1" >&2; exit 1; fi
    mkdir -p "${SYSFS_MODULE_DIR}/$name" && echo 0 >"${SYSFS_MODULE_DIR}/$name/refcnt"
    shift
done
""",
    "rmmod": RECORD
    + 'for m in "$@"; do rm -rf "${SYSFS_MODULE_DIR}/$(echo "$m" | tr - _)"; done\n',
    "nvidia-smi": RECORD + 'exit "${FAKE_NVIDIA_SMI_RC:-0}"\n',
    "nvidia-persistenced": RECORD,
    "mount": RECORD,
    "umount": RECORD,
    "chroot": RECORD + 'shift; exec "$@"\n',
}


@dataclass
class Node:
    """A fake node and image: paths, environment and the calls the fakes recorded."""

    root: Path
    env: dict[str, str]

    @property
    def driver_root(self) -> Path:
        return self.root / "opt" / "nvidia-driver"

    @property
    def module_root(self) -> Path:
        return self.root / "modroot"

    @property
    def sysfs(self) -> Path:
        return self.root / "sys" / "module"

    @property
    def firmware_param(self) -> Path:
        return self.root / "sys" / "firmware_class_path"

    @property
    def run_dir(self) -> Path:
        return self.root / "run" / "nvidia"

    def os_release(self, text: str) -> None:
        (self.root / "host-etc" / "os-release").write_text(text)

    def package(self, module_type: str = "kernel-open") -> Path:
        return self.driver_root / module_type / "precompiled" / f"nvidia-modules-{KERNEL}"

    def calls(self, name: str | None = None) -> list[list[str]]:
        log = self.root / "calls.log"
        lines = log.read_text().splitlines() if log.exists() else []
        calls = [line.split(" ") for line in lines]
        return [call for call in calls if name is None or call[0] == name]

    def loaded(self) -> set[str]:
        return {path.name for path in self.sysfs.iterdir()} if self.sysfs.exists() else set()


@pytest.fixture
def node(tmp_path: Path) -> Node:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, body in FAKES.items():
        fake = bin_dir / name
        fake.write_text("#!/bin/bash\n" + body)
        fake.chmod(fake.stat().st_mode | stat.S_IXUSR)

    driver_root = tmp_path / "opt" / "nvidia-driver"
    (driver_root / "firmware").mkdir(parents=True)
    (driver_root / "firmware" / "gsp_ga10x.bin").write_bytes(b"gsp firmware")
    (driver_root / "build-info").write_text(
        f"DRIVER_VERSION={DRIVER}\nDRIVER_BRANCH=580\nFLATCAR_VERSION={FLATCAR}\n"
        f"FLATCAR_CHANNEL=stable\nKERNEL_VERSION={KERNEL}\nKERNEL_BANNER={BANNER}\n"
    )
    for module_type in ("kernel", "kernel-open"):
        base = driver_root / module_type
        (base / "precompiled").mkdir(parents=True)
        (base / "precompiled" / f"nvidia-modules-{KERNEL}").write_text(
            f"FAKEPKG\nversion={DRIVER}\nbanner={BANNER}\n"
        )
        for core in ("nvidia/nv-kernel.o_binary", "nvidia-modeset/nv-modeset-kernel.o_binary"):
            (base / core).parent.mkdir(parents=True)
            (base / core).write_text(f"{module_type} core\n")
    (tmp_path / "modroot" / "lib" / "modules" / KERNEL).mkdir(parents=True)
    (tmp_path / "host-etc").mkdir()
    (tmp_path / "host-etc" / "os-release").write_text(
        f'NAME="Flatcar Container Linux by Kinvolk"\nID=flatcar\nVERSION={FLATCAR}\n'
        f"VERSION_ID={FLATCAR}\nBUILD_ID=2026-08-12-1919\n"
    )
    (tmp_path / "proc").mkdir()
    (tmp_path / "proc" / "version").write_text(BANNER + "\n")
    (tmp_path / "sys" / "module").mkdir(parents=True)
    (tmp_path / "sys" / "firmware_class_path").write_text("\n")
    (tmp_path / "firmware").mkdir()
    (tmp_path / "mounts").write_text("proc /proc proc rw 0 0\n")
    (tmp_path / "drivers").mkdir()

    env = {
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "CALLS_LOG": str(tmp_path / "calls.log"),
        "FAKE_UNAME_R": KERNEL,
        "NVIDIA_DRIVER_ROOT": str(driver_root),
        "MODULE_ROOT": str(tmp_path / "modroot"),
        "HOST_OS_RELEASE": str(tmp_path / "host-etc" / "os-release"),
        "RUN_DIR": str(tmp_path / "run" / "nvidia"),
        "PROC_DIR": str(tmp_path / "proc"),
        "SYSFS_MODULE_DIR": str(tmp_path / "sys" / "module"),
        "SYSFS_FIRMWARE_PATH": str(tmp_path / "sys" / "firmware_class_path"),
        "SYSFS_PCI_DEVICES": str(tmp_path / "sys" / "pci"),
        "FIRMWARE_DIR": str(tmp_path / "firmware"),
        "DRIVER_CONFIG_DIR": str(tmp_path / "drivers"),
        "PERSISTENCED_PID_FILE": str(tmp_path / "persistenced.pid"),
        "MOUNTS_FILE": str(tmp_path / "mounts"),
        "MOFED_READY_FILE": str(tmp_path / "mofed-ready"),
        "PEERMEM_CHROOT": "",
        "PEERMEM_POLL_SECONDS": "0.05",
        "DRIVER_VERSION": DRIVER,
        "HOME": str(tmp_path),
    }
    return Node(tmp_path, env)


def run(node: Node, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(SCRIPT), *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={**node.env, **env},
    )


class Running:
    """``nvidia-driver init`` started in the background, in its own process group."""

    def __init__(self, node: Node, *args: str, **env: str) -> None:
        self.output = node.root / "init.out"
        self._file = self.output.open("w")
        self.process = subprocess.Popen(
            ["bash", str(SCRIPT), "init", *args],
            stdout=self._file,
            stderr=subprocess.STDOUT,
            env={**node.env, **env},
            start_new_session=True,
        )

    def text(self) -> str:
        return self.output.read_text()

    def wait_for(self, line: str) -> None:
        deadline = time.monotonic() + WAIT_SECONDS
        while line not in self.text():
            if self.process.poll() is not None:
                pytest.fail(f"init exited {self.process.returncode} early:\n{self.text()}")
            if time.monotonic() > deadline:
                pytest.fail(f"no {line!r} within {WAIT_SECONDS}s:\n{self.text()}")
            time.sleep(0.02)

    def terminate(self) -> int:
        self.process.send_signal(signal.SIGTERM)
        return self.process.wait(timeout=WAIT_SECONDS)

    def close(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=WAIT_SECONDS)
        else:
            # The background `sleep infinity` of a script that exited without TERM.
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGKILL)
        self._file.close()


@pytest.fixture
def start(node: Node) -> Iterator[Callable[..., Running]]:
    started: list[Running] = []

    def factory(*args: str, **env: str) -> Running:
        running = Running(node, *args, **env)
        started.append(running)
        return running

    yield factory
    for running in started:
        running.close()


READY = "Done, now waiting for signal"


# --- a node the image was built for -------------------------------------------------------


def test_init_links_loads_and_holds_the_driver(node: Node, start: Callable[..., Running]) -> None:
    running = start()
    running.wait_for(READY)

    video = node.module_root / "lib" / "modules" / KERNEL / "video"
    links = node.calls("ld")
    assert [call[call.index("-o") + 1] for call in links] == [
        str(video / "nvidia.ko"),
        str(video / "nvidia-modeset.ko"),
    ]
    assert links[0][1:3] == ["-d", "-r"]
    assert links[0][-1] == str(node.driver_root / "kernel-open/nvidia/nv-kernel.o_binary")
    assert (video / "nvidia-uvm.ko").exists()
    assert ["depmod", "-b", str(node.module_root), KERNEL] in node.calls("depmod")

    probes = node.calls("modprobe")
    assert all(call[1:5] == ["-d", str(node.module_root), "-S", KERNEL] for call in probes)
    loaded = [call[5] for call in probes if call[5] != "-a"]
    assert loaded == ["nvidia", "nvidia-uvm", "nvidia-modeset"]
    assert "nvidia-drm" not in {arg for call in probes for arg in call}
    assert {"nvidia", "nvidia_uvm", "nvidia_modeset"} <= node.loaded()

    firmware = node.root / "firmware" / "nvidia" / DRIVER / "gsp_ga10x.bin"
    assert firmware.read_bytes() == b"gsp firmware"
    assert node.firmware_param.read_text() == "/run/nvidia/driver/lib/firmware"
    assert node.calls("nvidia-persistenced") == [["nvidia-persistenced", "--persistence-mode"]]
    assert ["mount", "--rbind", "/", str(node.run_dir / "driver")] in node.calls("mount")
    assert (node.run_dir / "nvidia-driver.pid").read_text().strip() == str(running.process.pid)
    assert node.calls("rmmod") == []  # nothing was loaded before


def test_term_during_the_wait_unloads_unmounts_and_exits_zero(
    node: Node, start: Callable[..., Running]
) -> None:
    running = start()
    running.wait_for(READY)

    assert running.terminate() == 0
    assert node.calls("rmmod") == [["rmmod", "nvidia_modeset", "nvidia_uvm", "nvidia"]]
    assert node.loaded() == {"i2c_core", "ipmi_msghandler", "ipmi_devintf"}  # not ours to unload
    assert ["umount", "-l", "-R", str(node.run_dir / "driver")] in node.calls("umount")
    assert not (node.run_dir / "nvidia-driver.pid").exists()


def test_extra_arguments_are_tolerated(node: Node, start: Callable[..., Running]) -> None:
    running = start("--accept-license", "--whatever", "x")
    running.wait_for(READY)
    assert "Ignoring arguments: --accept-license --whatever x" in running.text()
    assert running.terminate() == 0


def test_the_quoted_version_id_form_is_understood(
    node: Node, start: Callable[..., Running]
) -> None:
    info = node.driver_root / "build-info"
    info.write_text(info.read_text().replace(FLATCAR, "4628.0.0"))
    node.os_release(
        'NAME="Flatcar Container Linux by Kinvolk"\nID="flatcar"\nVERSION_ID="4628.0.0"\n'
    )
    running = start()
    running.wait_for(READY)
    assert "Node runs Flatcar 4628.0.0" in running.text()
    assert running.terminate() == 0


def test_a_firmware_path_already_set_is_left_alone(
    node: Node, start: Callable[..., Running]
) -> None:
    node.firmware_param.write_text("/opt/firmware\n")
    running = start()
    running.wait_for(READY)
    assert node.firmware_param.read_text() == "/opt/firmware\n"
    assert "left alone" in running.text()
    assert running.terminate() == 0


def test_proprietary_modules_when_asked(node: Node, start: Callable[..., Running]) -> None:
    running = start(KERNEL_MODULE_TYPE="proprietary")
    running.wait_for(READY)
    assert node.calls("ld")[0][-1] == str(node.driver_root / "kernel/nvidia/nv-kernel.o_binary")
    assert node.calls("mkprecompiled")[0][2] == str(node.package("kernel"))
    assert running.terminate() == 0


def test_a_driver_in_use_is_refused_once_and_left_alone(node: Node) -> None:
    for module in ("nvidia", "nvidia_uvm"):
        (node.sysfs / module).mkdir()
        (node.sysfs / module / "refcnt").write_text("3\n" if module == "nvidia" else "0\n")
    result = run(node, "init")
    assert result.returncode != 0
    output = result.stdout + result.stderr
    assert output.count("Could not unload NVIDIA driver kernel modules") == 1, output
    assert "a previous NVIDIA driver is loaded and in use" in result.stderr
    assert node.calls("rmmod") == []
    assert node.loaded() == {"nvidia", "nvidia_uvm"}


def test_a_module_without_the_kernels_vermagic_is_refused(node: Node) -> None:
    # What the 6.11+ kernels did to NVIDIA's %-linux.o rule: an interface without vermagic.
    result = run(node, "init", FAKE_VERMAGIC="")
    assert result.returncode != 0
    assert f".ko has vermagic '', not the running kernel's {KERNEL}" in result.stderr
    assert node.calls("modprobe") == []
    assert node.calls("depmod") == []


def test_a_module_for_another_kernel_is_refused(node: Node) -> None:
    result = run(node, "init", FAKE_VERMAGIC="6.12.101-flatcar SMP mod_unload")
    assert result.returncode != 0
    assert "has vermagic '6.12.101-flatcar SMP mod_unload'" in result.stderr
    assert node.calls("modprobe") == []


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def sleepers(pid: int) -> list[int]:
    children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    return [int(child) for child in children if "sleep" in Path(f"/proc/{child}/comm").read_text()]


def wait_for_sleeper(pid: int, other_than: int | None = None) -> int:
    deadline = time.monotonic() + WAIT_SECONDS
    while time.monotonic() < deadline:
        found = [child for child in sleepers(pid) if child != other_than]
        if found:
            return found[0]
        time.sleep(0.02)
    pytest.fail(f"no new sleeper under {pid} within {WAIT_SECONDS}s")


def test_a_killed_sleeper_is_replaced_and_the_wait_does_not_spin(
    node: Node, start: Callable[..., Running]
) -> None:
    running = start()
    running.wait_for(READY)
    pid = running.process.pid
    first = wait_for_sleeper(pid)
    os.kill(first, signal.SIGKILL)
    wait_for_sleeper(pid, other_than=first)
    # A spinning `wait` burns all the CPU it is given; a waiting shell next to none. Under
    # load a spinner may get less, never a waiter more: the bound cannot fail a waiter.
    before = cpu_seconds(pid)
    time.sleep(1.0)
    assert cpu_seconds(pid) - before < 0.3
    assert running.terminate() == 0


@pytest.mark.parametrize(
    ("built", "asked", "linked"),
    [("proprietary", "auto", "kernel"), ("open", "auto", "kernel-open")],
)
def test_an_image_with_one_flavour_serves_auto_with_it(
    node: Node, start: Callable[..., Running], built: str, asked: str, linked: str
) -> None:
    info = node.driver_root / "build-info"
    info.write_text(info.read_text() + f"MODULE_TYPES={built}\n")
    running = start(KERNEL_MODULE_TYPE=asked)
    running.wait_for(READY)
    assert node.calls("ld")[0][-1] == str(node.driver_root / f"{linked}/nvidia/nv-kernel.o_binary")
    assert running.terminate() == 0


def test_an_image_with_one_flavour_refuses_the_other(node: Node) -> None:
    info = node.driver_root / "build-info"
    info.write_text(info.read_text() + "MODULE_TYPES=proprietary\n")
    result = run(node, "init", KERNEL_MODULE_TYPE="open")
    assert result.returncode != 0
    assert "built with MODULE_TYPES=proprietary and holds no open kernel modules" in result.stderr
    assert_nothing_touched(node)


def test_an_old_instance_is_unloaded_before_loading(
    node: Node, start: Callable[..., Running]
) -> None:
    for module in ("nvidia", "nvidia_uvm"):
        (node.sysfs / module).mkdir()
        (node.sysfs / module / "refcnt").write_text("1\n" if module == "nvidia" else "0\n")
    running = start()
    running.wait_for(READY)
    assert node.calls("rmmod")[0] == ["rmmod", "nvidia_uvm", "nvidia"]
    assert running.terminate() == 0


def test_module_parameters_come_from_the_mounted_conf_files(
    node: Node, start: Callable[..., Running]
) -> None:
    (node.root / "drivers" / "nvidia.conf").write_text("# comment\nNVreg_EnableGpuFirmware=1\n\n")
    running = start()
    running.wait_for(READY)
    probes = [call for call in node.calls("modprobe") if call[5] == "nvidia"]
    assert probes == [
        [
            "modprobe",
            "-d",
            str(node.module_root),
            "-S",
            KERNEL,
            "nvidia",
            "NVreg_EnableGpuFirmware=1",
        ]
    ]
    assert running.terminate() == 0


# --- a node the image was not built for ---------------------------------------------------


def assert_nothing_touched(node: Node) -> None:
    for name in ("ld", "depmod", "modprobe", "rmmod", "mount", "nvidia-persistenced"):
        assert node.calls(name) == [], name


def test_a_flatcar_version_mismatch_fails_clearly(node: Node) -> None:
    node.os_release("ID=flatcar\nVERSION_ID=4593.2.6\n")
    result = run(node, "init")
    assert result.returncode != 0
    assert "Flatcar version mismatch" in result.stderr
    assert f"modules for Flatcar {FLATCAR}" in result.stderr
    assert "this node runs Flatcar 4593.2.6" in result.stderr
    assert_nothing_touched(node)


def test_a_kernel_mismatch_fails_clearly(node: Node) -> None:
    result = run(node, "init", FAKE_UNAME_R="6.12.103-flatcar")
    assert result.returncode != 0
    assert "kernel mismatch" in result.stderr
    assert f"for kernel {KERNEL}" in result.stderr
    assert "this node runs kernel 6.12.103-flatcar" in result.stderr
    assert_nothing_touched(node)


def test_another_build_of_the_same_kernel_release_fails_clearly(node: Node) -> None:
    (node.root / "proc" / "version").write_text(BANNER.replace("Tue Aug 12", "Wed Aug 13") + "\n")
    result = run(node, "init")
    assert result.returncode != 0
    assert "kernel build mismatch" in result.stderr
    assert_nothing_touched(node)


def test_a_node_that_is_not_flatcar_is_refused(node: Node) -> None:
    node.os_release('ID=ubuntu\nVERSION_ID="24.04"\n')
    result = run(node, "init")
    assert result.returncode != 0
    assert "runs 'ubuntu', not Flatcar" in result.stderr
    assert_nothing_touched(node)


def test_a_missing_package_fails_clearly(node: Node) -> None:
    node.package().unlink()
    result = run(node, "init")
    assert result.returncode != 0
    assert f"the precompiled package {node.package()} is missing" in result.stderr
    assert_nothing_touched(node)


def test_a_corrupt_package_fails_clearly(node: Node) -> None:
    # The real mkprecompiled exits 1 for "cannot read" as it does for "matches".
    node.package().write_bytes(b"\x00garbage")
    result = run(node, "init")
    assert result.returncode != 0
    assert "unreadable or corrupt" in result.stderr
    assert_nothing_touched(node)


def test_a_package_for_another_driver_version_fails_clearly(node: Node) -> None:
    node.package().write_text(f"FAKEPKG\nversion=570.1.2\nbanner={BANNER}\n")
    result = run(node, "init")
    assert result.returncode != 0
    assert "holds driver '570.1.2'" in result.stderr
    assert_nothing_touched(node)


def test_a_failed_modprobe_unloads_what_was_loaded(node: Node) -> None:
    result = run(node, "init", FAKE_MODPROBE_FAIL="nvidia-modeset")
    assert result.returncode != 0
    assert "modprobe nvidia-modeset failed" in result.stderr
    assert node.calls("rmmod") == [["rmmod", "nvidia_uvm", "nvidia"]]
    assert node.loaded() == {"i2c_core", "ipmi_msghandler", "ipmi_devintf"}
    assert node.calls("mount") == []


def test_a_second_instance_is_refused(node: Node) -> None:
    node.run_dir.mkdir(parents=True)
    with (node.run_dir / "nvidia-driver.pid").open("w") as held:
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
        result = run(node, "init")
    assert result.returncode != 0
    assert "already running" in result.stderr
    assert_nothing_touched(node)


def test_an_unknown_command_is_a_usage_error(node: Node) -> None:
    assert run(node).returncode == 64
    assert run(node, "update", "--kernel", "x").returncode == 64


# --- RDMA sidecar -------------------------------------------------------------------------


def test_probe_peermem(node: Node) -> None:
    assert run(node, "probe_nvidia_peermem", "extra").returncode == 0  # no MOFED: nothing to do
    (node.sysfs / "mlx5_core").mkdir()
    missing = run(node, "probe_nvidia_peermem")
    assert missing.returncode == 1
    assert "nvidia-peermem module is not loaded" in missing.stdout
    (node.sysfs / "nvidia_peermem").mkdir()
    (node.sysfs / "nvidia_peermem" / "refcnt").write_text("0\n")
    assert run(node, "probe_nvidia_peermem").returncode == 0


def test_reload_peermem_waits_for_mofed_then_loads_and_holds(node: Node) -> None:
    (node.root / "mofed-ready").write_text("")
    (node.sysfs / "nvidia").mkdir()
    (node.sysfs / "nvidia" / "refcnt").write_text("0\n")
    output = node.root / "peermem.out"
    with output.open("w") as out:
        process = subprocess.Popen(
            ["bash", str(SCRIPT), "reload_nvidia_peermem"],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=node.env,
            start_new_session=True,
        )
        try:
            deadline = time.monotonic() + WAIT_SECONDS
            while "now waiting for signal" not in output.read_text():
                assert process.poll() is None, output.read_text()
                assert time.monotonic() < deadline, output.read_text()
                time.sleep(0.02)
            assert node.calls("modprobe") == [
                ["modprobe", "-d", str(node.module_root), "-S", KERNEL, "nvidia-peermem"]
            ]
            process.send_signal(signal.SIGTERM)
            assert process.wait(timeout=WAIT_SECONDS) == 0
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=WAIT_SECONDS)
