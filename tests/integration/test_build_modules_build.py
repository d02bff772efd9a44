"""``build-modules build`` on a small NVIDIA-shaped source tree that compiles in a second.

The runfile here is a shell script that copies a prepared tree for ``--extract-only
--target``; ``mkprecompiled`` is the real one, built from ``../shared/vendor`` (skipped
when that is absent, except in CI); ``make``, ``gcc``, ``ld``, ``modinfo`` and ``depmod``
are the machine's own. Each flavour directory (``kernel/``, ``kernel-open/``) has a Makefile
that builds what NVIDIA's does, as real ELF objects: ``nv-linux.o`` and
``nv-modeset-linux.o`` (the unlinked interfaces), the binary cores, ``nvidia-uvm.ko``, and
kbuild's ``.module-common.o`` holding the vermagic. As with NVIDIA's rule on kernels from
6.11 on, the interfaces have no vermagic of their own. ``nvidia.ko`` needs a symbol that
an in-tree module of the release exports (as it needs drm's). A flavour can be made to
fail compiling. Covers: both flavours packed, linked and checked, the vermagic taken from
``.module-common.o`` (and not linked twice into an interface that has it), the in-tree
module resolving the symbol, kbuild's link-time objtool command (IBT kernels) run on the
interfaces, a compile failure naming its flavour (and the ``incompatible:`` line releasebot
classifies), ``--module-types`` building one flavour only, and a bad value refused.
The real compile against a real kernel tree is the recipe suite's (``tests/recipe``).
"""

from __future__ import annotations

import lzma
import os
import shutil
import subprocess
import textwrap
from dataclasses import dataclass
from pathlib import Path

import pytest

from releasebot.domain.targets.builds import FailureReason, classify_exit
from tests.support.tools import missing_tool

SCRIPT = Path(__file__).resolve().parents[2] / "releasebot" / "recipe" / "scripts" / "build-modules"
VENDOR = Path(
    os.environ.get("SHARED_VENDOR", Path(__file__).resolve().parents[3] / "shared" / "vendor")
)
KV = "6.12.102-flatcar"
DRIVER = "550.163.01"
BANNER = f"Linux version {KV} (build@host) (gcc 12.2.0, GNU ld 2.40) #1 SMP PREEMPT_DYNAMIC 2026"
VERMAGIC = f"{KV} SMP preempt mod_unload modversions "

MAKEFILE = """\
# What NVIDIA's Makefile leaves after `make nv-linux.o nv-modeset-linux.o` on 6.11+.
nv-linux.o nv-modeset-linux.o: built
built:
\t@if [ -e FAIL ]; then echo "nvidia/nv-pci.c:237:9: error: too few arguments to \
function 'pci_resize_resource'" >&2; exit 2; fi
\t$(CC) -c -o .module-common.o module-common.c
\t$(CC) -g -c -o nv-linux.o interface.c
\t$(CC) -g -c -o nv-modeset-linux.o interface.c
\tif [ -e DELAYED_OBJTOOL ]; then for m in nvidia nvidia-modeset; do \
\t  echo "savedcmd_$$m.o := ld -r -o $$m.o @$$m.mod  ; \
./tools/objtool/objtool --rethunk --link --module $$m.o" >.$$m.o.cmd; done; fi
\tif [ -e LINK_COMMON ]; then for o in nv-linux.o nv-modeset-linux.o; do \
\t  $(LD) -r -o $$o.new $$o .module-common.o && mv $$o.new $$o; done; fi
\ttest -f nvidia/nv-kernel.o_binary && test -f nvidia-modeset/nv-modeset-kernel.o_binary
\t$(CC) -g -c -o uvm.o core.c
\t$(LD) -r -o nvidia-uvm.ko uvm.o .module-common.o
\ttouch built
"""


def modinfo_c(*entries: str) -> str:
    return "".join(
        f'static const char m{i}[] __attribute__((section(".modinfo"), used, aligned(1))) = '
        f'"{entry}";\n'
        for i, entry in enumerate(entries)
    )


