"""The slash command over Socket Mode, through slack-sdk's built-in client and a local fake
of Slack (``apps.connections.open`` over HTTP, then a websocket; see tests/support/slacksocket.py).

Covers: nothing connects until ``connect()`` (only the leader calls it), a slash command
envelope is acked with exactly the answer the HTTP endpoint gives, slow work follows up on
the response_url, other envelopes are acked and ignored, a refused or unreachable token
endpoint raises the right error without leaking threads, and close/reconnect.
"""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest

from releasebot.chat.socket import (
    SocketModeFrontDoor,
)
from releasebot.domain.shared.errors import (
    ConfigError,
    SocketModeRejectedError,
    SocketModeUnavailableError,
)
from releasebot.service.reconcile import PAUSED_FLAG
from tests.integration.test_slash_http import (
    ADMIN,
    NOW,
    RANDOM_CHANNEL,
    STRANGER,
    ChatRig,
    ResponseUrlServer,
    form,
    make_chat_rig,
    signed,
)
from tests.support.slacksocket import FakeSocketModeSlack

APP_TOKEN = "xapp-1-A0001-1234567890-0123456789abcdef"
TIMEOUT = timedelta(seconds=10)


@pytest.fixture(autouse=True)
def no_leaked_threads() -> Iterator[None]:
    """Set up first, torn down last: every client, server and pool joined its threads."""
    before = set(threading.enumerate())
    yield
    leaked = [t for t in set(threading.enumerate()) - before if t.is_alive()]
    assert leaked == []


@pytest.fixture
def rig(test_data: Path) -> Iterator[ChatRig]:
    with ResponseUrlServer() as replies, httpx.Client(timeout=5) as http:
        chat = make_chat_rig(test_data, http, replies)
        try:
            yield chat
        finally:
            chat.handler.close()


@pytest.fixture
def slack() -> Iterator[FakeSocketModeSlack]:
    with FakeSocketModeSlack(APP_TOKEN) as fake:
        yield fake


@pytest.fixture
def door(rig: ChatRig, slack: FakeSocketModeSlack) -> Iterator[SocketModeFrontDoor]:
    front = SocketModeFrontDoor(
        rig.handler, app_token=APP_TOKEN, base_url=slack.base_url, timeout=TIMEOUT
    )
    try:
        yield front
    finally:
        front.close()


def envelope(envelope_id: str, text: str, user: str, response_url: str) -> dict[str, Any]:
    return {
        "envelope_id": envelope_id,
        "type": "slash_commands",
        "accepts_response_payload": True,
        "payload": {
            "token": "legacy-verification-token",
            "team_id": "T0001",
            "channel_id": RANDOM_CHANNEL,
            "user_id": user,
            "command": "/releasebot",
            "text": text,
            "response_url": response_url,
            "trigger_id": "1.2.3",
        },
    }


def http_answer(rig: ChatRig, text: str, user: str) -> dict[str, Any]:
    body = form(text, user, RANDOM_CHANNEL, rig.replies.url())
    answer = rig.endpoint.handle(body, signed(body), NOW)
    assert answer.status == 200
    result: dict[str, Any] = json.loads(answer.body)
    return result


def test_nothing_connects_until_asked(
    door: SocketModeFrontDoor, slack: FakeSocketModeSlack
) -> None:
    assert door.connected is False
    assert (slack.opened, slack.connections) == (0, 0)
    assert APP_TOKEN not in repr(door)
    door.connect()
    assert slack.wait_connected()
    assert door.connected is True
    door.connect()  # already open: no second connection
    assert slack.opened == 1
    door.close()
    assert door.connected is False
    assert slack.wait_disconnected()


