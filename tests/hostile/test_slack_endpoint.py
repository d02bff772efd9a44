"""Hostile requests to the Slack command endpoint, before any signature is checked.

Each case of ``tests/data/hostile/slack_endpoint/`` is one raw HTTP request (headers as the
case writes them, encoded as the case says: ``latin-1`` puts ``²`` on the wire as one byte,
as a hostile client would), sent over a plain socket to the real ``HttpServer``. The case
passes when the answer has the documented status, the Slack handler was reached only when
the request is well formed, no traceback reached the logs, and the server still answers.

Cases with ``endpoint`` go to the real ``SlashCommandEndpoint`` behind the server (as
``releasebot run`` wires it, with an injected clock): its signature check is the first thing
a request meets, so any header it cannot read must be a 401, never a 500. Their headers
may say ``{timestamp}`` (the endpoint's now) and ``{signature}`` (the right signature of
the body with that timestamp); every log line they cause stays one line.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import socket
from collections.abc import Mapping
from typing import Any

import pytest

from releasebot.chat.slack import SlashCommandEndpoint, SlashCommandHandler
from releasebot.domain.targets.commands import Command
from releasebot.web.server import HttpServer
from tests.hostile.conftest import Case, assert_no_traceback, body_of, cases


class Recorder:
    def __init__(self) -> None:
        self.bodies: list[bytes] = []

    def __call__(self, body: bytes, headers: Mapping[str, str]) -> tuple[int, str, bytes]:
        self.bodies.append(body)
        return 200, "application/json", b'{"text": "ok"}'


SECRET = "hostile-endpoint-secret"
NOW = 1_790_000_000


class Runner:
    """The command runner behind the real endpoint: records what reached it."""

    def __init__(self) -> None:
        self.commands: list[Command] = []

    def run(self, command: Command, user: str) -> dict[str, Any]:
        self.commands.append(command)
        return {"text": "ok"}


def signature(timestamp: str, body: bytes) -> str:
    base = f"v0:{timestamp}:".encode() + body
    return "v0=" + hmac.new(SECRET.encode(), base, hashlib.sha256).hexdigest()


def exchange(port: int, request: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as conn:
        conn.sendall(request)
        conn.shutdown(socket.SHUT_WR)
        answer = b""
        while chunk := conn.recv(65536):
            answer += chunk
    return answer


def status_of(answer: bytes) -> int:
    return int(answer.split(b"\r\n", 1)[0].split(b" ")[1])


@pytest.fixture
def server() -> Any:
    recorder = Recorder()
    running = HttpServer(
        "127.0.0.1",
        0,
        alive=lambda: True,
        ready=lambda: (True, "ready"),
        metrics=lambda: b"",
        slack=recorder,
        max_body=4096,
    ).start()
    yield running, recorder
    running.close()


@pytest.fixture
def endpoint_server() -> Any:
    runner = Runner()
    handler = SlashCommandHandler(runner, response_url_prefix="http://127.0.0.1:9/")
    endpoint = SlashCommandEndpoint(handler, signing_secret=SECRET)

    def call(body: bytes, headers: Mapping[str, str]) -> tuple[int, str, bytes]:
        answer = endpoint.handle(body, headers, NOW)
        return answer.status, answer.content_type, answer.body

    running = HttpServer("127.0.0.1", 0, alive=lambda: True, slack=call).start()
    yield running, runner
    running.close()
    handler.close()


@pytest.mark.usefixtures("logs_reach_caplog")
@pytest.mark.parametrize("case", cases("slack_endpoint"))
def test_a_hostile_request_is_answered_and_the_server_lives_on(
    case: Case, request: pytest.FixtureRequest, caplog: pytest.LogCaptureFixture
) -> None:
    running, recorder = request.getfixturevalue(
        "endpoint_server" if case.get("endpoint") else "server"
    )
    body = body_of(case.get("body", ""))
    stamp = str(NOW + int(case.get("skew", 0)))
    fills = {"{timestamp}": stamp, "{signature}": signature(stamp, body)}
    head = ""
    for name, value in case["headers"]:
        for placeholder, filled in fills.items():
            value = value.replace(placeholder, filled)
        head += f"{name}: {value}\r\n"
    text = f"POST {case.get('path', '/slack/commands')} HTTP/1.1\r\nHost: 127.0.0.1\r\n{head}\r\n"
    sent = text.encode(case.get("encoding", "latin-1")) + body
    with caplog.at_level(logging.DEBUG):
        answer = exchange(running.port, sent)
    assert status_of(answer) == case["status"], answer[:300]
    reached = recorder.commands if case.get("endpoint") else recorder.bodies
    assert len(reached) == (1 if case.get("reaches_handler") else 0)
    assert_no_traceback(caplog.text, answer.decode("latin-1"))
    for record in caplog.records:
        assert "\n" not in record.getMessage(), record.getMessage()
    alive = exchange(running.port, b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
    assert status_of(alive) == 200
