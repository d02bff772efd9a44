"""``releasebot demo --serve`` as a real process: it plans offline, prints the page's URL,
serves the page and API on loopback with simulated builds in every state worth seeing
(published and signed with its Slack message, building, failed with a log tail,
retrying), and stops cleanly on Ctrl-C (SIGINT) without a traceback."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def demo(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[str], str]]:
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "releasebot",
            "demo",
            "--serve",
            "--listen",
            "127.0.0.1:0",
            "--dir",
            str(tmp_path),
        ],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    assert process.stdout is not None
    url = None
    deadline = time.monotonic() + 60
    while url is None and time.monotonic() < deadline:
        line = process.stdout.readline()
        if not line:
            break
        if "The coverage page: http://" in line:
            url = line.split("The coverage page: ", 1)[1].split()[0]
    try:
        assert url is not None, "demo --serve printed no URL"
        yield process, url
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(timeout=10)
        process.stdout.close()
        if process.stderr is not None:
            process.stderr.close()


@pytest.mark.timeout(90)
def test_demo_serve_shows_builds_in_every_state(demo: tuple[subprocess.Popen[str], str]) -> None:
    process, url = demo
    assert url.startswith("http://127.0.0.1:")
    page = httpx.get(url, timeout=10)
    assert page.status_code == 200
    assert "<title>releasebot" in page.text
    matrix = httpx.get(url + "api/targets", timeout=10).json()
    counts = {state: n for state, n in matrix["counts"].items() if n}
    assert set(counts) == {"published", "building", "failed", "retrying", "missing"}
    assert counts["failed"] == counts["building"] == counts["retrying"] == counts["missing"] == 1
    cells = [cell for row in matrix["rows"] for cell in row["cells"] if cell]
    failed = next(cell for cell in cells if cell["state"] == "failed")
    detail = httpx.get(url + "api/targets/" + failed["tag"], timeout=10).json()
    log = detail["builds"][0]["jobs"][0]["log_tail"]
    assert "do not build against" in log
    for own in (detail["driver_version"], detail["flatcar_version"], detail["kernel"]):
        assert own in log  # the log is the failed target's own, not another's
    published = next(cell for cell in cells if cell["state"] == "published")
    shown = httpx.get(url + "api/targets/" + published["tag"], timeout=10).json()
    assert shown["signed"] is True
    assert shown["key_fingerprint"].startswith("SHA256:")
    assert shown["slack"].startswith("https://slack.com/archives/C0DEMO0000/p")
    assert shown["pull"].endswith("@" + shown["digest"])
    fleet = httpx.get(url + "api/fleet", timeout=10).json()
    assert fleet["gpu_nodes"] == 4
    assert fleet["banner"]["covered"] is False  # the failed target is one a node reboots into
    gates = {node["name"]: node["gate"] for node in fleet["nodes"]}
    assert gates["gpu-l40s-3"]["ready"] is False  # shown as if the gate were on
    assert gates["gpu-a10g-0"] is None  # nothing pending
    process.send_signal(signal.SIGINT)
    assert process.wait(timeout=20) == 0
    assert process.stderr is not None
    assert "Traceback" not in process.stderr.read()


def test_demo_serve_on_a_port_in_use_says_so(tmp_path: Path) -> None:
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = subprocess.run(
            [
                sys.executable,
                "-m",
                "releasebot",
                "demo",
                "--serve",
                "--listen",
                f"127.0.0.1:{port}",
                "--dir",
                str(tmp_path),
            ],
            cwd=REPO,
            capture_output=True,
            text=True,
            check=False,
            timeout=60,
        )
    assert result.returncode == 2
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith(f"releasebot: config: --listen: cannot listen on 127.0.0.1:{port}")
    assert "Traceback" not in result.stderr