@dataclass(frozen=True)
class Inputs:
    root: Path
    runfile: Path
    modules_dir: Path
    flatcar_root: Path
    config: Path
    out: Path

    @property
    def base(self) -> Path:
        """The driver base's /opt/nvidia-driver (``build-modules driver``)."""
        return self.root / "base"

    @property
    def sources(self) -> Path:
        """The driver base's interface sources."""
        return self.root / "src"

    def driver(self, *extra: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [
                "bash",
                str(SCRIPT),
                "driver",
                "--runfile",
                str(self.runfile),
                "--keep-runfile",
                "--driver-version",
                DRIVER,
                "--out",
                str(self.base),
                "--sources",
                str(self.sources),
                *extra,
            ],
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
            env={**os.environ, "TMPDIR": str(self.root)},
        )

    def build(self, *extra: str) -> subprocess.CompletedProcess[str]:
        """``driver`` (once), then ``build`` for the kernel from what it laid out."""
        if not self.base.exists():
            laid_out = self.driver()
            assert laid_out.returncode == 0, laid_out.stderr
        return subprocess.run(
            [
                "bash",
                str(SCRIPT),
                "build",
                "--sources",
                str(self.sources),
                "--driver-root",
                str(self.base),
                "--kernel-version",
                KV,
                "--flatcar-root",
                str(self.flatcar_root),
                "--kernel-config",
                str(self.config),
                "--gcc-major",
                "",
                "--arch",
                "amd64",
                "--out",
                str(self.out),
                "--driver-version",
                DRIVER,
                "--driver-branch",
                "550",
                "--flatcar-version",
                "4593.2.5",
                "--flatcar-channel",
                "stable",
                "--modules-dir",
                str(self.modules_dir),
                *extra,
            ],
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
            env={**os.environ, "BUILD_JOBS": "2", "TMPDIR": str(self.root)},
        )


def require(tool: str) -> None:
    if shutil.which(tool) is None:
        missing_tool(f"{tool} is not installed")


@pytest.fixture(scope="module")
def mkprecompiled(tmp_path_factory: pytest.TempPathFactory) -> Path:
    source = VENDOR / "nvidia-installer-535.113.01"
    if not source.is_dir():
        missing_tool(f"NVIDIA's nvidia-installer sources not found at {source}")
    for tool in ("make", "gcc", "ld", "modinfo", "depmod"):
        require(tool)
    build = tmp_path_factory.mktemp("nvidia-installer")
    shutil.copytree(source, build, dirs_exist_ok=True)
    for path in [build, *build.rglob("*")]:
        path.chmod(path.stat().st_mode | 0o200)
    subprocess.run(
        ["make", "-C", str(build), "_out/Linux_x86_64/mkprecompiled"],
        check=True,
        capture_output=True,
        timeout=300,
    )
    return build / "_out" / "Linux_x86_64" / "mkprecompiled"


def flavour(directory: Path, *, fail: bool, link_common: bool, delayed_objtool: bool) -> None:
    directory.mkdir(parents=True)
    if delayed_objtool:  # an IBT kernel: kbuild ran objtool on the linked module only
        (directory / "DELAYED_OBJTOOL").write_text("")
    if link_common:  # an NVIDIA rule that links .module-common.o itself
        (directory / "LINK_COMMON").write_text("")
    (directory / "Makefile").write_text(MAKEFILE)
    (directory / "module-common.c").write_text(modinfo_c(f"vermagic={VERMAGIC}"))
    # The interface needs a symbol of an in-tree module (as nvidia.ko needs drm's).
    (directory / "interface.c").write_text(
        modinfo_c("license=Dual MIT/GPL")
        + "extern int drm_fake_export;\nint *nv_interface(void) { return &drm_fake_export; }\n"
    )
    (directory / "core.c").write_text("int nv_core(void) { return 0; }\n")
    # The binary cores ship prebuilt in the runfile, with debug information.
    for core in ("nvidia/nv-kernel.o_binary", "nvidia-modeset/nv-modeset-kernel.o_binary"):
        (directory / core).parent.mkdir()
        subprocess.run(
            ["gcc", "-g", "-c", "-o", str(directory / core), str(directory / "core.c")], check=True
        )
    if fail:
        (directory / "FAIL").write_text("")


