"""``releasebot reconcile --once`` and ``releasebot build`` through the CLI, wired from a config
file to the real registry, the fake Kubernetes API (via a kubeconfig) and HTTP feeds.

Covers: the dry run (manifests printed, nothing created, the database untouched), a real
cycle and its idempotent repeat, a hand-asked build (adopting nothing twice, refusing a
busy or published target without --force), bad arguments as one line with exit 2, and a
cycle with the fleet and the reboot gate wired from the settings and the environment.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import sqlite3
import subprocess
import sys
import threading
from datetime import UTC, datetime
from pathlib import Path

import pytest

from releasebot.cli import main
from releasebot.domain.targets.events import EventKind, read_event
from releasebot.store.engine import make_engine
from releasebot.store.sql import SqlStateStore
from tests.support.builds import KanikoPlayer
from tests.support.feedserver import FeedServer
from tests.support.fleetnodes import gpu_node
from tests.support.kubeapi import FakeKubeApi
from tests.support.registryserver import RunningRegistry
from tests.support.slackapi import BOT_TOKEN, CHANNEL, SlackApi

CONTEXT = "git://git.example.test/gpu/recipes.git#refs/heads/main#" + "0123456789" * 4


@pytest.fixture
def config(
    tmp_path: Path,
    served_feeds: FeedServer,
    plain_registry: RunningRegistry,
    registry_name: str,
    kube_api: FakeKubeApi,
) -> Path:
    kubeconfig = kube_api.write_kubeconfig(tmp_path / "kubeconfig")
    path = tmp_path / "releasebot.toml"
    path.write_text(
        f"""
