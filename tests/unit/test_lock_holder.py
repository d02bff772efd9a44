"""Telling a dead guard holder on this host from a live one, or one elsewhere."""

from __future__ import annotations

import os
import socket
import subprocess
import sys

from releasebot.runtime.lock import holder_died, local_holder


def test_a_holder_whose_process_is_gone_died() -> None:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()  # reaped: the pid names no process any more
    assert holder_died(f"bot@{socket.gethostname()}:{child.pid}")


def test_live_foreign_and_malformed_holders_did_not_die() -> None:
    host = socket.gethostname()
    assert not holder_died(f"bot@{host}:{os.getppid()}")  # a live process
    assert not holder_died(local_holder("bot"))  # ourselves
    assert not holder_died("bot@another-host:1234")  # cannot be checked from here
    assert not holder_died("replica-a/1234")  # an old-style name: wait for the row to lapse
    assert local_holder("bot") == f"bot@{host}:{os.getpid()}"