def in_tree_module(modules_dir: Path, work: Path) -> None:
    """kernel/drivers/gpu/drm/drm.ko.xz exporting drm_fake_export, as a release ships it."""
    source = work / "drm.c"
    source.write_text(
        modinfo_c(f"vermagic={VERMAGIC}", "license=GPL")
        + "int drm_fake_export;\n"
        + 'static const char ks[] __attribute__((section("__ksymtab_strings"), used)) = '
        + '"drm_fake_export";\n'
        + "int __ksymtab_drm_fake_export;\n"
    )
    subprocess.run(["gcc", "-c", "-o", str(work / "drm.ko"), str(source)], check=True)
    target = modules_dir / KV / "kernel" / "drivers" / "gpu" / "drm" / "drm.ko.xz"
    target.parent.mkdir(parents=True)
    target.write_bytes(lzma.compress((work / "drm.ko").read_bytes(), format=lzma.FORMAT_XZ))


def make_inputs(
    root: Path,
    mkprecompiled: Path,
    *,
    failing: tuple[str, ...] = (),
    link_common: bool = False,
    delayed_objtool: bool = False,
) -> Inputs:
    payload = root / "payload"
    for name in ("kernel", "kernel-open"):
        flavour(
            payload / name,
            fail=name in failing,
            link_common=link_common,
            delayed_objtool=delayed_objtool,
        )
    shutil.copy(mkprecompiled, payload / "mkprecompiled")
    (payload / "firmware").mkdir()
    (payload / "firmware" / "gsp_ga10x.bin").write_bytes(b"gsp")
    runfile = root / f"NVIDIA-Linux-x86_64-{DRIVER}.run"
    runfile.write_text(
        textwrap.dedent(f"""\
            #!/bin/sh
            # A stand-in runfile: --extract-only --target DIR copies the payload.
            [ "$1" = --extract-only ] && [ "$2" = --target ] || exit 2
            mkdir -p "$3" && cp -a {payload}/. "$3/"
            """)
    )
    modules_dir = root / "modules"
    tree = modules_dir / KV / "build"
    tree.mkdir(parents=True)
    # The tree's objtool: adds the sections kbuild's would (here: an empty .return_sites).
    objtool = tree / "tools" / "objtool" / "objtool"
    objtool.parent.mkdir(parents=True)
    objtool.write_text(
        "#!/bin/sh\n"
        '[ "$SRCARCH" = x86 ] || { echo "objtool: SRCARCH variable not defined"; exit 1; }\n'
        'for last; do :; done\nprintf "\\0\\0\\0\\0" >"$last.sites"\n'
        'objcopy --add-section .return_sites="$last.sites" "$last" && rm "$last.sites"\n'
    )
    objtool.chmod(0o755)
    (tree / "Module.symvers").write_text("0x12345678\tprintk\tvmlinux\tEXPORT_SYMBOL\t\n")
    in_tree_module(modules_dir, root)
    flatcar_root = root / "flatcar"
    flatcar_root.mkdir()
    (flatcar_root / "banner").write_text(BANNER + "\n")
    config = root / "kernel_config.txt"
    major = (
        subprocess.run(["gcc", "-dumpversion"], capture_output=True, text=True, check=True)
        .stdout.strip()
        .split(".")[0]
    )
    require(f"gcc-{major}")
    config.write_text(f"CONFIG_GCC_VERSION={int(major) * 10000 + 200}\n")
    return Inputs(root, runfile, modules_dir, flatcar_root, config, root / "out")


def vermagic(path: Path) -> str:
    """The .modinfo vermagic of a .o or .ko (modinfo itself reads .ko files only)."""
    if path.suffix != ".ko":
        shutil.copy(path, path.with_suffix(".ko"))
        path = path.with_suffix(".ko")
    return subprocess.run(
        ["modinfo", "-F", "vermagic", str(path)], capture_output=True, text=True, check=True
    ).stdout.strip()


def unpack(mkprecompiled: Path, inputs: Inputs, flavour: str, into: Path) -> Path:
    """``into``, holding what ``mkprecompiled --unpack`` takes out of ``flavour``'s package."""
    package = inputs.out / flavour / "precompiled" / f"nvidia-modules-{KV}"
    into.mkdir()
    subprocess.run(
        [str(mkprecompiled), "--unpack", str(package), "-o", str(into)],
        check=True,
        capture_output=True,
    )
    return into


