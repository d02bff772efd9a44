"""``releasebot run`` as a real process with Slack configured: the signed slash-command
endpoint on its web server, and build notifications delivered by the leader.

Real: the process, SQLite, feeds over HTTP, the OCI registry; fakes over real HTTP: the
Kubernetes API (via a kubeconfig) and the Slack Web API (``tests/support/slackapi.py``). Socket
Mode has its own tests (``test_socket_mode.py``).
"""

from __future__ import annotations

import hashlib
import hmac
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlencode

import httpx
import pytest

from tests.support.feedserver import FeedServer
from tests.support.kubeapi import FakeKubeApi
from tests.support.registryserver import RunningRegistry
from tests.support.runprocess import ReleasebotProcess, free_port, wait_for, write_config
from tests.support.slackapi import BOT_TOKEN, CHANNEL, SlackApi

SECRET = "8f742231b10e8888abcd99yyyzzz85a5"
TAG = "580.178.04-flatcar4593.2.5"


@pytest.fixture
def slack() -> Iterator[SlackApi]:
    with SlackApi() as api:
        yield api


def signed(body: bytes, secret: str = SECRET) -> dict[str, str]:
    stamp = str(int(time.time()))
    digest = hmac.new(secret.encode(), b"v0:" + stamp.encode() + b":" + body, hashlib.sha256)
    return {
        "X-Slack-Request-Timestamp": stamp,
        "X-Slack-Signature": f"v0={digest.hexdigest()}",
        "Content-Type": "application/x-www-form-urlencoded",
    }


@pytest.mark.timeout(90)
def test_run_answers_signed_commands_and_tells_the_channel(
    tmp_path: Path,
    served_feeds: FeedServer,
    slack: SlackApi,
    plain_registry: RunningRegistry,
    registry_name: str,
    kube_api: FakeKubeApi,
) -> None:
    port = free_port()
    config = write_config(
        tmp_path / "releasebot.toml",
        database_url=f"sqlite:///{tmp_path / 'state.db'}",
        flatcar_url=served_feeds.url("/releases-{channel}.json"),
        nvidia_url=served_feeds.url("/nvidia.json"),
        repository=plain_registry.repository(registry_name),
        kubeconfig=kube_api.write_kubeconfig(tmp_path / "kubeconfig"),
        namespace=kube_api.namespace,
        port=port,
    )
    with config.open("a", encoding="utf-8") as extra:
        extra.write(f'[slack]\nchannel = "{CHANNEL}"\nbase_url = "{slack.base_url}"\n')
    env = {
        "RELEASEBOT_RUN_IDENTITY": "replica-a",
        "RELEASEBOT_SLACK_BOT_TOKEN": BOT_TOKEN,
        "RELEASEBOT_SLACK_SIGNING_SECRET": SECRET,
    }
    args = ["run", "--config", str(config)]
    with ReleasebotProcess(args, tmp_path / "run.log", port=port, env=env) as bot:
        bot.wait_serving()
        body = urlencode(
            {
                "command": "/releasebot",
                "text": "help",
                "user_id": "U1",
                "channel_id": "C1",
                "response_url": "https://hooks.slack.com/commands/x",
            }
        ).encode()
        url = f"http://127.0.0.1:{port}/slack/commands"
        answer = httpx.post(url, content=body, headers=signed(body), timeout=5)
        assert answer.status_code == 200
        assert "releasebot" in answer.text
        tampered = httpx.post(url, content=body + b"x", headers=signed(body), timeout=5)
        assert tampered.status_code == 401
        forged = httpx.post(url, content=body, headers=signed(body, "wrong"), timeout=5)
        assert forged.status_code == 401

        def posted() -> list[str]:
            return [m.text for m in slack.messages() if m.thread_ts is None and TAG in m.text]

        [message] = wait_for(posted, timeout=30, what="the build message in Slack")
        assert "building" in message.lower()
        assert bot.terminate() == 0
    log = (tmp_path / "run.log").read_text()
    assert BOT_TOKEN not in log
    assert SECRET not in log
