"""The CLI's exit codes keep the README's promise, replayed from ``tests/data/hostile/cli/``.

Each case wires ``releasebot`` (a real process) to the project's feeds over HTTP, a real
SQLite file, and a registry and an API server that misbehave as the case says: a registry
that refuses every request (a small HTTP server answering one status to everything), or
the real registry; the fake Kubernetes API refusing Job creation. Checked: no traceback,
the documented exit code (0 done, 1 the work could not be done, 2 usage or settings), ONE
stderr line naming the problem and what to do, and the stored rows unchanged where the
case says the command must not write.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from tests.support.feedserver import FeedServer
from tests.support.hostile_cli import (
    assert_no_traceback,
    assert_one_line_says,
    cases,
    load_case,
    run_cli,
    snapshot,
    write_settings,
)
from tests.support.kubeapi import FakeKubeApi
from tests.support.registryserver import RunningRegistry

CASES = [pytest.param(path, id=path.stem) for path in cases("cli")]


@contextmanager
def refusing_registry(status: int, body: str, headers: dict[str, str]) -> Iterator[str]:
    """An HTTP server answering ``status`` to every request; yields its host:port."""

    class Refuse(BaseHTTPRequestHandler):
        def _answer(self) -> None:
            payload = body.encode()
            self.send_response(status)
            for name, value in headers.items():
                self.send_header(name, value)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(payload)

        do_GET = do_HEAD = do_PUT = do_POST = _answer

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Refuse)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.timeout(180)
@pytest.mark.parametrize("path", CASES)
def test_cli_case(
    path: Path,
    tmp_path: Path,
    served_feeds: FeedServer,
    plain_registry: RunningRegistry,
    registry_name: str,
    kube_api: FakeKubeApi,
) -> None:
    case = load_case(path)
    with ExitStack() as stack:
        refuse = case.get("registry_refuses")
        if refuse is None:
            repository = plain_registry.repository(registry_name)
        else:
            host = stack.enter_context(
                refusing_registry(
                    refuse["status"], refuse.get("body", ""), refuse.get("headers", {})
                )
            )
            repository = f"{host}/nvidia/driver"
        fault = case.get("api_server_refuses")
        if fault is not None:
            kube_api.fail_requests(None, **fault)
        url = f"sqlite:///{tmp_path / 'state.db'}"
        feeds = case.get("feeds", "served")
        config = write_settings(
            tmp_path / "releasebot.toml",
            database_url=url,
            flatcar_url=served_feeds.url(
                "/releases-{channel}.json" if feeds == "served" else "/gone-{channel}.json"
            ),
            nvidia_url=served_feeds.url("/nvidia.json"),
            repository=repository,
            kubeconfig=kube_api.write_kubeconfig(tmp_path / "kubeconfig"),
            namespace=kube_api.namespace,
            extra=case.get("settings", ""),
        )
        before = snapshot(url) if Path(url.removeprefix("sqlite:///")).exists() else {}

        outcome = run_cli([*case["command"], "--config", str(config)], env=case.get("env"))

        assert_no_traceback(outcome.stdout, outcome.stderr)
        assert outcome.code == case["exit"], outcome.describe()
        line = assert_one_line_says(outcome.stderr, case["says"], outcome.describe())
        assert line.startswith("releasebot: "), line
        for phrase in case.get("stdout", []):
            assert phrase in outcome.stdout, outcome.describe()
        if case.get("writes") is False:
            exists = Path(url.removeprefix("sqlite:///")).exists()
            assert (snapshot(url) if exists else {}) == before, "the stored rows changed"
        if fault is not None and case["exit"] == 1:
            assert kube_api.jobs() == [], "a refused Job exists"
