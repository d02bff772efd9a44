"""The ``[run]`` settings of ``releasebot run``: defaults, overrides, and one-line errors
naming the key; and how the replica's identity is chosen.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest

from releasebot.config import load_settings
from releasebot.config.pod import kubeconfig_path, lease_namespace, replica_identity
from releasebot.domain.shared.errors import ConfigError
from releasebot.wiring import run_identity


def test_defaults() -> None:
    run = load_settings(None, environ={}).run
    assert (run.interval, run.jitter, run.lease) == (
        timedelta(minutes=5),
        timedelta(seconds=30),
        timedelta(seconds=30),
    )
    assert (run.listen, run.lease_name) == ("0.0.0.0:8080", "releasebot-leader")
    assert (run.leader_election, run.log_format, run.identity) == ("kubernetes", "auto", "")


def test_file_and_environment(tmp_path: Path) -> None:
    path = tmp_path / "releasebot.toml"
    path.write_text(
        '[run]\ninterval_seconds = 60\nlisten = "[::]:9000"\nleader_election = "none"\n'
    )
    run = load_settings(path, environ={"RELEASEBOT_RUN_JITTER_SECONDS": "5"}).run
    assert (run.interval, run.jitter, run.listen) == (
        timedelta(minutes=1),
        timedelta(seconds=5),
        "[::]:9000",
    )
    assert run.leader_election == "none"


@pytest.mark.parametrize(
    ("variable", "value", "message"),
    [
        ("RELEASEBOT_RUN_LISTEN", "8080", "must be HOST:PORT"),
        ("RELEASEBOT_RUN_LISTEN", "0.0.0.0:99999", "must be HOST:PORT"),
        ("RELEASEBOT_RUN_INTERVAL_SECONDS", "0", "between 1 and 86400"),
        ("RELEASEBOT_RUN_JITTER_SECONDS", "200", "run.jitter_seconds: must be at most half"),
        ("RELEASEBOT_RUN_LEASE_SECONDS", "1", "between 2 and 600"),
        ("RELEASEBOT_RUN_LEASE_NAME", "Leader!", "is not a Kubernetes name"),
        ("RELEASEBOT_RUN_LEADER_ELECTION", "zookeeper", "must be one of kubernetes, none"),
        ("RELEASEBOT_RUN_LOG_FORMAT", "yaml", "must be one of auto, json, text"),
        ("RELEASEBOT_RUN_IDENTITY", "a\tb", "printable ASCII"),
    ],
)
def test_bad_values_name_the_key(variable: str, value: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message) as caught:
        load_settings(None, environ={variable: value})
    assert caught.value.key in (variable, "run.jitter_seconds")


def test_identity_comes_from_the_setting_then_the_pod_name(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("POD_NAME", "releasebot-7d9f-abcde")
    assert run_identity(load_settings(None, environ={})) == "releasebot-7d9f-abcde"
    settings = load_settings(None, environ={"RELEASEBOT_RUN_IDENTITY": "replica-1"})
    assert run_identity(settings) == "replica-1"
    monkeypatch.delenv("POD_NAME")
    assert run_identity(load_settings(None, environ={}))  # the host name


def test_the_setting_wins_over_the_environment_for_the_kubeconfig_and_the_name(
    tmp_path: Path,
) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text("apiVersion: v1\n", encoding="utf-8")
    environ = {"KUBECONFIG": "/env/kubeconfig", "POD_NAME": "pod-a", "POD_NAMESPACE": "ops"}
    plain = load_settings(None, environ={})
    set_ = load_settings(
        None,
        environ={
            "RELEASEBOT_KUBERNETES_KUBECONFIG": str(kubeconfig),
            "RELEASEBOT_RUN_IDENTITY": "replica-1",
            "RELEASEBOT_KUBERNETES_NAMESPACE": "builds",
        },
    )
    assert kubeconfig_path(set_, environ) == str(kubeconfig)
    assert kubeconfig_path(plain, environ) == "/env/kubeconfig"
    assert kubeconfig_path(plain, {}) is None  # the in-cluster service account
    assert replica_identity(set_, environ) == "replica-1"
    assert replica_identity(plain, environ) == "pod-a"
    assert replica_identity(plain, {}, hostname=lambda: "host-1") == "host-1"
    # The Lease's namespace has no setting: the Pod's own, else the build namespace.
    assert lease_namespace(set_, environ) == "ops"
    assert lease_namespace(set_, {}) == "builds"
