"""Hostile requests to the Slack command endpoint, before any signature is checked.

Each case of ``tests/data/hostile/slack_endpoint/`` is one raw HTTP request (headers as the
case writes them, encoded as the case says: ``latin-1`` puts ``²`` on the wire as one byte,
as a hostile client would), sent over a plain socket to the real ``HttpServer``. The case
passes when the answer has the documented status, the Slack handler was reached only when
the request is well formed, no traceback reached the logs, and the server still answers.
"""

from __future__ import annotations

import logging
import socket
from collections.abc import Mapping
from typing import Any

import pytest

from releasebot.web.server import HttpServer
from tests.hostile.conftest import Case, assert_no_traceback, cases


class Recorder:
    def __init__(self) -> None:
        self.bodies: list[bytes] = []

    def __call__(self, body: bytes, headers: Mapping[str, str]) -> tuple[int, str, bytes]:
        self.bodies.append(body)
        return 200, "application/json", b'{"text": "ok"}'


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


@pytest.mark.parametrize("case", cases("slack_endpoint"))
def test_a_hostile_request_is_answered_and_the_server_lives_on(
    case: Case, server: Any, caplog: pytest.LogCaptureFixture
) -> None:
    running, recorder = server
    head = "".join(f"{name}: {value}\r\n" for name, value in case["headers"])
    text = f"POST {case.get('path', '/slack/commands')} HTTP/1.1\r\nHost: x\r\n{head}\r\n"
    request = text.encode(case.get("encoding", "latin-1")) + case.get("body", "").encode()
    with caplog.at_level(logging.DEBUG):
        answer = exchange(running.port, request)
    assert status_of(answer) == case["status"], answer[:300]
    assert len(recorder.bodies) == (1 if case.get("reaches_handler") else 0)
    assert_no_traceback(caplog.text, answer.decode("latin-1"))
    alive = exchange(running.port, b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
    assert status_of(alive) == 200