[database]
url = "sqlite:///{tmp_path / "state.db"}"
[flatcar]
feed_url = "{served_feeds.url("/releases-{channel}.json")}"
channels = ["stable"]
keep = 1
[nvidia]
feed_url = "{served_feeds.url("/nvidia.json")}"
branches = ["580"]
[registry]
repository = "{plain_registry.repository(registry_name)}"
insecure = true
[kubernetes]
namespace = "{kube_api.namespace}"
kubeconfig = "{kubeconfig}"
[kaniko]
context = "{CONTEXT}"
[recipe]
# No Flatcar or NVIDIA servers here: the readiness gate has its own tests.
check_inputs = false
# One image per target here; with bases: test_the_base_is_built_first_then_the_kernel_image.
bases = false
""",
        encoding="utf-8",
    )
    return path


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


TAG = "580.178.04-flatcar4593.2.5"


def test_dry_run_prints_manifests_and_changes_nothing(
    config: Path, tmp_path: Path, kube_api: FakeKubeApi, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run(capsys, "reconcile", "--once", "--dry-run", "-q", "--config", str(config))
    assert code == 0, err
    [manifest] = json.loads(out)
    assert manifest["kind"] == "Job"
    assert manifest["metadata"]["annotations"]["releasebot/tag"] == TAG
    assert kube_api.jobs() == []
    assert not (tmp_path / "state.db").exists()


def test_dry_run_on_an_existing_store_writes_nothing(
    config: Path, tmp_path: Path, kube_api: FakeKubeApi, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run(capsys, "plan", "-q", "--config", str(config))[0] == 0
    database = tmp_path / "state.db"
    with sqlite3.connect(database) as db:
        before = db.execute("select name, last_polled_at from feeds order by name").fetchall()
    code, out, _ = run(capsys, "reconcile", "--once", "--dry-run", "-q", "--config", str(config))
    assert code == 0
    assert len(json.loads(out)) == 1
    with sqlite3.connect(database) as db:
        after = db.execute("select name, last_polled_at from feeds order by name").fetchall()
        builds = db.execute("select count(*) from builds").fetchone()[0]
    assert after == before
    assert builds == 0
    assert kube_api.jobs() == []


def test_a_cycle_launches_and_the_next_one_publishes(
    config: Path,
    kube_api: FakeKubeApi,
    plain_registry: RunningRegistry,
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, err = run(capsys, "reconcile", "--once", "-q", "--config", str(config))
    assert code == 0, err
    assert out.startswith(f"launched {TAG} [rb-")
    player = KanikoPlayer(kube_api, plain_registry)
    [job] = player.job_names()
    digest = player.build(job)
    code, out, _ = run(capsys, "reconcile", "--once", "-q", "--config", str(config))
    assert code == 0
    assert f"published {TAG}: {digest}" in out
    code, out, _ = run(capsys, "reconcile", "--once", "-q", "--config", str(config))
    assert (code, out) == (0, "")
    _, out, _ = run(capsys, "plan", "-q", "--config", str(config), "--format", "json")
    [target] = json.loads(out)
    assert (target["state"], target["digest"]) == ("published", digest)


def test_the_base_is_built_first_then_the_kernel_image(
    config: Path,
    kube_api: FakeKubeApi,
    plain_registry: RunningRegistry,
    registry_name: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # The settings' default: driver bases on (the shipped recipe builds FROM its base).
    config.write_text(config.read_text().replace("bases = false\n", ""), encoding="utf-8")
    code, out, err = run(capsys, "reconcile", "--once", "--dry-run", "-q", "--config", str(config))
    assert code == 0, err
    [manifest] = json.loads(out)  # the base's Job only: no kernel Job before its base
    args = manifest["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--dockerfile=Dockerfile.base" in args
    base = manifest["metadata"]["annotations"]["releasebot/tag"]
    assert base.startswith("580.178.04-base-amd64-r")

    code, out, err = run(capsys, "reconcile", "--once", "-q", "--config", str(config))
    assert code == 0, err
    assert out.startswith(f"launched {base} [rb-")
    player = KanikoPlayer(kube_api, plain_registry)
    [base_job] = player.job_names()
    base_digest = player.build(base_job)
    code, out, err = run(capsys, "reconcile", "--once", "-q", "--config", str(config))
    assert code == 0, err
    assert f"launched {TAG} [rb-" in out
    [kernel_job] = [job for job in player.job_names() if job != base_job]
    driver_base = player.build_arg(kernel_job, "DRIVER_BASE")
    assert driver_base == f"{plain_registry.repository(registry_name)}@{base_digest}"
    digest = player.build(kernel_job)
    code, out, _ = run(capsys, "reconcile", "--once", "-q", "--config", str(config))
    assert f"published {TAG}: {digest}" in out
    _, out, _ = run(capsys, "plan", "-q", "--config", str(config), "--format", "json")
    [target] = json.loads(out)
    assert (target["state"], target["digest"]) == ("published", digest)


def test_a_base_job_the_api_server_refuses_is_said_and_exits_1(
    config: Path, kube_api: FakeKubeApi, capsys: pytest.CaptureFixture[str]
) -> None:
    config.write_text(config.read_text().replace("bases = false\n", ""), encoding="utf-8")
    kube_api.fail_requests(
        None,
        status=403,
        reason="Forbidden",
        message='jobs.batch is forbidden: User "x" cannot create resource "jobs"',
        method="POST",
        plural="jobs",
    )
    code, out, err = run(capsys, "reconcile", "--once", "-q", "--config", str(config))
    assert code == 1
    assert out.startswith("rejected 580.178.04-base-amd64-r")
    assert "refused 1 Job(s)" in err
    assert "Traceback" not in err


def test_with_slack_off_no_notification_is_queued_and_old_ones_are_dropped(
    config: Path,
    tmp_path: Path,
    kube_api: FakeKubeApi,
    plain_registry: RunningRegistry,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # No [slack] section: nobody delivers, so nothing may pile up (or fire the backlog
    # alert). A backlog an older releasebot queued with Slack off is dropped by the run.
    assert run(capsys, "plan", "-q", "--config", str(config))[0] == 0
    engine = make_engine(f"sqlite:///{tmp_path / 'state.db'}")
    try:
        old = SqlStateStore(engine)  # keeps events, as every store did before
        queued = read_event(EventKind.FEED_FAILING, "feed:nvidia", "nvidia", datetime.now(UTC), {})
        old.set_flag("feed-failing:nvidia", "x", datetime.now(UTC), events=[queued])
        assert old.outbox_backlog() == 1
        code, out, err = run(capsys, "reconcile", "--once", "-q", "--config", str(config))
        assert code == 0, err
        assert out.startswith(f"launched {TAG} [rb-")
        player = KanikoPlayer(kube_api, plain_registry)
        [job] = player.job_names()
        digest = player.build(job)
        code, out, _ = run(capsys, "reconcile", "--once", "-q", "--config", str(config))
        assert f"published {TAG}: {digest}" in out
        assert old.outbox_backlog() == 0
        assert old.outbox_events(f"{TAG}#1") == []  # started and published: never queued
        [dropped] = old.outbox_events("feed:nvidia")
        assert dropped.delivered_at is not None
    finally:
        engine.dispose()


def test_build_by_hand(
    config: Path,
    kube_api: FakeKubeApi,
    plain_registry: RunningRegistry,
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, err = run(capsys, "build", "580.95.05", "4593.2.4", "-q", "--config", str(config))
    assert code == 0, err
    assert out.startswith("launched 580.95.05-flatcar4593.2.4 [rb-")
    code, _, err = run(capsys, "build", "580.95.05", "4593.2.4", "-q", "--config", str(config))
    assert code == 1
    assert "is already building" in err
    player = KanikoPlayer(kube_api, plain_registry)
    player.build_all()
    run(capsys, "reconcile", "--once", "-q", "--config", str(config))
    code, _, err = run(capsys, "build", "580.95.05", "4593.2.4", "-q", "--config", str(config))
    assert code == 1
    assert "already published; add --force" in err
    code, out, err = run(
        capsys, "build", "580.95.05", "4593.2.4", "--force", "-q", "--config", str(config)
    )
    assert code == 0, err
    assert "launched" in out
    assert len(player.job_names()) == 3  # the forced rebuild is attempt 2, its own Job


@pytest.mark.parametrize(
    ("driver", "flatcar", "message"),
    [
        ("580.1; rm -rf /", "4593.2.5", "is not an NVIDIA driver version"),
        ("580.178.04", "4593.2.5$(reboot)", "is not a Flatcar version"),
        ("580.178.04", "4593.2.99", "Flatcar 4593.2.99 is in no Flatcar feed releasebot reads"),
        ("580.999.01", "4593.2.5", "driver 580.999.01 is not in the NVIDIA feed"),
    ],
)
def test_build_rejects_bad_arguments_in_one_line(
    config: Path,
    kube_api: FakeKubeApi,
    driver: str,
    flatcar: str,
    message: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, err = run(capsys, "build", driver, flatcar, "-q", "--config", str(config))
    assert code == 2
    assert out == ""
    assert message in err
    assert err.count("\n") == 1
    assert kube_api.jobs() == []


def test_reconcile_without_once_is_a_usage_error(
    config: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = run(capsys, "reconcile", "--config", str(config))
    assert code == 2
    assert "--once" in err


class _BlackHole:
    """A TCP port that accepts connections and never answers: a Slack that hangs."""

    def __init__(self) -> None:
        self.socket = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.socket.getsockname()[1]}/api/"
        self.accepted = threading.Event()
        self._clients: list[socket.socket] = []
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    def _accept(self) -> None:
        with contextlib.suppress(OSError):
            while True:
                client, _ = self.socket.accept()
                self._clients.append(client)
                self.accepted.set()

    def close(self) -> None:
        self.socket.close()
        for client in self._clients:
            client.close()


@pytest.mark.timeout(60)
def test_a_process_killed_between_commit_and_delivery_loses_no_message(
    config: Path,
    tmp_path: Path,
    kube_api: FakeKubeApi,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    hole = _BlackHole()
    hung = tmp_path / "hung.toml"
    hung.write_text(
        config.read_text() + f'[slack]\nchannel = "{CHANNEL}"\nbase_url = "{hole.url}"\n'
        "timeout_seconds = 30.0\n",
        encoding="utf-8",
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("RELEASEBOT_")}
    env["RELEASEBOT_SLACK_BOT_TOKEN"] = BOT_TOKEN
    process = subprocess.Popen(  # the cycle commits, then delivery hangs on Slack...
        [sys.executable, "-m", "releasebot", "reconcile", "--once", "-q", "--config", str(hung)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        assert hole.accepted.wait(30), "the cycle never reached delivery"
        process.kill()  # ...and the process dies there: SIGKILL, nothing runs after it
        process.wait(10)
    finally:
        if process.poll() is None:
            process.kill()
        hole.close()
    [job] = [j["metadata"]["name"] for j in kube_api.jobs()]
    with SlackApi() as slack:
        healthy = tmp_path / "healthy.toml"
        healthy.write_text(hung.read_text().replace(hole.url, slack.base_url), encoding="utf-8")
        monkeypatch.setenv("RELEASEBOT_SLACK_BOT_TOKEN", BOT_TOKEN)
        for _ in range(2):  # the restart delivers; a further run sends nothing again
            code, _, err = run(capsys, "reconcile", "--once", "-q", "--config", str(healthy))
            assert code == 0, err
        messages = [m for m in slack.messages() if m.thread_ts is None]
    assert len(messages) == 1
    assert TAG in messages[0].text
    assert [j["metadata"]["name"] for j in kube_api.jobs()] == [job]  # no second Job either


def test_a_cycle_with_the_fleet_and_the_gate_wired_from_the_settings(
    config: Path,
    plain_registry: RunningRegistry,
    registry_name: str,
    kube_api: FakeKubeApi,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    waiting = gpu_node("gpu-0", "4459.2.4", pending="4593.2.5", before_reboot=True)
    kube_api.fleet.add_nodes(waiting, gpu_node("gpu-1", "4459.2.4"))
    plain_registry.push_image(registry_name, TAG, arch="amd64")  # the pending version's
    with config.open("a", encoding="utf-8") as settings:
        settings.write("[fleet]\nenabled = true\n")
    monkeypatch.setenv("RELEASEBOT_FLEET_GATE", "true")  # as the reboot-gate component sets it
    code, out, err = run(capsys, "reconcile", "--once", "--quiet", "--config", str(config))
    assert code == 0, err
    assert "launched 580.178.04-flatcar4459.2.4" in out  # what the nodes run, outside keep
    annotations = kube_api.fleet.node("gpu-0")["metadata"]["annotations"]
    assert annotations["releasebot.io/driver-image-ready"] == "true"
    assert annotations["releasebot.io/driver-image-ready-version"] == "4593.2.5"
    assert (
        "releasebot.io/driver-image-ready"
        not in kube_api.fleet.node("gpu-1")["metadata"]["annotations"]
    )
