"""``releasebot fleet`` and ``releasebot operator-values`` end to end: the CLI with a
kubeconfig pointing at the fake Kubernetes API (real HTTP), the feeds over HTTP and a real
registry.

Covers: a verdict per GPU node in JSON and in the table (verified, missing, a pending
reboot, an ignored Ubuntu GPU node) while nothing is written (a dry run: no database is
even created); Nodes forbidden by RBAC are one line and exit 1; ``operator-values`` prints
Helm values that parse as YAML, with the NVIDIADriver pools of a fleet on several Flatcar
versions valid against the GPU Operator v26.7.0 CRD's schema, and the warning that a
ClusterPolicy cannot serve that fleet, naming the operator version that can.

``operator-values`` as a proposal that strands no node, on a fleet of two Flatcar pools (one
node on 4593.2.4 rebooting into 4593.2.5), an Ubuntu GPU node on NVIDIA's own image, a GPU
node without NFD labels and a Flatcar version no feed lists: the driver the cluster runs
from releasebot's repository (per pool when several), ``usePrecompiled: false``, the
Ubuntu node's pool, no pool for the unlisted version, unpublished tags named (and
``--strict`` refusing with exit 1 until they are published), all of it valid against
v26.7.0's CRDs and chart values; a ``--driver`` that is no release is exit 2.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from releasebot.domain.fleet.nodes import NFD_OS_ID, NFD_VERSION_ID
from tests.integration.test_cli_plan import run, serve_fixtures, write_config
from tests.support.feedserver import FeedServer
from tests.support.fleetnodes import gpu_node, ubuntu_gpu_node
from tests.support.gpu_operator_schemas import (
    chart_mismatches,
    chart_values,
    cluster_policy_driver,
    crd_schema,
    validate_nvidia_driver,
)
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
def nvidia_driver_schema() -> dict[str, Any]:
    return crd_schema("nvidiadrivers")


def test_operator_values_for_a_mixed_fleet(
    config: str,
    repository: str,
    kube_api: FakeKubeApi,
    nvidia_driver_schema: dict[str, Any],
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
    assert values["driver"]["version"] == "580.178.04"  # the cluster runs none of releasebot's
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
        "releasebot-keep-ubuntu22-04",  # what the ClusterPolicy gives it today
    ]
    for pool in pools:
        validate_nvidia_driver(pool, nvidia_driver_schema)
    assert {pool["spec"]["version"] for pool in pools[:-1]} == {"580.178.04"}
    assert pools[-1]["spec"]["repository"] == "registry.example.test/gpu"
    assert pools[-1]["spec"]["version"] == "580.95.05"


def test_operator_values_names_the_driver_asked_for(
    config: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run(
        capsys, "operator-values", "--quiet", "--config", config, "--driver", "580.95.05"
    )
    assert code == 0, err
    assert yaml.safe_load(out)["driver"]["version"] == "580.95.05"


@pytest.mark.parametrize("driver", ["580", "sha256:abc", "580.95.05\x1b]0;x\x07"])
def test_operator_values_refuses_a_driver_that_is_no_release(
    config: str, driver: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run(
        capsys, "operator-values", "--quiet", "--config", config, "--driver", driver
    )
    assert (code, out) == (2, "")
    [line] = [line for line in err.splitlines() if "--driver" in line]
    assert "is not a driver release like 580.178.04" in line
    assert "\x1b" not in err
    assert "Traceback" not in err


# -- a proposal that strands no node ---------------------------------------------------------


def operator_objects(repository: str, flatcar: dict[str, str]) -> tuple[dict[str, Any], list[Any]]:
    """A ClusterPolicy deferring to NVIDIADrivers, one NVIDIADriver per Flatcar version in
    ``flatcar`` (version -> driver) on ``repository``, and the Ubuntu nodes' on NVIDIA's."""
    base, _, image = repository.rpartition("/")
    policy = json.loads((DATA / "fleet" / "clusterpolicy.json").read_text())
    policy["spec"]["driver"].update(useNvidiaDriverCRD=True, repository=base, image=image)

    def driver(name: str, path: str, version: str, selector: dict[str, str]) -> Any:
        base, _, image = path.rpartition("/")
        spec = {"driverType": "gpu", "repository": base, "image": image, "version": version}
        spec |= {"usePrecompiled": False, "nodeSelector": selector}
        meta = {"name": name}
        return {
            "apiVersion": "nvidia.com/v1alpha1",
            "kind": "NVIDIADriver",
            "metadata": meta,
            "spec": spec,
        }

    drivers = [
        driver(f"fc-{v}", repository, d, {NFD_OS_ID: "flatcar", NFD_VERSION_ID: v})
        for v, d in flatcar.items()
    ]
    drivers.append(driver("ubuntu", "nvcr.io/nvidia/driver", "570.195.03", {NFD_OS_ID: "ubuntu"}))
    return policy, drivers


@pytest.fixture
def mixed(
    tmp_path: Path,
    server: FeedServer,
    repository: str,
    test_data: Path,
    kube_api: FakeKubeApi,
) -> str:
    serve_fixtures(server, test_data)
    bare = ubuntu_gpu_node("gpu-bare-6")
    for label in (NFD_OS_ID, NFD_VERSION_ID):
        del bare["metadata"]["labels"][label]
    kube_api.fleet.add_nodes(
        gpu_node("gpu-0", "4593.2.5"),
        gpu_node("gpu-1", "4593.2.4", pending="4593.2.5"),
        gpu_node("gpu-9", "4593.2.9"),  # in no feed releasebot reads
        ubuntu_gpu_node("gpu-ubuntu-4"),
        bare,
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


def test_operator_values_strands_no_node(
    mixed: str,
    repository: str,
    kube_api: FakeKubeApi,
    plain_registry: RunningRegistry,
    registry_name: str,
    nvidia_driver_schema: dict[str, Any],
    capsys: pytest.CaptureFixture[str],
) -> None:
    base, _, image = repository.rpartition("/")
    policy, drivers = operator_objects(
        repository, {"4593.2.5": "580.95.05", "4593.2.4": "580.95.05"}
    )
    drivers.append(operator_objects(repository, {"4593.2.9": "580.95.05"})[1][0])
    kube_api.fleet.install_gpu_operator_crds([policy], drivers)
    plain_registry.push_image(registry_name, "580.95.05-flatcar4593.2.5", arch="amd64")

    code, out, err = run(capsys, "operator-values", "--quiet", "--config", mixed)
    assert code == 0, err
    values = yaml.safe_load(out)
    assert values == {
        "driver": {
            "repository": base,
            "image": image,
            "version": "580.95.05",  # what the cluster runs, not the newest planned 580.178.04
            "usePrecompiled": False,
            "nvidiaDriverCRD": {"enabled": True, "deployDefaultCR": False},
        }
    }
    assert chart_mismatches(values, chart_values()) == []
    driver_schema = crd_schema("clusterpolicies")["properties"]["spec"]["properties"]["driver"]
    jsonschema.validate(
        cluster_policy_driver(values), driver_schema, cls=jsonschema.Draft4Validator
    )
    comments = [line for line in out.splitlines() if line.startswith("#")]
    assert "# driver 580.95.05: what the GPU Operator runs from releasebot's repository" in comments
    assert any(
        line.startswith("# deployDefaultCR: false, and GPU nodes on other OSes")
        for line in comments
    )
    warnings = [
        line.removeprefix("releasebot: warning: ")
        for line in err.splitlines()
        if line.startswith("releasebot: warning: ")
    ]
    [unlisted] = [w for w in warnings if w.startswith("Flatcar 4593.2.9 is in no feed")]
    assert unlisted.endswith(
        "no NVIDIADriver is written for it (GPU nodes running or rebooting into it: gpu-9)"
    )
    [unpublished] = [w for w in warnings if "not published" in w]
    assert unpublished.startswith("580.95.05-flatcar4593.2.4 is not published and verified yet")
    assert "Flatcar 4593.2.4 (gpu-1)" in unpublished
    [bare] = [w for w in warnings if "gpu-bare-6" in w]
    assert "lack NFD os_release labels (gpu-bare-6)" in bare
    [clash] = [w for w in warnings if w.startswith("NVIDIADriver(s) ")]
    assert clash.startswith("NVIDIADriver(s) fc-4593.2.4, fc-4593.2.5, fc-4593.2.9, ubuntu select")
    for warning in (unlisted, unpublished, bare, clash):
        assert f"# warning: {warning}" in comments

    code, out, err = run(
        capsys, "operator-values", "--quiet", "--config", mixed, "--nvidia-drivers"
    )
    assert code == 0, err
    pools = list(yaml.safe_load_all(out))
    for pool in pools:
        validate_nvidia_driver(pool, nvidia_driver_schema)
        assert pool["kind"] == "NVIDIADriver"
        assert pool["spec"]["usePrecompiled"] is False
    assert {pool["metadata"]["name"]: pool["spec"] for pool in pools} == {
        "releasebot-flatcar-4593-2-4": {
            "driverType": "gpu",
            "repository": base,
            "image": image,
            "version": "580.95.05",
            "usePrecompiled": False,
            "nodeSelector": {NFD_OS_ID: "flatcar", NFD_VERSION_ID: "4593.2.4"},
        },
        "releasebot-flatcar-4593-2-5": {
            "driverType": "gpu",
            "repository": base,
            "image": image,
            "version": "580.95.05",
            "usePrecompiled": False,
            "nodeSelector": {NFD_OS_ID: "flatcar", NFD_VERSION_ID: "4593.2.5"},
        },
        "releasebot-keep-ubuntu22-04": {  # the Ubuntu node keeps NVIDIA's own image
            "driverType": "gpu",
            "repository": "nvcr.io/nvidia",
            "image": "driver",
            "version": "570.195.03",
            "usePrecompiled": False,
            "nodeSelector": {NFD_OS_ID: "ubuntu", NFD_VERSION_ID: "22.04"},
        },
    }
    assert "# releasebot-keep-ubuntu22-04 keeps NVIDIADriver/ubuntu's driver" in out


def test_operator_values_strict_refuses_until_every_tag_is_published(
    mixed: str,
    repository: str,
    kube_api: FakeKubeApi,
    plain_registry: RunningRegistry,
    registry_name: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    policy, drivers = operator_objects(
        repository, {"4593.2.5": "580.95.05", "4593.2.4": "580.95.05"}
    )
    kube_api.fleet.install_gpu_operator_crds([policy], drivers)
    plain_registry.push_image(registry_name, "580.95.05-flatcar4593.2.5", arch="amd64")
    for flags in ((), ("--nvidia-drivers",)):
        code, out, err = run(
            capsys, "operator-values", "--quiet", "--config", mixed, "--strict", *flags
        )
        assert (code, out) == (1, "")
        refused = [line for line in err.splitlines() if "refused (--strict)" in line]
        assert refused == [
            "releasebot: refused (--strict): 580.95.05-flatcar4593.2.4 is not published and "
            "verified yet"
        ]
        assert "Traceback" not in err

    plain_registry.push_image(registry_name, "580.95.05-flatcar4593.2.4", arch="amd64")
    code, out, err = run(capsys, "operator-values", "--quiet", "--config", mixed, "--strict")
    assert code == 0, err
    assert yaml.safe_load(out)["driver"]["version"] == "580.95.05"
    assert "not published" not in err


def test_operator_values_keeps_each_pools_driver_when_the_cluster_runs_several(
    mixed: str, repository: str, kube_api: FakeKubeApi, capsys: pytest.CaptureFixture[str]
) -> None:
    policy, drivers = operator_objects(
        repository, {"4593.2.5": "580.95.05", "4593.2.4": "570.195.03"}
    )
    kube_api.fleet.install_gpu_operator_crds([policy], drivers)
    code, out, err = run(
        capsys, "operator-values", "--quiet", "--config", mixed, "--nvidia-drivers"
    )
    assert code == 0, err
    versions = {
        pool["metadata"]["name"]: pool["spec"]["version"] for pool in yaml.safe_load_all(out)
    }
    assert versions == {
        "releasebot-flatcar-4593-2-4": "570.195.03",
        "releasebot-flatcar-4593-2-5": "580.95.05",
        "releasebot-keep-ubuntu22-04": "570.195.03",
    }
    [several] = [
        line for line in err.splitlines() if "drivers from releasebot's repository" in line
    ]
    assert "570.195.03 on gpu-1; 580.95.05 on gpu-0" in several

    code, out, err = run(
        capsys,
        "operator-values",
        "--quiet",
        "--config",
        mixed,
        "--nvidia-drivers",
        "--driver",
        "580.178.04",
    )
    assert code == 0, err
    versions = {
        pool["metadata"]["name"]: pool["spec"]["version"] for pool in yaml.safe_load_all(out)
    }
    assert versions == {  # --driver wins for releasebot's pools; the Ubuntu node keeps its own
        "releasebot-flatcar-4593-2-4": "580.178.04",
        "releasebot-flatcar-4593-2-5": "580.178.04",
        "releasebot-keep-ubuntu22-04": "570.195.03",
    }
