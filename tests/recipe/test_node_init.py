"""``nvidia-driver init`` inside the built image, against the booted kernel's /proc/version.

For each flavour: the real ``mkprecompiled --match`` accepts the booted kernel's
``/proc/version``; the image's ld links the modules; every linked module carries the
target kernel's vermagic; the image's kmod resolves them and their in-tree dependencies
(``.ko.xz``) from the private module root; the firmware is copied and the firmware path
written; init reaches its waiting state and exits 0 on SIGTERM. With its sleeper killed,
init starts another one and uses next to no CPU (the number is printed with the timings).
"""

from __future__ import annotations

import subprocess

import pytest

from tests.recipe.node import READY, InitRun
from tests.recipe.standins import Standins


@pytest.mark.parametrize("flavour", ["proprietary", "open"])
def test_init_reaches_waiting_and_exits_zero_on_term(
    init_runs: dict[str, InitRun], standins: Standins, flavour: str
) -> None:
    run = init_runs[flavour]
    kv = standins.kernel_version
    assert READY in run.output
    assert run.exit_code == 0, run.output
    assert "Precompiled package matches the running kernel: Linux version" in run.output
    assert f"Vermagic of the linked modules: {kv}" in run.output
    assert (
        f"Kernel module type: {'kernel' if flavour == 'proprietary' else 'kernel-open'}"
        in run.output
    )
    # The image's kmod resolved the linked module and its in-tree dependencies.
    assert f"/lib/modules/{kv}/video/nvidia.ko" in run.output
    assert ".ko.xz" in run.output
    assert "Copying GSP firmware" in run.output
    assert "Caught signal, unloading the driver" in run.output
    assert any(call.startswith("mount --rbind / ") for call in run.calls)
    assert "nvidia-persistenced --persistence-mode" in run.calls


@pytest.mark.parametrize("flavour", ["proprietary", "open"])
def test_every_linked_module_is_for_the_target_kernel(
    init_runs: dict[str, InitRun], standins: Standins, flavour: str
) -> None:
    modules = sorted(init_runs[flavour].modules.glob("*.ko"))
    assert {path.name for path in modules} >= {"nvidia.ko", "nvidia-modeset.ko", "nvidia-uvm.ko"}
    for module in modules:
        vermagic = subprocess.run(
            ["modinfo", "-F", "vermagic", str(module)], capture_output=True, text=True, check=True
        ).stdout
        assert vermagic.startswith(f"{standins.kernel_version} "), (module, vermagic)


def test_a_killed_sleeper_does_not_make_init_spin(init_runs: dict[str, InitRun]) -> None:
    cpu = init_runs["proprietary"].spin_cpu_seconds
    assert cpu is not None
    # A spinning wait burns whatever CPU it is given; a waiting shell next to none.
    assert cpu < 0.5