def test_both_flavours_are_packed_with_the_kernels_vermagic(
    tmp_path: Path, mkprecompiled: Path
) -> None:
    inputs = make_inputs(tmp_path, mkprecompiled)
    result = inputs.build()
    assert result.returncode == 0, result.stderr
    for name in ("kernel", "kernel-open"):
        package = inputs.out / name / "precompiled" / f"nvidia-modules-{KV}"
        info = subprocess.run(
            [str(mkprecompiled), "--info", str(package)], capture_output=True, text=True
        ).stdout
        assert f"proc version: {BANNER}" in info
        unpacked = unpack(mkprecompiled, inputs, name, tmp_path / f"unpacked-{name}")
        # The packed interfaces now carry the vermagic kbuild keeps in .module-common.o.
        assert vermagic(unpacked / "nv-linux.o") == VERMAGIC.strip()
        assert vermagic(unpacked / "nv-modeset-linux.o") == VERMAGIC.strip()
        assert f"{name} (" in result.stderr
        assert "linked kbuild's .module-common.o (vermagic, retpoline, ORC header)" in result.stderr
        assert f"{name}: packed and checked" in result.stderr
    build_info = (inputs.out / "build-info").read_text()
    assert "MODULE_TYPES=both\n" in build_info
    assert f"KERNEL_BANNER={BANNER}\n" in build_info
    assert (inputs.out / "modroot" / "lib" / "modules" / KV / "modules.dep").exists()


def sections(path: Path) -> str:
    return subprocess.run(
        ["objdump", "-h", str(path)], capture_output=True, text=True, check=True
    ).stdout


def test_link_time_objtool_is_run_on_the_interfaces(tmp_path: Path, mkprecompiled: Path) -> None:
    inputs = make_inputs(tmp_path, mkprecompiled, delayed_objtool=True)
    result = inputs.build("--module-types", "open")
    assert result.returncode == 0, result.stderr
    assert "ran kbuild's link-time objtool on nv-linux.o" in result.stderr
    assert "ran kbuild's link-time objtool on nv-modeset-linux.o" in result.stderr
    unpacked = unpack(mkprecompiled, inputs, "kernel-open", tmp_path / "unpacked")
    assert " .return_sites " in sections(unpacked / "nv-linux.o")
    assert " .return_sites " in sections(unpacked / "nv-modeset-linux.o")


def test_without_link_time_objtool_the_interfaces_are_left_alone(
    tmp_path: Path, mkprecompiled: Path
) -> None:
    inputs = make_inputs(tmp_path, mkprecompiled)
    result = inputs.build("--module-types", "open")
    assert result.returncode == 0, result.stderr
    assert "link-time objtool" not in result.stderr


def test_an_interface_with_its_own_vermagic_is_left_as_it_is(
    tmp_path: Path, mkprecompiled: Path
) -> None:
    inputs = make_inputs(tmp_path, mkprecompiled, link_common=True)
    result = inputs.build()
    assert result.returncode == 0, result.stderr
    assert ".module-common.o" not in result.stderr
    assert "kernel-open: packed and checked" in result.stderr


def test_a_compile_failure_names_its_flavour_and_fails_the_image(
    tmp_path: Path, mkprecompiled: Path
) -> None:
    inputs = make_inputs(tmp_path, mkprecompiled, failing=("kernel-open",))
    result = inputs.build()
    assert result.returncode == 1
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("build-modules: ERROR: kernel-open (open): compiling NVIDIA")
    assert f"for kernel {KV} failed" in last
    assert "too few arguments to function 'pci_resize_resource'" in result.stderr
    assert not (inputs.out / "build-info").exists()
    # The fixed line releasebot recognises in the Job's log: a distinct, final outcome.
    marker = result.stderr.strip().splitlines()[-2]
    assert marker.startswith(f"incompatible: NVIDIA {DRIVER} does not compile for kernel {KV}")
    assert classify_exit(result.stderr) is FailureReason.INCOMPATIBLE
    assert not FailureReason.INCOMPATIBLE.transient


@pytest.mark.parametrize(("types", "built"), [("proprietary", "kernel"), ("open", "kernel-open")])
def test_one_flavour_only_when_asked(
    tmp_path: Path, mkprecompiled: Path, types: str, built: str
) -> None:
    other = "kernel-open" if built == "kernel" else "kernel"
    inputs = make_inputs(tmp_path, mkprecompiled, failing=(other,))
    result = inputs.build("--module-types", types)
    assert result.returncode == 0, result.stderr
    assert (inputs.out / built / "precompiled" / f"nvidia-modules-{KV}").is_file()
    assert not (inputs.out / other).exists()
    assert f"MODULE_TYPES={types}\n" in (inputs.out / "build-info").read_text()