@pytest.mark.parametrize(
    ("text", "user"),
    [
        ("help", STRANGER),
        ("status", STRANGER),
        ("build 580.95.05 4593.2.4", STRANGER),
        ("build 580.1; rm -rf / 4593.2.5", ADMIN),
        ("retry latest", ADMIN),
    ],
)
def test_an_envelope_is_acked_with_the_http_answer(
    rig: ChatRig, door: SocketModeFrontDoor, slack: FakeSocketModeSlack, text: str, user: str
) -> None:
    expected = http_answer(rig, text, user)
    door.connect()
    assert slack.wait_connected()
    slack.push(envelope("e-1", text, user, rig.replies.url()))
    assert slack.wait_ack("e-1") == {"envelope_id": "e-1", "payload": expected}
    assert rig.launcher.created == []


def test_a_change_runs_once_and_slow_work_follows_up(
    rig: ChatRig, door: SocketModeFrontDoor, slack: FakeSocketModeSlack
) -> None:
    door.connect()
    assert slack.wait_connected()
    slack.push(envelope("e-pause", "pause", ADMIN, rig.replies.url()))
    ack = slack.wait_ack("e-pause")
    assert ack["payload"]["response_type"] == "in_channel"
    assert rig.store.flag(PAUSED_FLAG) == ADMIN

    slack.push(envelope("e-build", "build 580.95.05 4593.2.4", ADMIN, rig.replies.url()))
    assert slack.wait_ack("e-build")["payload"]["text"] == (
        "Queued `build 580.95.05 4593.2.4`; I will answer here when it is done"
        " (after the running build cycle, if there is one)."
    )
    [follow_up] = rig.replies.wait()
    [job] = rig.launcher.created
    assert (
        follow_up["text"].split("\n")[0]
        == f"<@{ADMIN}> started `580.95.05-flatcar4593.2.4` (amd64): job `{job}`"
    )
    assert "gets the full retry budget: up to 3 attempts" in follow_up["text"]


def test_other_envelopes_are_acked_and_ignored(
    rig: ChatRig, door: SocketModeFrontDoor, slack: FakeSocketModeSlack
) -> None:
    door.connect()
    assert slack.wait_connected()
    slack.push({"envelope_id": "e-ev", "type": "events_api", "payload": {"event": {}}})
    assert slack.wait_ack("e-ev") == {"envelope_id": "e-ev"}
    assert rig.replies.posts == []


def test_close_then_connect_again(door: SocketModeFrontDoor, slack: FakeSocketModeSlack) -> None:
    door.connect()
    assert slack.wait_connected()
    door.close()
    assert slack.wait_disconnected()
    door.connect()  # leadership regained: a fresh client and a fresh URL
    assert slack.wait_connected()
    assert slack.opened == 2
    assert door.connected is True


def test_a_refused_token_raises_and_leaves_nothing_running(
    rig: ChatRig, slack: FakeSocketModeSlack
) -> None:
    other = "xapp-1-A0001-1234567890-not-the-one"
    door = SocketModeFrontDoor(
        rig.handler, app_token=other, base_url=slack.base_url, timeout=TIMEOUT
    )
    with pytest.raises(SocketModeRejectedError, match="invalid_auth"):
        door.connect()
    assert (slack.refused, slack.opened, door.connected) == (1, 0, False)
    door.close()


def test_an_unreachable_slack_is_temporary(rig: ChatRig) -> None:
    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    door = SocketModeFrontDoor(
        rig.handler,
        app_token=APP_TOKEN,
        base_url=f"http://127.0.0.1:{port}/api/",
        timeout=TIMEOUT,
    )
    before = set(threading.enumerate())
    with pytest.raises(SocketModeUnavailableError, match="cannot open Socket Mode"):
        door.connect()
    assert door.connected is False
    assert [t for t in set(threading.enumerate()) - before if t.is_alive()] == []


def test_a_bot_token_is_not_an_app_token(rig: ChatRig) -> None:
    with pytest.raises(ConfigError, match="app-level token"):
        SocketModeFrontDoor(
            rig.handler, app_token="xoxb-1-2-3", base_url="https://slack.com/api/", timeout=TIMEOUT
        )
