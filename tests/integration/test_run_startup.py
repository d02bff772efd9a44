"""``releasebot run`` checks every setting before it does anything: a setting only the
wiring can judge (a listen address taken or malformed, a signing key that does not load)
ends the process with exit code 2 and ONE line naming the key, before any warning (the
"UNSIGNED" one came first) and before any side effect (the database was created and
migrated, the Lease taken, the ports bound).

A real process with a settings file; nothing it would talk to needs to answer, since it
must not get that far.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.kubeapi import FakeKubeApi
from tests.support.runprocess import ReleasebotProcess, free_port, write_config


@pytest.fixture
def taken_port() -> Iterator[int]:
    with socket.create_server(("127.0.0.1", 0)) as listener:
        yield listener.getsockname()[1]


def config(tmp_path: Path, kube_api: FakeKubeApi, port: int, extra: str = "") -> Path:
    path = write_config(
        tmp_path / "releasebot.toml",
        database_url=f"sqlite:///{tmp_path / 'state.db'}",
        flatcar_url="http://127.0.0.1:9/releases-{channel}.json",
        nvidia_url="http://127.0.0.1:9/nvidia.json",
        repository="127.0.0.1:9/gpu/driver",
        kubeconfig=kube_api.write_kubeconfig(tmp_path / "kubeconfig"),
        namespace=kube_api.namespace,
        port=port,
    )
    with path.open("a", encoding="utf-8") as settings:
        settings.write(extra)
    return path


def run_rejected(tmp_path: Path, path: Path, env: dict[str, str]) -> str:
    env = {"RELEASEBOT_RUN_IDENTITY": "replica-a", **env}
    with ReleasebotProcess(["run", "--config", str(path)], tmp_path / "run.log", env=env) as bot:
        assert bot.wait(timeout=30) == 2, bot.output()
        return bot.output()


@pytest.mark.parametrize("where", ["run", "web"])
def test_a_listen_address_taken_is_the_only_line(
    where: str, tmp_path: Path, kube_api: FakeKubeApi, taken_port: int
) -> None:
    own = free_port()
    port, env = (taken_port, {}) if where == "run" else (own, {})
    if where == "web":
        env = {"RELEASEBOT_WEB_LISTEN": f"127.0.0.1:{taken_port}"}
    output = run_rejected(tmp_path, config(tmp_path, kube_api, port), env)
    assert output.count("\n") == 1, output
    assert f"{where}.listen" in output
    assert f"cannot listen on 127.0.0.1:{taken_port}" in output
    assert not (tmp_path / "state.db").exists()  # nothing done before the check
    assert kube_api.leases() == {}


def test_a_malformed_page_address_is_the_only_line(tmp_path: Path, kube_api: FakeKubeApi) -> None:
    path = config(tmp_path, kube_api, free_port())
    output = run_rejected(tmp_path, path, {"RELEASEBOT_WEB_LISTEN": "localhost"})
    assert output.count("\n") == 1, output
    assert "RELEASEBOT_WEB_LISTEN" in output
    assert not (tmp_path / "state.db").exists()


def test_a_signing_key_that_does_not_load_is_the_only_line(
    tmp_path: Path, kube_api: FakeKubeApi
) -> None:
    key = tmp_path / "cosign.key"
    key.write_text("not a key\n", encoding="utf-8")
    path = config(tmp_path, kube_api, free_port(), f'[signing]\nkey_file = "{key}"\n')
    output = run_rejected(tmp_path, path, {})
    assert output.count("\n") == 1, output
    assert "signing.key_file" in output
    assert not (tmp_path / "state.db").exists()
    assert kube_api.leases() == {}


def test_a_kubeconfig_that_does_not_load_is_the_only_line(
    tmp_path: Path, kube_api: FakeKubeApi
) -> None:
    path = config(tmp_path, kube_api, free_port())
    broken = tmp_path / "broken-kubeconfig"
    broken.write_text("clusters: [oops\n", encoding="utf-8")
    output = run_rejected(tmp_path, path, {"RELEASEBOT_KUBERNETES_KUBECONFIG": str(broken)})
    assert output.count("\n") == 1, output
    assert "kubeconfig" in output
    assert not (tmp_path / "state.db").exists()
