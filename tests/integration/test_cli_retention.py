"""``releasebot retention [--apply]`` end to end: the CLI with a kubeconfig pointing at the
fake Kubernetes API (real HTTP), a real registry and a SQLite store seeded as feed polls
leave it.

Covers: the dry run prints what it would delete and why, what it keeps and why, and
deletes nothing (exit 0, also with retention disabled); ``--apply`` with retention
disabled is one line and exit 2; ``--apply`` deletes the one release nothing needs and
records it (exit 0), with no Slack event when Slack is off; the JSON form; Nodes forbidden
by RBAC, a Node list with an item that is not a Node (the fleet view is unsure), and a
registry refusing deletes, are one line each, exit 1, and delete nothing.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from releasebot.cli import main
from releasebot.domain.targets.events import EventKind
from releasebot.store import migrate
from releasebot.store.engine import make_engine
from releasebot.store.sql import SqlStateStore
from tests.contract.test_store_contract import SEEN, URL, flatcar
from tests.support.fleetnodes import gpu_node
from tests.support.kubeapi import FakeKubeApi
from tests.support.registryserver import RunningRegistry
from tests.support.targets import make_target

GONE = "580.105.08-flatcar4230.2.4"
RUNNING = "580.105.08-flatcar4230.2.5"
TARGET = "580.178.04-flatcar4593.2.5"


def seed_store(path: Path) -> None:
    engine = make_engine(f"sqlite:///{path}")
    migrate.upgrade(engine)
    store = SqlStateStore(engine)
    now = datetime.now(UTC)
    releases = [flatcar("4230.2.4"), flatcar("4230.2.5"), flatcar("4593.2.5")]
    store.record_flatcar_feed("stable", URL, releases, SEEN, now - timedelta(days=200))
    store.record_flatcar_feed("stable", URL, [flatcar("4593.2.5")], SEEN, now - timedelta(days=100))
    store.sync_targets([make_target(driver="580.178.04", flatcar="4593.2.5")], now)
    engine.dispose()


def write_config(
    tmp_path: Path, registry: RunningRegistry, name: str, kube_api: FakeKubeApi, *, enabled: bool
) -> str:
    kubeconfig = kube_api.write_kubeconfig(tmp_path / "kubeconfig")
    path = tmp_path / "releasebot.toml"
    path.write_text(
        f'[registry]\nrepository = "{registry.repository(name)}"\ninsecure = true\nretries = 0\n'
        f'[database]\nurl = "sqlite:///{tmp_path / "state.db"}"\n'
        f'[kubernetes]\nkubeconfig = "{kubeconfig}"\n'
        "[fleet]\nenabled = true\n"
        f"[retention]\nenabled = {'true' if enabled else 'false'}\n",
        encoding="utf-8",
    )
    return str(path)


@pytest.fixture
def prepared(
    tmp_path: Path, plain_registry: RunningRegistry, registry_name: str, kube_api: FakeKubeApi
) -> dict[str, str]:
    seed_store(tmp_path / "state.db")
    kube_api.fleet.add_nodes(gpu_node("gpu-0", "4230.2.5"), gpu_node("gpu-1", "4593.2.5"))
    return {tag: plain_registry.push_image(registry_name, tag) for tag in (GONE, RUNNING, TARGET)}


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def tags(registry: RunningRegistry, name: str) -> set[str]:
    import httpx

    answer = httpx.get(f"{registry.base_url}/v2/{name}/tags/list")
    return set(answer.json()["tags"] or [])


def test_the_dry_run_says_what_and_why_and_deletes_nothing(
    tmp_path: Path,
    plain_registry: RunningRegistry,
    registry_name: str,
    kube_api: FakeKubeApi,
    prepared: dict[str, str],
    capsys: pytest.CaptureFixture[str],
) -> None:
    config = write_config(tmp_path, plain_registry, registry_name, kube_api, enabled=False)
    code, out, err = run(capsys, "retention", "--config", config)
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0].split()[:4] == ["would", "delete", GONE, prepared[GONE]]
    assert "no GPU node runs or will reboot into it, it left every feed on" in lines[1]
    assert f"keep          {RUNNING}  GPU node gpu-0 runs it" in lines
    assert f"keep          {TARGET}  a current target ({TARGET})" in lines
    assert lines[-1] == "1 tag(s) would delete, 2 kept (a dry run: nothing was deleted)"
    assert tags(plain_registry, registry_name) == {GONE, RUNNING, TARGET}
    assert "Traceback" not in err


def test_apply_needs_retention_enabled(
    tmp_path: Path,
    plain_registry: RunningRegistry,
    registry_name: str,
    kube_api: FakeKubeApi,
    prepared: dict[str, str],
    capsys: pytest.CaptureFixture[str],
) -> None:
    config = write_config(tmp_path, plain_registry, registry_name, kube_api, enabled=False)
    code, out, err = run(capsys, "retention", "--apply", "--config", config)
    assert code == 2
    assert out == ""
    assert err.splitlines() == [
        "releasebot: config: retention.enabled: is false: set it to true to delete "
        "(try without --apply first)"
    ]
    assert tags(plain_registry, registry_name) == {GONE, RUNNING, TARGET}


def test_apply_deletes_what_nothing_needs_and_records_it(
    tmp_path: Path,
    plain_registry: RunningRegistry,
    registry_name: str,
    kube_api: FakeKubeApi,
    prepared: dict[str, str],
    capsys: pytest.CaptureFixture[str],
) -> None:
    config = write_config(tmp_path, plain_registry, registry_name, kube_api, enabled=True)
    code, out, err = run(capsys, "retention", "--apply", "--config", config, "--format", "json")
    assert code == 0, err
    shown = json.loads(out)
    assert shown["applied"] is True
    assert [d["tag"] for d in shown["deleted"]] == [GONE]
    assert {k["tag"] for k in shown["keep"]} == {RUNNING, TARGET}
    assert tags(plain_registry, registry_name) == {RUNNING, TARGET}
    engine = make_engine(f"sqlite:///{tmp_path / 'state.db'}")
    (recorded,) = SqlStateStore(engine).deletions()
    later = datetime.now(UTC) + timedelta(days=1)
    kinds = {p.event.kind for p in SqlStateStore(engine).pending_events(later)}
    engine.dispose()
    assert (recorded.tag, recorded.digest) == (GONE, prepared[GONE])
    assert EventKind.TAG_DELETED not in kinds  # Slack is off: nothing fills the outbox
    code, out, _ = run(capsys, "retention", "--apply", "--config", config)
    assert code == 0
    assert out.splitlines()[-1] == "0 tag(s) deleted, 2 kept"


def test_nodes_forbidden_delete_nothing_and_exit_1(
    tmp_path: Path,
    plain_registry: RunningRegistry,
    registry_name: str,
    kube_api: FakeKubeApi,
    prepared: dict[str, str],
    capsys: pytest.CaptureFixture[str],
) -> None:
    kube_api.fleet.forbid("list", "nodes")
    config = write_config(tmp_path, plain_registry, registry_name, kube_api, enabled=True)
    code, out, err = run(capsys, "retention", "--apply", "--config", config)
    assert code == 1
    assert out.splitlines()[-1] == "0 tag(s) deleted, 3 kept"
    (line,) = err.splitlines()
    assert line.startswith("releasebot: the fleet could not be listed (")
    assert "'list' on 'nodes'" in line
    assert line.endswith("): deleting nothing")
    assert tags(plain_registry, registry_name) == {GONE, RUNNING, TARGET}


def test_a_node_list_with_a_null_item_deletes_nothing_and_exits_1(
    tmp_path: Path,
    plain_registry: RunningRegistry,
    registry_name: str,
    kube_api: FakeKubeApi,
    prepared: dict[str, str],
    capsys: pytest.CaptureFixture[str],
) -> None:
    kube_api.fleet.add_raw_node_items(None)  # it may be the node that runs GONE's release
    config = write_config(tmp_path, plain_registry, registry_name, kube_api, enabled=True)
    code, out, err = run(capsys, "retention", "--apply", "--config", config)
    assert code == 1
    assert out.splitlines()[-1] == "0 tag(s) deleted, 3 kept"
    (line,) = err.splitlines()
    assert line.startswith("releasebot: the fleet view is unsure (1 item(s) of the Node list")
    assert line.endswith("): deleting nothing")
    assert tags(plain_registry, registry_name) == {GONE, RUNNING, TARGET}


def test_a_registry_refusing_deletes_is_one_line_and_exit_1(
    tmp_path: Path,
    nodelete_registry: RunningRegistry,
    registry_name: str,
    kube_api: FakeKubeApi,
    capsys: pytest.CaptureFixture[str],
) -> None:
    seed_store(tmp_path / "state.db")
    kube_api.fleet.add_nodes(gpu_node("gpu-0", "4230.2.5"))
    for tag in (GONE, RUNNING, TARGET):
        nodelete_registry.push_image(registry_name, tag)
    config = write_config(tmp_path, nodelete_registry, registry_name, kube_api, enabled=True)
    code, out, err = run(capsys, "retention", "--apply", "--config", config)
    assert code == 1
    (line,) = err.splitlines()
    assert "refuses deletes (405" in line
    assert line.endswith("; nothing was deleted")
    assert out.splitlines()[0].startswith(f"not deleted   {GONE}")
    assert tags(nodelete_registry, registry_name) == {GONE, RUNNING, TARGET}


def test_the_configured_secrets_are_known_to_the_redactor(tmp_path: Path) -> None:
    import argparse

    from releasebot.cli.retention import _cmd_retention
    from releasebot.domain.shared.errors import ConfigError
    from releasebot.logs import RedactSecrets

    secret = "plain-value-4f1c9a"  # no recognisable form: only a known value is masked
    path = tmp_path / "releasebot.toml"
    path.write_text(
        '[registry]\nrepository = "127.0.0.1:9/nvidia/driver"\nusername = "bot"\n'
        f'password = "{secret}"\n[retention]\nenabled = false\n',
        encoding="utf-8",
    )
    args = argparse.Namespace(config=str(path), apply=True, format="table")
    args.redact = RedactSecrets()
    with pytest.raises(ConfigError):  # --apply with retention disabled: stops after loading
        _cmd_retention(args)
    assert secret not in args.redact.redact(f"an error quoting {secret}")
