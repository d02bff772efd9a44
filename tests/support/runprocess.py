"""Helpers to run ``releasebot`` as a REAL subprocess and watch it over HTTP.

Used by the process and leadership tests and by ``benchmarks/bench_run.py``: start
``python -m releasebot ...`` with a clean environment (no developer ``RELEASEBOT_*``),
stderr to a file (a pipe nobody reads would block it), wait for its endpoints with a
bound, read its metrics through ``prometheus_client``'s parser, stop it with SIGTERM (or
kill it), and never leave it running: ``ReleasebotProcess`` is a context manager that
kills what is still alive on exit.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families

REPO = Path(__file__).resolve().parents[2]

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def wait_for(
    condition: Callable[[], Any], *, timeout: float, every: float = 0.05, what: str = ""
) -> Any:
    """Poll ``condition`` until it returns something truthy; AssertionError after ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what or condition}")
        time.sleep(every)


def parse_metrics(text: str) -> Samples:
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


class ReleasebotProcess:
    """One ``releasebot`` process; ``port`` is its ``run.listen`` port, if it serves."""

    def __init__(
        self,
        args: list[str],
        log_path: Path,
        *,
        port: int | None = None,
        env: Mapping[str, str] | None = None,
        command: Sequence[str] | None = None,
    ) -> None:
        """``command`` starts releasebot (default: this interpreter's ``-m releasebot``)."""
        clean = {k: v for k, v in os.environ.items() if not k.startswith("RELEASEBOT_")}
        clean.update(env or {})
        clean.setdefault("PYTHONUNBUFFERED", "1")
        self.log_path = log_path
        self.port = port
        self._log = log_path.open("wb")
        self.process = subprocess.Popen(
            [*(command or (sys.executable, "-m", "releasebot")), *args],
            cwd=REPO,
            env=clean,
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # our signals reach it only when we send them
        )

    @property
    def pid(self) -> int:
        return self.process.pid

    @property
    def url(self) -> str:
        assert self.port is not None, "this process serves no HTTP"
        return f"http://127.0.0.1:{self.port}"

    def get(self, path: str, timeout: float = 2.0) -> httpx.Response | None:
        """The answer to GET ``path``, or ``None`` while nothing listens."""
        try:
            return httpx.get(self.url + path, timeout=timeout)
        except httpx.TransportError:
            return None

    def wait_serving(self, timeout: float = 30.0) -> None:
        def serving() -> bool:
            if self.process.poll() is not None:
                raise AssertionError(f"releasebot exited early:\n{self.output()}")
            answer = self.get("/healthz")
            return answer is not None and answer.status_code == 200

        wait_for(serving, timeout=timeout, what="/healthz")

    def metrics(self) -> Samples:
        answer = self.get("/metrics")
        assert answer is not None, "no answer from /metrics"
        assert answer.status_code == 200
        return parse_metrics(answer.text)

    def metric(self, name: str, **labels: str) -> float | None:
        return self.metrics().get((name, tuple(sorted(labels.items()))))

    def terminate(self, timeout: float = 20.0) -> int:
        """SIGTERM, then wait up to ``timeout``; the exit code (fails if it hangs)."""
        self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError(
                f"no exit within {timeout} s of SIGTERM:\n{self.output()}"
            ) from None

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=10)

    def wait(self, timeout: float) -> int:
        return self.process.wait(timeout=timeout)

    def output(self) -> str:
        self._log.flush()
        return self.log_path.read_text(errors="replace")

    def __enter__(self) -> ReleasebotProcess:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.kill()
        self._log.close()


def cpu_seconds(pid: int) -> float:
    """utime + stime of a process from ``/proc/<pid>/stat``, in seconds."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    return (int(fields[11]) + int(fields[12])) / ticks


def peak_rss_mib(pid: int) -> float:
    """``VmHWM`` (the peak resident set) of a process, in MiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise AssertionError(f"no VmHWM for {pid}")


CONTEXT = "git://git.example.test/gpu/recipes.git#refs/heads/main#" + "0123456789" * 4


def write_config(
    path: Path,
    *,
    database_url: str,
    flatcar_url: str,
    nvidia_url: str,
    repository: str,
    kubeconfig: Path,
    namespace: str,
    port: int = 0,
    interval: int = 1,
    lease_seconds: int = 3,
    channels: tuple[str, ...] = ("stable",),
    keep: int = 1,
    branches: tuple[str, ...] = ("580",),
    leader_election: str = "kubernetes",
    bases: bool = False,
) -> Path:
    """A complete settings file for a run against the test doubles (no identity: set
    ``RELEASEBOT_RUN_IDENTITY`` per process). ``bases`` off by default: these runs follow
    one image per target (driver bases have their own tests, ``test_driver_bases.py``)."""
    quoted = ", ".join(f'"{c}"' for c in channels)
    branch_list = ", ".join(f'"{b}"' for b in branches)
    path.write_text(
        f"""
[database]
url = "{database_url}"
[flatcar]
feed_url = "{flatcar_url}"
channels = [{quoted}]
keep = {keep}
[nvidia]
feed_url = "{nvidia_url}"
branches = [{branch_list}]
[registry]
repository = "{repository}"
insecure = true
[kubernetes]
namespace = "{namespace}"
kubeconfig = "{kubeconfig}"
[kaniko]
context = "{CONTEXT}"
[recipe]
# No Flatcar or NVIDIA servers here: the readiness gate has its own tests.
check_inputs = false
bases = {"true" if bases else "false"}
[run]
interval_seconds = {interval}
jitter_seconds = 0
listen = "127.0.0.1:{port}"
lease_seconds = {lease_seconds}
leader_election = "{leader_election}"
log_format = "json"
""",
        encoding="utf-8",
    )
    return path
