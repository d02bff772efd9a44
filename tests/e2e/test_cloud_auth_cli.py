"""``registry.auth = "ecr"`` through the real CLI: ``releasebot plan`` and ``releasebot run``
as REAL processes, their ECR token from moto's server (``tests/support/cloudtokens.py``,
answering ``GetAuthorizationToken`` as ECR does, through boto3), against the REAL registry
behind a gate that accepts only live tokens moto issued.

``plan`` lists the targets it read from that registry. ``run`` gets 2-second tokens: its
first cycle launches a Job; after the token has expired the test plays Kaniko and the next
cycles, on new tokens, verify and publish the image. No output line shows a token.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest

from tests.support.builds import KanikoPlayer
from tests.support.cloudtokens import EcrEmulator, Gate, TokenBook, ecr_emulator, token_gate
from tests.support.feedserver import FeedServer
from tests.support.kubeapi import FakeKubeApi
from tests.support.registryserver import RunningRegistry
from tests.support.runprocess import REPO, ReleasebotProcess, free_port, wait_for, write_config

TAG = "580.178.04-flatcar4593.2.5"
ECR_SETTINGS = 'auth = "ecr"\naws_region = "us-east-1"\n'


@pytest.fixture
def emulator() -> Iterator[EcrEmulator]:
    with ecr_emulator() as running:
        yield running


@pytest.fixture
def gate(plain_registry: RunningRegistry, emulator: EcrEmulator) -> Iterator[Gate]:
    book = TokenBook()
    emulator.book = book
    with token_gate(plain_registry.base_url, book) as running:
        yield running


@pytest.fixture
def config(
    tmp_path: Path, served_feeds: FeedServer, gate: Gate, registry_name: str, kube_api: FakeKubeApi
) -> Path:
    path = write_config(
        tmp_path / "releasebot.toml",
        database_url=f"sqlite:///{tmp_path / 'state.db'}",
        flatcar_url=served_feeds.url("/releases-stable.json"),
        nvidia_url=served_feeds.url("/nvidia.json"),
        repository=gate.repository(registry_name),
        kubeconfig=kube_api.write_kubeconfig(tmp_path / "kubeconfig"),
        namespace=kube_api.namespace,
        port=free_port(),
    )
    text = path.read_text().replace("insecure = true\n", "insecure = true\n" + ECR_SETTINGS, 1)
    path.write_text(text)
    return path


def assert_no_token(text: str, book: TokenBook) -> None:
    for password in book.passwords():
        assert password not in text


@pytest.mark.timeout(120)
def test_plan_reads_the_registry_with_an_ecr_token(
    config: Path,
    emulator: EcrEmulator,
    gate: Gate,
    plain_registry: RunningRegistry,
    registry_name: str,
) -> None:
    plain_registry.push_image(registry_name, TAG)
    done = subprocess.run(
        [sys.executable, "-m", "releasebot", "plan", "--config", str(config), "--format", "json"],
        cwd=REPO,
        env={"PATH": "/usr/bin:/bin", **emulator.env()},
        capture_output=True,
        text=True,
        timeout=90,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    targets = json.loads(done.stdout)
    listed = targets["targets"] if isinstance(targets, dict) else targets
    assert any(TAG in json.dumps(target) for target in listed)
    assert "published" in done.stdout  # read from the registry behind the token gate
    assert gate.book.count("AWS") == 1
    assert gate.book.accepted >= 1
    assert_no_token(done.stdout + done.stderr, gate.book)

    # Denied by AWS: one line saying what to grant, exit 1, nothing else.
    emulator.enforce_iam(0)
    try:
        refused = subprocess.run(
            [sys.executable, "-m", "releasebot", "plan", "--config", str(config)],
            cwd=REPO,
            env={"PATH": "/usr/bin:/bin", **emulator.env()},
            capture_output=True,
            text=True,
            timeout=90,
            check=False,
        )
    finally:
        emulator.enforce_iam(sys.maxsize)
        emulator.reset()
    assert refused.returncode == 1
    errors = [line for line in refused.stderr.splitlines() if "ecr:" in line]
    assert errors, refused.stderr
    assert "Traceback" not in refused.stderr
    assert "ecr:GetAuthorizationToken" in errors[0]


@pytest.mark.timeout(150)
def test_run_keeps_working_past_the_tokens_expiry(
    config: Path,
    tmp_path: Path,
    emulator: EcrEmulator,
    gate: Gate,
    kube_api: FakeKubeApi,
    plain_registry: RunningRegistry,
) -> None:
    emulator.lifetime = timedelta(seconds=2)
    args = ["run", "--config", str(config)]
    env = {"RELEASEBOT_RUN_IDENTITY": "replica-a", **emulator.env()}
    port = int(config.read_text().split('listen = "127.0.0.1:')[1].split('"')[0])
    with ReleasebotProcess(args, tmp_path / "run.log", port=port, env=env) as bot:
        bot.wait_serving()
        player = KanikoPlayer(kube_api, plain_registry)
        [job] = wait_for(player.job_names, timeout=60, what="the first cycle's Job")
        first = gate.book.count("AWS")
        assert first >= 1
        time.sleep(2.5)  # every token issued so far has expired: the gate refuses them
        player.build(job)
        wait_for(
            lambda: bot.metric("releasebot_required_tags_unpublished") == 0,
            timeout=60,
            what="the build to be verified and published on a new token",
        )
        assert gate.book.count("AWS") > first
        assert bot.get("/readyz").status_code == 200  # type: ignore[union-attr]
        assert bot.terminate(timeout=20) == 0
        output = bot.output()
    assert_no_token(output, gate.book)
    lines = [json.loads(line) for line in output.splitlines()]
    # No refusal was ever said (a digest's hex may hold "401": look for the status alone).
    refused = re.compile(r"(?<![0-9a-f])401(?![0-9a-f])|unauthori[sz]ed", re.IGNORECASE)
    assert not [line for line in lines if refused.search(line.get("message", ""))]
    assert any(line.get("action") == "published" for line in lines)
