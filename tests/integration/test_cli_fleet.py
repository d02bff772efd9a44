"""``releasebot fleet`` and ``releasebot operator-values`` end to end: the CLI with a
kubeconfig pointing at the fake Kubernetes API (real HTTP), the feeds over HTTP and a real
registry.

Covers: a verdict per GPU node in JSON and in the table (verified, missing, a pending
reboot, an ignored Ubuntu GPU node) while nothing is written (a dry run: no database is
even created); Nodes forbidden by RBAC are one line and exit 1; ``operator-values`` prints
Helm values that parse as YAML, with the NVIDIADriver pools of a fleet on several Flatcar
versions valid against the CRD's schema, and the warning that a ClusterPolicy cannot serve
that fleet, naming the operator version that can.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from tests.integration.test_cli_plan import run, serve_fixtures, write_config
from tests.support.feedserver import FeedServer
from tests.support.fleetnodes import gpu_node, ubuntu_gpu_node
from tests.support.kubeapi import FakeKubeApi
from tests.support.registryserver import RunningRegistry

DATA = Path(__file__).parents[1] / "data"


@pytest.fixture
def server() -> Iterator[FeedServer]:
    with FeedServer() as feed_server:
        yield feed_server


@pytest.fixture
def repository(plain_registry: RunningRegistry, registry_name: str) -> str:
    return plain_registry.repository(registry_name)


@pytest.fixture
def config(
    tmp_path: Path,
    server: FeedServer,
    repository: str,
    test_data: Path,
    kube_api: FakeKubeApi,
) -> str:
    serve_fixtures(server, test_data)
    kube_api.fleet.add_nodes(
        gpu_node("gpu-0", "4593.2.5"),
        gpu_node("gpu-1", "4459.2.4"),  # a release behind keep
        gpu_node("gpu-2", "4081.3.9", group="lts", pending="4081.3.10", before_reboot=True),
        gpu_node("cpu-3", "4593.2.5", gpu=False),
        ubuntu_gpu_node("gpu-ubuntu-4"),
    )
    kubeconfig = kube_api.write_kubeconfig(tmp_path / "kubeconfig")
    path = write_config(
        tmp_path,
        server,
        repository,
        kubernetes=f'kubeconfig = "{kubeconfig}"',
        fleet="enabled = true",
    )
    return str(path)


def test_fleet_json_gives_a_verdict_per_gpu_node_and_writes_nothing(
    config: str,
    tmp_path: Path,
    plain_registry: RunningRegistry,
    registry_name: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    plain_registry.push_image(registry_name, "580.178.04-flatcar4593.2.5", arch="amd64")
    code, out, err = run(capsys, "fleet", "--quiet", "--config", config, "--format", "json")
    assert code == 0, err
    shown = json.loads(out)
    nodes = {node["name"]: node for node in shown["nodes"]}
    assert {name: node["verdict"] for name, node in nodes.items()} == {
        "gpu-0": "verified",
        "gpu-1": "missing",
        "gpu-2": "missing",
    }
    assert (nodes["gpu-2"]["pending_version"], nodes["gpu-2"]["pending_verdict"]) == (
        "4081.3.10",
        "missing",
    )
    assert [image["tag"] for image in nodes["gpu-1"]["images"]] == ["580.178.04-flatcar4459.2.4"]
    assert shown["ignored"][0]["name"] == "gpu-ubuntu-4"
    assert shown["counts"]["verified"] == 1
    assert not (tmp_path / "state.db").exists()  # a dry run: nothing is written


def test_fleet_table(config: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "fleet", "--quiet", "--config", config)
    assert code == 0
    lines = out.splitlines()
    assert lines[0].split() == [
        "NODE",
        "ARCH",
        "FLATCAR",
        "VERDICT",
        "IMAGE",
        "PENDING",
        "PENDING",
        "VERDICT",
        "PENDING",
        "IMAGE",
        "NOTE",
    ]
    assert lines[3].split()[:8] == [
        "gpu-2",
        "amd64",
        "4081.3.9",
        "missing",
        "-",  # no ClusterPolicy here: the operator gives it no reference
        "4081.3.10",
        "missing",
        "-",
    ]
    assert "FLUO waits to reboot it" in lines[3]
    assert lines[-1].startswith("ignored GPU node gpu-ubuntu-4: runs 'ubuntu22.04'")


def test_fleet_forbidden_is_one_line_and_exit_1(
    config: str, kube_api: FakeKubeApi, capsys: pytest.CaptureFixture[str]
) -> None:
    kube_api.fleet.forbid("list", "nodes")
    code, out, err = run(capsys, "fleet", "--quiet", "--config", config)
    assert (code, out) == (1, "")
    [refused] = [line for line in err.splitlines() if "cannot list Nodes" in line]
    assert "grant releasebot's ServiceAccount 'list' on 'nodes'" in refused
    assert "Traceback" not in err


@pytest.fixture(scope="module")
def crd_schema() -> dict[str, Any]:
    crd = yaml.safe_load((DATA / "nvidia" / "nvidia.com_nvidiadrivers.yaml").read_text())
    schema: dict[str, Any] = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    return schema


def test_operator_values_for_a_mixed_fleet(
    config: str,
    repository: str,
    kube_api: FakeKubeApi,
    crd_schema: dict[str, Any],
    capsys: pytest.CaptureFixture[str],
) -> None:
    policy = json.loads((DATA / "fleet" / "clusterpolicy.json").read_text())
    kube_api.fleet.install_gpu_operator_crds([policy])
    code, out, err = run(capsys, "operator-values", "--quiet", "--config", config)
    assert code == 0, err
    values = yaml.safe_load(out)
    base, _, image = repository.rpartition("/")
    assert values["driver"]["repository"] == base
    assert values["driver"]["image"] == image
    assert values["driver"]["version"] == "580.178.04"  # the newest driver planned
    assert values["driver"]["nvidiaDriverCRD"] == {"enabled": True, "deployDefaultCR": False}
    [warning] = [line for line in err.splitlines() if "ClusterPolicy gives all" in line]
    assert "GPU Operator >= 26.3.0" in warning

    code, out, err = run(
        capsys, "operator-values", "--quiet", "--config", config, "--nvidia-drivers"
    )
    assert code == 0, err
    pools = list(yaml.safe_load_all(out))
    names = [pool["metadata"]["name"] for pool in pools]
    assert names == [
        "releasebot-flatcar-4081-3-9",
        "releasebot-flatcar-4081-3-10",
        "releasebot-flatcar-4459-2-4",
        "releasebot-flatcar-4593-2-5",
    ]
    for pool in pools:
        jsonschema.validate(pool, crd_schema)
        assert pool["spec"]["version"] == "580.178.04"


def test_operator_values_names_the_driver_asked_for(
    config: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run(
        capsys, "operator-values", "--quiet", "--config", config, "--driver", "580.95.05"
    )
    assert code == 0, err
    assert yaml.safe_load(out)["driver"]["version"] == "580.95.05"
