"""The recipe's Dockerfile built to the end by buildah with the stand-ins, and what it holds.

One build (both stages; both flavours compiled in the builder with trixie's gcc-14 against
the stand-in kernel tree, through the relocated host tools) serves the whole suite. Checked
here: the build log says every step did its work (signatures, relocation, the real banner,
both flavours packed and checked, the stand-in installer run); the image's config is what
the GPU Operator and the bot expect; ``/opt/nvidia-driver`` holds both packages with the
banner, the cores, the firmware, the private module root and ``build-info``; every module
in the packages, and every in-tree module shipped, is for the target kernel.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from releasebot.builders.kaniko import KANIKO_CAPABILITIES
from tests.recipe import buildah
from tests.recipe.buildah import Image
from tests.recipe.conftest import DriverBase
from tests.recipe.mirror import Key
from tests.recipe.standins import Standins


def vermagic(path: Path) -> str:
    return subprocess.run(
        ["modinfo", "-F", "vermagic", str(path)], capture_output=True, text=True, check=True
    ).stdout.strip()


def test_the_build_ran_every_step(image: Image, standins: Standins, keys: tuple[Key, Key]) -> None:
    """The per-release build: the Flatcar inputs, the compile and packing; never the
    runfile's download nor nvidia-installer (the base's)."""
    log = image.log
    for name in (
        "flatcar-container.tar.gz",
        "flatcar_production_image.vmlinuz",
        "flatcar_production_image_kernel_config.txt",
    ):
        assert f"{name}: SHA512 matches DIGESTS signed by {keys[0].fingerprint}" in log
    assert "host tools relocated to Flatcar's loader: " in log
    assert f"kernel banner: Linux version {standins.kernel_version} (" in log
    assert "module types: both (kernel kernel-open)" in log
    assert "kernel: packed and checked" in log
    assert "kernel-open: packed and checked" in log
    assert "build-modules: ERROR" not in log
    assert "stripped nv-linux.o: " in log
    assert "NVIDIA-Linux-" not in log  # no runfile downloaded, checked or extracted
    assert "nvidia-installer" not in log
    assert "laying out PLACEHOLDER user space" not in log


def test_the_driver_base_ran_every_step(driver_base: DriverBase, standins: Standins) -> None:
    """The base: the runfile downloaded once, the cores stripped, the user space installed."""
    log = driver_base.log
    assert f"NVIDIA-Linux-x86_64-{standins.driver_version}.run: no SHA256 pinned" in log
    for flavour in ("kernel", "kernel-open"):
        assert f"{flavour}: stripped nv-kernel.o_binary: " in log
        assert f"{flavour}: stripped nv-modeset-kernel.o_binary: " in log
    assert "driver base laid out: /opt/nvidia-driver" in log
    assert "laying out PLACEHOLDER user space" in log
    config = json.loads(
        subprocess.run(
            buildah.buildah("inspect", "--type", "image", driver_base.name),
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    )["OCIv1"]["config"]
    assert config["Labels"]["releasebot.driver-base"] == f"{standins.driver_version}/amd64"


def test_the_image_is_what_the_operator_and_the_bot_expect(
    image: Image, standins: Standins, flatcar_version: str
) -> None:
    config = json.loads(
        subprocess.run(
            buildah.buildah("inspect", "--type", "image", image.name),
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    )["OCIv1"]["config"]
    assert config["Entrypoint"] == ["nvidia-driver"]
    assert config["Cmd"] == ["init"]
    assert config["Labels"]["releasebot.kernel-version"] == standins.kernel_version
    assert config["Labels"]["releasebot.flatcar-version"] == flatcar_version
    assert config["Labels"]["releasebot.driver-version"] == standins.driver_version
    env = dict(item.split("=", 1) for item in config["Env"])
    assert env["NVIDIA_VISIBLE_DEVICES"] == "void"
    assert env["DRIVER_VERSION"] == standins.driver_version
    root = image.built.root
    assert (root / "usr/local/bin/nvidia-driver").stat().st_mode & 0o111
    assert (root / "usr/bin/nvidia-smi").exists()
    assert (root / "usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1").exists()
    assert not (root / "lib/firmware/nvidia" / standins.driver_version).exists()


def test_opt_nvidia_driver_holds_both_flavours(image: Image, standins: Standins) -> None:
    driver = image.built.driver_root
    info = dict(line.split("=", 1) for line in (driver / "build-info").read_text().splitlines())
    assert info["KERNEL_VERSION"] == standins.kernel_version
    assert info["MODULE_TYPES"] == "both"
    assert info["GCC_MAJOR"] == "14"
    for flavour in ("kernel", "kernel-open"):
        package = driver / flavour / "precompiled" / f"nvidia-modules-{standins.kernel_version}"
        listing = subprocess.run(
            [str(driver / "bin" / "mkprecompiled"), "--info", str(package)],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        assert f"proc version: {info['KERNEL_BANNER']}\n" in listing
        core = driver / flavour / "nvidia" / "nv-kernel.o_binary"
        assert core.stat().st_size > 0
        # Stripped: no DWARF left in the core the node links with.
        sections = subprocess.run(
            ["objdump", "-h", str(core)], capture_output=True, text=True, check=True
        ).stdout
        assert ".debug_info" not in sections
    assert sorted(path.name for path in (driver / "firmware").iterdir()) == [
        "gsp_ga10x.bin",
        "gsp_tu10x.bin",
    ]


def test_every_packed_module_is_for_the_target_kernel(
    image: Image, standins: Standins, tmp_path: Path
) -> None:
    driver = image.built.driver_root
    kv = standins.kernel_version
    for flavour in ("kernel", "kernel-open"):
        out = tmp_path / flavour
        out.mkdir()
        subprocess.run(
            [
                str(driver / "bin" / "mkprecompiled"),
                "--unpack",
                str(driver / flavour / "precompiled" / f"nvidia-modules-{kv}"),
                "-o",
                str(out),
            ],
            capture_output=True,
            check=True,
        )
        modules = sorted(out.glob("*.ko"))
        assert {path.name for path in modules} >= {"nvidia-uvm.ko", "nvidia-drm.ko"}
        for module in modules:
            assert vermagic(module).startswith(f"{kv} "), module
            sections = subprocess.run(
                ["objdump", "-h", str(module)], capture_output=True, text=True, check=True
            ).stdout
            assert ".debug_info" not in sections, module
    shipped = list((driver / "modroot" / "lib" / "modules" / kv / "kernel").rglob("*.ko.xz"))
    assert shipped
    for module in shipped[:5]:
        assert vermagic(module).startswith(f"{kv} "), module


CAPABILITY_NUMBERS = {
    "CHOWN": 0,
    "DAC_OVERRIDE": 1,
    "FOWNER": 3,
    "FSETID": 4,
    "KILL": 5,
    "SETGID": 6,
    "SETUID": 7,
    "SETFCAP": 31,
}
"""linux/capability.h's numbers of the capabilities the Kaniko Job grants."""


def test_the_run_steps_have_only_the_kaniko_jobs_capabilities(
    base_image: str, tmp_path: Path
) -> None:
    """A RUN step built the way the recipe is built reads its own capability sets."""
    (tmp_path / "Containerfile").write_text(
        "ARG BASE\nFROM ${BASE}\nRUN grep -E '^Cap(Prm|Eff|Bnd):' /proc/self/status\n"
    )
    probe = "localhost/releasebot-recipe-capability-probe:latest"
    try:
        text = buildah.build(
            probe,
            {"BASE": base_image},
            tmp_path / "build.log",
            dockerfile=tmp_path / "Containerfile",
            context=tmp_path,
        )
    finally:
        subprocess.run(buildah.buildah("rmi", "-f", probe), capture_output=True, check=False)
    expected = sum(1 << CAPABILITY_NUMBERS[name] for name in KANIKO_CAPABILITIES)
    found: dict[str, int] = {}
    for line in text.splitlines():
        name, _, value = line.partition(":")
        if name in ("CapPrm", "CapEff", "CapBnd"):
            found[name] = int(value.strip(), 16)
    assert found == {"CapPrm": expected, "CapEff": expected, "CapBnd": expected}, text
