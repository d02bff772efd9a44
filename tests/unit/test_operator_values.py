"""``render_operator_values``: Helm values and NVIDIADriver pools for releasebot's images.

The output is parsed back as YAML (PyYAML, as Helm's own parser would reject what it
cannot read); every NVIDIADriver is validated against GPU Operator v26.7.0's NVIDIADriver
CRD with jsonschema (after the CRD's defaults, as the API server applies them), every Helm
key against the chart's ``values.yaml`` and the ClusterPolicy the chart makes of them
against its CRD (``tests/support/gpu_operator_schemas.py``). Also covered: one version
(ClusterPolicy values suffice), a mixed fleet, a pending reboot making a fleet mixed, the
ClusterPolicy warning naming operator 26.3.0, ``usePrecompiled: false`` written out, a
Flatcar version no feed lists (no pool, a warning), unpublished tags named, a non-Flatcar
GPU node keeping its driver through a pool of its own (or a warning when it cannot), and
the YAML writer's quoting.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from releasebot.domain.fleet.nodes import parse_node
from releasebot.domain.fleet.operator import (
    DriverMode,
    OperatorView,
    parse_cluster_policy,
    parse_nvidia_driver,
)
from releasebot.domain.shared.errors import ConfigError
from releasebot.domain.shared.versions import FlatcarVersion
from releasebot.domain.views.operator_values import (
    OperatorValues,
    nvidia_drivers_yaml,
    render_operator_values,
    to_yaml,
    values_yaml,
)
from tests.support.gpu_operator_schemas import (
    chart_mismatches,
    chart_values,
    cluster_policy_driver,
    validate_nvidia_driver,
)
from tests.support.gpu_operator_schemas import crd_schema as load_crd

DATA = Path(__file__).parents[1] / "data"
REPOSITORY = "registry.example.test/gpu/driver"


def nodes(names: set[str] | None = None) -> list[Any]:
    raws = json.loads((DATA / "fleet" / "nodes.json").read_text())
    return [parse_node(raw) for raw in raws if names is None or raw["metadata"]["name"] in names]


@pytest.fixture(scope="module")
def crd_schema() -> dict[str, Any]:
    return load_crd("nvidiadrivers")


def render(
    names: set[str] | None = None,
    mode: DriverMode | None = None,
    **options: Any,
) -> OperatorValues:
    return render_operator_values(
        repository=REPOSITORY,
        driver_version="580.95.05",
        nodes=nodes(names),
        mode=mode,
        **options,
    )


def policy_view(**driver: Any) -> OperatorView:
    raw = json.loads((DATA / "fleet" / "clusterpolicy.json").read_text())
    raw["spec"]["driver"].update(driver)
    return OperatorView((parse_cluster_policy(raw),), ())


def test_one_flatcar_version_needs_only_the_helm_values() -> None:
    result = render({"gpu-a10g-0", "gpu-gh200-3", "cpu-5"})
    assert result.nvidia_drivers == ()
    assert result.warnings == ()
    assert [v.text for v in result.versions] == ["4593.2.5"]
    text = values_yaml(result)
    assert yaml.safe_load(text) == {
        "driver": {
            "repository": "registry.example.test/gpu",
            "image": "driver",
            "version": "580.95.05",
            "usePrecompiled": False,
        }
    }
    assert nvidia_drivers_yaml(result) == ""


def test_the_helm_values_are_the_charts_keys_and_make_a_valid_cluster_policy() -> None:
    schema = load_crd("clusterpolicies")["properties"]["spec"]["properties"]["driver"]
    for result in (render({"gpu-a10g-0"}), render(view=policy_view())):
        values = yaml.safe_load(values_yaml(result))
        assert chart_mismatches(values, chart_values()) == []
        driver = cluster_policy_driver(values)
        jsonschema.validate(driver, schema, cls=jsonschema.Draft4Validator)
    assert cluster_policy_driver(yaml.safe_load(values_yaml(render({"gpu-a10g-0"})))) == {
        "enabled": True,
        "useNvidiaDriverCRD": False,
        "usePrecompiled": False,
        "repository": "registry.example.test/gpu",
        "image": "driver",
        "version": "580.95.05",
    }
    assert chart_mismatches(
        {"driver": {"usePrecompiled": "false", "bogus": 1}}, chart_values()
    ) == [
        "driver.usePrecompiled: str, chart bool",
        "driver.bogus: not in the chart",
    ]


def test_a_mixed_fleet_gets_one_nvidia_driver_per_version(crd_schema: dict[str, Any]) -> None:
    result = render(mode=DriverMode.CLUSTER_POLICY, view=policy_view())
    versions = [v.text for v in result.versions]
    assert versions == ["4081.3.6", "4593.2.4", "4593.2.5", "4628.0.0"]
    values = yaml.safe_load(values_yaml(result))
    assert values["driver"]["nvidiaDriverCRD"] == {"enabled": True, "deployDefaultCR": False}
    assert values["driver"]["version"] == "580.95.05"
    assert values["driver"]["usePrecompiled"] is False
    documents = list(yaml.safe_load_all(nvidia_drivers_yaml(result)))
    assert documents == [dict(document) for document in result.nvidia_drivers]
    assert [d["metadata"]["name"] for d in documents] == [
        "releasebot-flatcar-4081-3-6",
        "releasebot-flatcar-4593-2-4",
        "releasebot-flatcar-4593-2-5",
        "releasebot-flatcar-4628-0-0",
        "releasebot-keep-ubuntu22-04",
    ]
    for document in documents:
        validate_nvidia_driver(document, crd_schema)
        assert document["spec"]["usePrecompiled"] is False
    for document, version in zip(documents, versions, strict=False):
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
    assert "5 OS versions (4081.3.6, 4593.2.4, 4593.2.5, 4628.0.0, ubuntu22.04)" in warning
    assert any("lack NFD os_release labels (gpu-lts-6)" in w for w in result.warnings)
    header = [line for line in values_yaml(result).splitlines() if line.startswith("#")]
    assert any("26.3.0" in line for line in header)
    assert all(line.startswith("# ") for line in header)


def test_the_schema_validator_rejects_what_the_api_server_would(
    crd_schema: dict[str, Any],
) -> None:
    (document, *_) = render().nvidia_drivers
    with pytest.raises(jsonschema.ValidationError, match="'default' is a required property"):
        jsonschema.validate(document, crd_schema, cls=jsonschema.Draft4Validator)
    validate_nvidia_driver(document, crd_schema)  # the API server defaults it to false
    bad = json.loads(json.dumps(document))
    bad["spec"]["driverType"] = "gpu-please"
    with pytest.raises(jsonschema.ValidationError, match="gpu-please"):
        validate_nvidia_driver(bad, crd_schema)
    bad = json.loads(json.dumps(document))
    bad["spec"]["usePrecompiled"] = "false"
    with pytest.raises(jsonschema.ValidationError, match="'false' is not of type 'boolean'"):
        validate_nvidia_driver(bad, crd_schema)
    del bad["spec"]["image"]
    with pytest.raises(jsonschema.ValidationError):
        validate_nvidia_driver(bad, crd_schema)


def test_a_pending_reboot_into_another_version_makes_the_fleet_mixed() -> None:
    result = render({"gpu-a10g-1"})  # runs 4593.2.4, FLUO installed 4593.2.5
    assert [v.text for v in result.versions] == ["4593.2.4", "4593.2.5"]
    assert len(result.nvidia_drivers) == 2


def test_nvidia_driver_mode_keeps_its_pools_on_one_version() -> None:
    result = render({"gpu-a10g-0"}, mode=DriverMode.NVIDIA_DRIVER, view=policy_view())
    assert len(result.nvidia_drivers) == 1
    assert result.warnings == ()


def test_a_flatcar_version_no_feed_lists_gets_no_pool_and_a_warning() -> None:
    listed = {FlatcarVersion.parse(v) for v in ("4593.2.4", "4593.2.5", "4081.3.6")}
    result = render({"gpu-a10g-0", "gpu-a10g-1", "gpu-l4-2"}, listed=listed)
    assert [v.text for v in result.versions] == ["4593.2.4", "4593.2.5"]
    names = [d["metadata"]["name"] for d in result.nvidia_drivers]
    assert names == ["releasebot-flatcar-4593-2-4", "releasebot-flatcar-4593-2-5"]
    (warning,) = [w for w in result.warnings if "4628.0.0" in w]
    assert warning.startswith("Flatcar 4628.0.0 is in no feed releasebot reads")
    assert warning.endswith("(GPU nodes running or rebooting into it: gpu-l4-2)")
    assert f"# warning: {warning}" in values_yaml(result)
    assert f"# warning: {warning}" in nvidia_drivers_yaml(result)


def test_tags_not_published_are_named_with_the_nodes_that_would_pull_them() -> None:
    result = render(
        {"gpu-a10g-0", "gpu-a10g-1"},
        drivers={FlatcarVersion.parse("4593.2.4"): "570.195.03"},
        published={"580.95.05-flatcar4593.2.5"},
    )
    assert result.unpublished == ("570.195.03-flatcar4593.2.4",)
    (warning,) = [w for w in result.warnings if "not published" in w]
    assert warning.startswith("570.195.03-flatcar4593.2.4 is not published and verified yet")
    assert "Flatcar 4593.2.4 (gpu-a10g-1)" in warning
    pools = {d["metadata"]["name"]: d["spec"]["version"] for d in result.nvidia_drivers}
    assert pools == {
        "releasebot-flatcar-4593-2-4": "570.195.03",
        "releasebot-flatcar-4593-2-5": "580.95.05",
    }
    single = render({"gpu-a10g-0"}, published=set())
    assert single.unpublished == ("580.95.05-flatcar4593.2.5",)
    assert render({"gpu-a10g-0"}).unpublished == ()  # not checked: nothing named


def test_a_non_flatcar_gpu_node_keeps_the_nvidia_driver_it_has(crd_schema: dict[str, Any]) -> None:
    raw = json.loads((DATA / "fleet" / "nvidiadrivers.json").read_text())
    ubuntu = json.loads(json.dumps(raw[1]))
    ubuntu["metadata"]["name"] = "ubuntu"
    ubuntu["spec"]["nodeSelector"] = {"feature.node.kubernetes.io/system-os_release.ID": "ubuntu"}
    ubuntu["spec"]["usePrecompiled"] = True
    ubuntu["spec"]["version"] = "570"
    view = OperatorView(
        (
            parse_cluster_policy(
                {"metadata": {"name": "p"}, "spec": {"driver": {"useNvidiaDriverCRD": True}}}
            ),
        ),
        tuple(parse_nvidia_driver(item) for item in (raw[0], ubuntu)),
    )
    result = render({"gpu-a10g-0", "gpu-ubuntu-4"}, DriverMode.NVIDIA_DRIVER, view=view)
    values = yaml.safe_load(values_yaml(result))
    assert values["driver"]["nvidiaDriverCRD"] == {"enabled": True, "deployDefaultCR": False}
    documents = list(yaml.safe_load_all(nvidia_drivers_yaml(result)))
    assert [d["metadata"]["name"] for d in documents] == [
        "releasebot-flatcar-4593-2-5",
        "releasebot-keep-ubuntu22-04",
    ]
    kept = documents[1]
    validate_nvidia_driver(kept, crd_schema)
    assert kept["spec"] == {
        "driverType": "gpu",
        "repository": "nvcr.io/nvidia",
        "image": "driver",
        "version": "570",
        "usePrecompiled": True,  # what it runs today, not releasebot's images
        "nodeSelector": {
            "feature.node.kubernetes.io/system-os_release.ID": "ubuntu",
            "feature.node.kubernetes.io/system-os_release.VERSION_ID": "22.04",
        },
    }
    comments = [line for line in values_yaml(result).splitlines() if line.startswith("# ")]
    assert any(
        line.startswith("# deployDefaultCR: false, and GPU nodes on other OSes")
        for line in comments
    )
    assert (
        "# releasebot-keep-ubuntu22-04 keeps NVIDIADriver/ubuntu's driver "
        "nvcr.io/nvidia/driver:570 for gpu-ubuntu-4 (ubuntu22.04)" in comments
    )
    assert result.warnings == (  # apply these, then delete it: one node, one NVIDIADriver
        "NVIDIADriver(s) ubuntu select GPU nodes these pools select too: delete them right "
        "after applying these; the operator reconciles no NVIDIADriver while two select one node",
    )


def test_a_non_flatcar_gpu_node_without_a_known_driver_or_labels_is_named() -> None:
    result = render({"gpu-a10g-0", "gpu-ubuntu-4", "gpu-broken-7"}, DriverMode.CLUSTER_POLICY)
    assert [d["metadata"]["name"] for d in result.nvidia_drivers] == ["releasebot-flatcar-4593-2-5"]
    (unread,) = [w for w in result.warnings if "gpu-ubuntu-4" in w]
    assert "(the GPU Operator's objects could not be read): no NVIDIADriver" in unread
    (unlabelled,) = [w for w in result.warnings if "gpu-broken-7" in w]
    assert "lack NFD os_release labels (gpu-broken-7)" in unlabelled
    assert "they get no driver" in unlabelled


def test_a_gpu_node_without_labels_is_named_when_no_pool_is_written() -> None:
    result = render({"gpu-a10g-0", "gpu-broken-7"})
    assert result.nvidia_drivers == ()
    assert result.warnings == (
        "GPU node(s) releasebot builds nothing for lack NFD os_release labels (gpu-broken-7): "
        "a ClusterPolicy tags their image with another node's OS; label them (NFD) and run "
        "this again",
    )


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
