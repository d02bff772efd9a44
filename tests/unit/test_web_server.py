"""``HttpServer`` over real HTTP on loopback: probes, metrics, the Slack command route
(raw body and headers handed over untouched), limits, failures, and a clean close.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator, Mapping

import httpx
import pytest

from releasebot.web.server import METRICS_CONTENT_TYPE, HttpServer


class State:
    alive = True
    ready = (True, "ready (leader)")
    calls: list[tuple[bytes, dict[str, str]]]

    def __init__(self) -> None:
        self.calls = []

    def slack(self, body: bytes, headers: Mapping[str, str]) -> tuple[int, str, bytes]:
        self.calls.append((body, dict(headers)))
        if body == b"boom":
            raise RuntimeError("handler bug")
        return 200, "application/json", b'{"text": "ok"}'


@pytest.fixture
def state() -> State:
    return State()


def start(state: State, *, slack: bool = True) -> HttpServer:
    return HttpServer(
        "127.0.0.1",
        0,
        alive=lambda: state.alive,
        ready=lambda: state.ready,
        metrics=lambda: b"# HELP x y\n# TYPE x gauge\nx 1.0\n",
        slack=state.slack if slack else None,
        max_body=1024,
    ).start()


@pytest.fixture
def client(state: State) -> Iterator[httpx.Client]:
    server = start(state)
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{server.port}", timeout=5) as client:
            yield client
    finally:
        server.close()


def test_probes_follow_the_callables(client: httpx.Client, state: State) -> None:
    assert (client.get("/healthz").status_code, client.get("/healthz").text) == (200, "ok\n")
    assert client.get("/readyz").text == "ready (leader)\n"
    state.alive, state.ready = False, (False, "store unreachable: down")
    assert client.get("/healthz").status_code == 503
    answer = client.get("/readyz")
    assert (answer.status_code, answer.text) == (503, "store unreachable: down\n")


def test_metrics_in_the_prometheus_text_format(client: httpx.Client) -> None:
    answer = client.get("/metrics")
    assert answer.status_code == 200
    assert answer.headers["content-type"] == METRICS_CONTENT_TYPE
    assert answer.text.endswith("x 1.0\n")


def test_slack_commands_get_the_raw_body_and_headers(client: httpx.Client, state: State) -> None:
    body = b"token=x&command=%2Freleasebot&text=status+%C3%A9"
    answer = client.post(
        "/slack/commands",
        content=body,
        headers={
            "X-Slack-Signature": "v0=abc",
            "Content-Type": "application/x-www-form-urlencoded",
        },
    )
    assert (answer.status_code, answer.json()) == (200, {"text": "ok"})
    [(raw, headers)] = state.calls
    assert raw == body
    assert headers["x-slack-signature"] == "v0=abc"


def test_limits_and_failures(client: httpx.Client, state: State) -> None:
    assert client.post("/slack/commands", content=b"x" * 2048).status_code == 413
    assert client.post("/slack/commands", content=b"boom").status_code == 500
    assert client.get("/nope").status_code == 404
    assert client.post("/other", content=b"").status_code == 404
    assert len(state.calls) == 1  # the oversized body never reached the handler


def test_no_slack_handler_is_404(state: State) -> None:
    server = start(state, slack=False)
    try:
        answer = httpx.post(f"http://127.0.0.1:{server.port}/slack/commands", content=b"a=b")
        assert answer.status_code == 404
    finally:
        server.close()


def test_close_frees_the_port(state: State) -> None:
    server = start(state)
    port = server.port
    server.close()
    server.close()
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        probe.bind(("127.0.0.1", port))  # would fail while still listening


class _Pages:
    """Answers every path it owns with its own path; ``/api/boom`` raises."""

    def owns(self, path: str) -> bool:
        return path == "/" or path.startswith("/api/")

    def costly(self, path: str) -> bool:
        return path.startswith("/api/")

    def quick(self, target: str, headers: Mapping[str, str]) -> object:
        return None  # nothing kept: every answer is built

    def __call__(self, target: str, headers: Mapping[str, str], turns: object = None) -> object:
        from releasebot.web.overview import WebAnswer

        if target == "/api/boom":
            raise RuntimeError("page bug")
        body = f"{target} {headers.get('if-none-match')}".encode()
        return WebAnswer(200, "text/plain", body, {"ETag": '"e"'})


def test_pages_get_their_paths_and_the_probes_can_be_left_out() -> None:
    server = HttpServer("127.0.0.1", 0, pages=_Pages()).start()  # type: ignore[arg-type]
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{server.port}", timeout=5) as client:
            answer = client.get("/api/x?y=1", headers={"If-None-Match": '"a"'})
            assert answer.text == '/api/x?y=1 "a"'
            assert answer.headers["ETag"] == '"e"'
            assert answer.headers["Cache-Control"] == "no-cache"
            head = client.head("/")
            assert (head.status_code, head.content) == (200, b"")
            assert client.get("/api/boom").status_code == 500
            assert "page bug" not in client.get("/api/boom").text
            for probe in ("/healthz", "/readyz", "/metrics", "/other"):
                assert client.get(probe).status_code == 404, probe
    finally:
        server.close()
