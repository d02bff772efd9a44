"""``edge.heap``: the C heap's free pages go back to the system after a cycle.

On glibc (the image's C library, and this test machine's) a heap left full of holes by
freed blocks shrinks in resident memory once ``give_back_free_memory`` runs; where the C
library has no ``malloc_trim`` it does nothing and says so.
"""

from __future__ import annotations

import ctypes
import platform
import re
from pathlib import Path

import pytest

from releasebot.edge import heap

MIB = 1024 * 1024


def resident() -> int:
    status = Path("/proc/self/status").read_text()
    match = re.search(r"VmRSS:\s+(\d+) kB", status)
    assert match is not None
    return int(match.group(1)) * 1024


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="malloc_trim is glibc's")
def test_the_freed_middle_of_the_heap_goes_back_to_the_system() -> None:
    # 80 MiB of blocks below glibc's mmap threshold (so on the heap), every 50th kept: the
    # top of the heap stays in use, so glibc gives nothing back by itself.
    blocks = [bytearray(4000) for _ in range(20_000)]
    kept = [*blocks[::50], blocks[-1]]
    del blocks
    before = resident()
    assert heap.give_back_free_memory()
    assert before - resident() > 30 * MIB
    assert len(kept) == 401


def test_without_malloc_trim_it_does_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_library(name: str) -> ctypes.CDLL:
        raise OSError(f"{name}: no such library")

    heap._malloc_trim.cache_clear()
    monkeypatch.setattr(heap.ctypes, "CDLL", no_library)
    try:
        assert heap.give_back_free_memory() is False
    finally:
        monkeypatch.undo()
        heap._malloc_trim.cache_clear()
