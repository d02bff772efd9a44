"""The ground truth: the target kernel booted under QEMU.

Boot 1 reads the booted kernel's ``/proc/version``: the banner the recipe packed (from the
vmlinuz, by ``kernel-banner``) must equal it byte for byte, and it is what the init
scenarios then match against. One more boot per flavour inserts the in-tree modules
``nvidia`` depends on, then that flavour's ``nvidia.ko`` as ``nvidia-driver init`` linked
it inside the image: the kernel must accept vermagic, symbol versions and relocations,
patch its return thunks and retpolines without a warning, and stop only for the missing
GPU (``NVRM: No NVIDIA GPU found.``, ENODEV).
"""

from __future__ import annotations

import errno

import pytest

from tests.recipe.buildah import Image
from tests.recipe.standins import Standins
from tests.recipe.vm import Boot

REFUSALS = (
    "WARNING:",
    "Call Trace",
    "Unpatched return thunk",
    "Unknown symbol",
    "disagrees about version",
    "version magic",
    "no symbol version",
    "not compiled with retpoline",
    "return thunk",
    "Invalid ELF",
    "invalid module format",
)


def test_the_packed_banner_is_the_booted_kernels_proc_version(
    banner_boot: Boot, image: Image, standins: Standins
) -> None:
    info = (image.built.driver_root / "build-info").read_text().splitlines()
    packed = next(
        line.removeprefix("KERNEL_BANNER=") for line in info if line.startswith("KERNEL_BANNER=")
    )
    assert banner_boot.proc_version == packed.encode() + b"\n"
    assert banner_boot.proc_version.startswith(
        f"Linux version {standins.kernel_version} (".encode()
    )


@pytest.mark.parametrize("flavour", ["proprietary", "open"])
def test_the_booted_kernel_accepts_the_linked_nvidia_ko(
    module_boots: dict[str, Boot], flavour: str
) -> None:
    module_boot = module_boots[flavour]
    assert module_boot.failed_dependencies == []
    messages = module_boot.messages.get(flavour, [])
    text = "\n".join(messages)
    assert "NVRM: No NVIDIA GPU found." in text, module_boot.output[-3000:]
    # busybox's insmod exits with the errno: "No NVIDIA GPU found" is ENODEV.
    assert module_boot.results[flavour] == errno.ENODEV
    for refusal in REFUSALS:
        assert refusal not in text, text
