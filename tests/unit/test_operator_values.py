"""``render_operator_values``: Helm values and NVIDIADriver pools for releasebot's images.

The output is parsed back as YAML (PyYAML, as Helm's own parser would reject what it
cannot read) and every NVIDIADriver is validated against the NVIDIADriver CRD's
OpenAPI schema from the GPU Operator repository (``tests/data/nvidia/
nvidia.com_nvidiadrivers.yaml``) with jsonschema. Also covered: one version (ClusterPolicy
values suffice), a mixed fleet, a pending reboot making a fleet mixed, the ClusterPolicy
warning naming operator 26.3.0, and the YAML writer's quoting.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from releasebot.domain.errors import ConfigError
from releasebot.domain.fleet import parse_node
from releasebot.domain.operator import DriverMode
from releasebot.domain.operator_values import (
    OperatorValues,
    nvidia_drivers_yaml,
    render_operator_values,
    to_yaml,
    values_yaml,
)

DATA = Path(__file__).parents[1] / "data"
REPOSITORY = "registry.example.test/gpu/driver"


def nodes(names: set[str] | None = None) -> list[Any]:
    raws = json.loads((DATA / "fleet" / "nodes.json").read_text())
    return [parse_node(raw) for raw in raws if names is None or raw["metadata"]["name"] in names]


@pytest.fixture(scope="module")
def crd_schema() -> dict[str, Any]:
    crd = yaml.safe_load((DATA / "nvidia" / "nvidia.com_nvidiadrivers.yaml").read_text())
    (version,) = crd["spec"]["versions"]
    assert version["name"] == "v1alpha1"
    schema: dict[str, Any] = version["schema"]["openAPIV3Schema"]
    jsonschema.Draft4Validator.check_schema(schema)
    return schema


def render(names: set[str] | None = None, mode: DriverMode | None = None) -> OperatorValues:
    return render_operator_values(
        repository=REPOSITORY, driver_version="580.95.05", nodes=nodes(names), mode=mode
    )


def test_one_flatcar_version_needs_only_the_helm_values() -> None:
    result = render({"gpu-a10g-0", "gpu-gh200-3", "cpu-5", "gpu-ubuntu-4"})
    assert result.nvidia_drivers == ()
    assert result.warnings == ()
    assert [v.text for v in result.versions] == ["4593.2.5"]
    text = values_yaml(result)
    assert yaml.safe_load(text) == {
        "driver": {
            "repository": "registry.example.test/gpu",
            "image": "driver",
            "version": "580.95.05",
        }
    }
    assert nvidia_drivers_yaml(result) == ""


def test_a_mixed_fleet_gets_one_nvidia_driver_per_version(crd_schema: dict[str, Any]) -> None:
    result = render(mode=DriverMode.CLUSTER_POLICY)
    versions = [v.text for v in result.versions]
    assert versions == ["4081.3.6", "4593.2.4", "4593.2.5", "4628.0.0"]
    values = yaml.safe_load(values_yaml(result))
    assert values["driver"]["nvidiaDriverCRD"] == {"enabled": True, "deployDefaultCR": False}
    assert values["driver"]["version"] == "580.95.05"
    documents = list(yaml.safe_load_all(nvidia_drivers_yaml(result)))
    assert documents == [dict(document) for document in result.nvidia_drivers]
    assert [d["metadata"]["name"] for d in documents] == [
        "releasebot-flatcar-4081-3-6",
        "releasebot-flatcar-4593-2-4",
        "releasebot-flatcar-4593-2-5",
        "releasebot-flatcar-4628-0-0",
    ]
    for document, version in zip(documents, versions, strict=True):
        jsonschema.validate(document, crd_schema, cls=jsonschema.Draft4Validator)
        assert document["apiVersion"] == "nvidia.com/v1alpha1"
        assert document["kind"] == "NVIDIADriver"
        assert document["spec"]["nodeSelector"] == {
            "feature.node.kubernetes.io/system-os_release.ID": "flatcar",
            "feature.node.kubernetes.io/system-os_release.VERSION_ID": version,
        }
        assert (document["spec"]["repository"], document["spec"]["image"]) == (
            "registry.example.test/gpu",
            "driver",
        )
    (warning,) = [w for w in result.warnings if "ClusterPolicy" in w]
    assert "GPU Operator >= 26.3.0" in warning
    assert "4 Flatcar versions (4081.3.6, 4593.2.4, 4593.2.5, 4628.0.0)" in warning
    assert any("lack NFD os_release labels (gpu-lts-6)" in w for w in result.warnings)
    header = [line for line in values_yaml(result).splitlines() if line.startswith("#")]
    assert any("26.3.0" in line for line in header)
    assert all(line.startswith("# ") for line in header)


def test_the_schema_validator_rejects_what_the_api_server_would(
    crd_schema: dict[str, Any],
) -> None:
    (document, *_) = render().nvidia_drivers
    bad = json.loads(json.dumps(document))
    bad["spec"]["driverType"] = "gpu-please"
    with pytest.raises(jsonschema.ValidationError, match="gpu-please"):
        jsonschema.validate(bad, crd_schema, cls=jsonschema.Draft4Validator)
    del bad["spec"]["image"]
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(bad, crd_schema, cls=jsonschema.Draft4Validator)


def test_a_pending_reboot_into_another_version_makes_the_fleet_mixed() -> None:
    result = render({"gpu-a10g-1"})  # runs 4593.2.4, FLUO installed 4593.2.5
    assert [v.text for v in result.versions] == ["4593.2.4", "4593.2.5"]
    assert len(result.nvidia_drivers) == 2


def test_nvidia_driver_mode_keeps_its_pools_on_one_version() -> None:
    result = render({"gpu-a10g-0"}, mode=DriverMode.NVIDIA_DRIVER)
    assert len(result.nvidia_drivers) == 1
    assert result.warnings == ()


def test_no_gpu_node_is_warned_about() -> None:
    result = render({"cpu-5"})
    assert result.warnings == (
        "no Flatcar GPU node found: these values assume one Flatcar version",
    )
    assert "# warning: no Flatcar GPU node found" in values_yaml(result)


@pytest.mark.parametrize("repository", ["driver", "registry.test/", "registry.test/gpu/driver:580"])
def test_a_repository_without_an_image_name_is_a_config_error(repository: str) -> None:
    with pytest.raises(ConfigError, match=r"registry\.repository"):
        render_operator_values(repository=repository, driver_version="580", nodes=[])


def test_the_writer_quotes_every_string() -> None:
    document = {
        "version": "580.95",
        "on": "yes",
        "empty": {},
        "none": [],
        "list": ["a", {"b": "c", "d": ["e"]}, 3, True, None],
        "needs: quoting": 'a "b"\n\\c',
        "feature.node.kubernetes.io/system-os_release.ID": "flatcar",
    }
    text = to_yaml(document)
    assert yaml.safe_load(text) == document
    assert 'version: "580.95"' in text
    assert '"on": "yes"' in text


def test_the_writer_round_trips_random_documents() -> None:
    rng = random.Random(1201)
    alphabet = "ab:-#&*!|>'\"%@`{}[],. \t\\\n\u00e9\u2028"

    def value(depth: int) -> object:
        kind = rng.randrange(6 if depth < 3 else 3)
        if kind == 0:
            return "".join(rng.choice(alphabet) for _ in range(rng.randrange(8)))
        if kind == 1:
            return rng.choice([True, False, 0, 17, -3, None])
        if kind == 2:
            return rng.choice(["yes", "no", "on", "null", "~", "1e3", "0x10", "4593.2.5", ""])
        if kind in (3, 4):
            return {str(value(depth + 1)): value(depth + 1) for _ in range(rng.randrange(4))}
        return [value(depth + 1) for _ in range(rng.randrange(4))]

    for _ in range(500):
        document = {f"k{index}": value(0) for index in range(rng.randrange(1, 5))}
        assert yaml.safe_load(to_yaml(document)) == document