def test_a_bad_module_types_value_is_refused(tmp_path: Path, mkprecompiled: Path) -> None:
    inputs = make_inputs(tmp_path, mkprecompiled)
    result = inputs.build("--module-types", "all")
    assert result.returncode == 1
    assert "MODULE_TYPES='all' is not one of proprietary, open, both" in result.stderr


def test_a_symbol_of_no_module_stops_the_build(tmp_path: Path, mkprecompiled: Path) -> None:
    inputs = make_inputs(tmp_path, mkprecompiled)
    shutil.rmtree(inputs.modules_dir / KV / "kernel")
    result = inputs.build("--module-types", "proprietary")
    assert result.returncode == 1
    assert "do not resolve against this kernel" in result.stderr
    assert "drm_fake_export" in result.stderr


def has_debug_info(path: Path) -> bool:
    return " .debug_info " in sections(path)


def test_the_driver_base_holds_stripped_cores_once_and_the_sources(
    tmp_path: Path, mkprecompiled: Path
) -> None:
    inputs = make_inputs(tmp_path, mkprecompiled)
    result = inputs.driver()
    assert result.returncode == 0, result.stderr
    for name in ("kernel", "kernel-open"):
        for core in ("nvidia/nv-kernel.o_binary", "nvidia-modeset/nv-modeset-kernel.o_binary"):
            kept = inputs.base / name / core
            assert kept.is_file()
            assert not kept.is_symlink()
            assert not has_debug_info(kept)
            assert f"{name}: stripped {core.split('/')[1]}: " in result.stderr
            # The sources' core is a link to the base's: the file is there once.
            linked = inputs.sources / name / core
            assert linked.is_symlink()
            assert linked.resolve() == kept.resolve()
        assert (inputs.sources / name / "Makefile").is_file()
    assert (inputs.base / "bin" / "mkprecompiled").stat().st_mode & 0o111
    assert (inputs.base / "firmware" / "gsp_ga10x.bin").read_bytes() == b"gsp"
    assert (inputs.base / "driver-version").read_text() == f"{DRIVER}\n"
    ld = subprocess.run(["ld", "--version"], capture_output=True, text=True, check=True)
    assert (inputs.base / "ld-version").read_text() == ld.stdout.splitlines()[0] + "\n"
    assert inputs.runfile.exists()  # --keep-runfile: the base runs its installer next


def test_the_packed_interfaces_and_modules_are_stripped_and_keep_their_vermagic(
    tmp_path: Path, mkprecompiled: Path
) -> None:
    inputs = make_inputs(tmp_path, mkprecompiled)
    result = inputs.build("--module-types", "open")
    assert result.returncode == 0, result.stderr
    assert "stripped nv-linux.o: " in result.stderr
    unpacked = unpack(mkprecompiled, inputs, "kernel-open", tmp_path / "unpacked")
    for name in ("nv-linux.o", "nv-modeset-linux.o", "nvidia-uvm.ko"):
        assert not has_debug_info(unpacked / name), name
        assert vermagic(unpacked / name) == VERMAGIC.strip(), name
    # The kernel layer holds no core, no mkprecompiled, no firmware: those are the base's.
    assert sorted(path.name for path in inputs.out.iterdir()) == [
        "build-info",
        "kernel-open",
        "modroot",
    ]
    assert [path.name for path in (inputs.out / "kernel-open").iterdir()] == ["precompiled"]


def test_an_ld_other_than_the_bases_is_refused(tmp_path: Path, mkprecompiled: Path) -> None:
    inputs = make_inputs(tmp_path, mkprecompiled)
    assert inputs.driver().returncode == 0
    (inputs.base / "ld-version").write_text("GNU ld (GNU Binutils) 1.0\n")
    result = inputs.build()
    assert result.returncode == 1
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("build-modules: ERROR: ld here (GNU ld")
    assert "is not the driver base's (GNU ld (GNU Binutils) 1.0)" in last
    assert "rebuild the base" in last


def test_a_build_without_a_driver_base_is_refused(tmp_path: Path, mkprecompiled: Path) -> None:
    inputs = make_inputs(tmp_path, mkprecompiled)
    inputs.base.mkdir()
    result = inputs.build()
    assert result.returncode == 1
    assert "is not a driver base's /opt/nvidia-driver" in result.stderr.strip().splitlines()[-1]
