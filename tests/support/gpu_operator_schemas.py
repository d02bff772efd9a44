"""The GPU Operator v26.7.0's own schemas, to check what ``operator-values`` writes.

NVIDIA publishes no JSON schema for the chart's values (no ``values.schema.json``), so
``chart_mismatches`` checks each key releasebot writes against the chart's ``values.yaml``:
it must exist there with the same YAML type. ``cluster_policy_driver`` makes the
ClusterPolicy's ``spec.driver`` from Helm values as the chart's
``templates/clusterpolicy.yaml`` does (only the keys releasebot writes), to be validated
against the ClusterPolicy CRD. ``with_defaults`` applies a CRD schema's defaults to an
object, as the API server does before it validates (v26.7 requires ``spec.default``, which
it defaults to false; releasebot leaves it out so the objects also apply to the 26.3 CRD).
The files and their provenance: ``tests/data/README.md``.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import jsonschema
import yaml

NVIDIA = Path(__file__).parents[1] / "data" / "nvidia"


def crd_schema(name: str) -> dict[str, Any]:
    """The ``openAPIV3Schema`` of ``nvidia.com_<name>.yaml``'s only version, checked as Draft 4."""
    crd = yaml.safe_load((NVIDIA / f"nvidia.com_{name}.yaml").read_text())
    (version,) = crd["spec"]["versions"]
    schema: dict[str, Any] = version["schema"]["openAPIV3Schema"]
    jsonschema.Draft4Validator.check_schema(schema)
    return schema


def chart_values() -> dict[str, Any]:
    values: dict[str, Any] = yaml.safe_load((NVIDIA / "gpu-operator-values.yaml").read_text())
    return values


def with_defaults(document: Any, schema: Mapping[str, Any]) -> Any:
    """``document`` with the schema's ``default`` filled in where a property is absent."""
    result = copy.deepcopy(document)
    _default(result, schema)
    return result


def validate_nvidia_driver(document: Any, schema: Mapping[str, Any]) -> None:
    """Raise ``jsonschema.ValidationError`` unless the API server would accept ``document``."""
    jsonschema.validate(with_defaults(document, schema), schema, cls=jsonschema.Draft4Validator)


def chart_mismatches(
    values: Mapping[str, Any], chart: Mapping[str, Any], path: str = ""
) -> list[str]:
    """Every key of ``values`` that the chart lacks or types differently, as ``a.b.c``."""
    problems = []
    for key, value in values.items():
        where = f"{path}{key}"
        if key not in chart:
            problems.append(f"{where}: not in the chart")
        elif isinstance(value, Mapping) and isinstance(chart[key], Mapping):
            problems += chart_mismatches(value, chart[key], where + ".")
        elif type(value) is not type(chart[key]):
            problems.append(f"{where}: {type(value).__name__}, chart {type(chart[key]).__name__}")
    return problems


def cluster_policy_driver(values: Mapping[str, Any]) -> dict[str, Any]:
    """The ClusterPolicy ``spec.driver`` the chart renders from ``values`` (chart defaults
    for what they leave out), for the keys releasebot writes."""
    chart = chart_values()["driver"]
    driver = {**chart, **values["driver"]}
    crd = {**chart["nvidiaDriverCRD"], **driver.get("nvidiaDriverCRD", {})}
    rendered: dict[str, Any] = {"enabled": driver["enabled"], "useNvidiaDriverCRD": crd["enabled"]}
    if not crd["enabled"]:
        rendered["usePrecompiled"] = driver["usePrecompiled"]
        for key in ("repository", "image", "version"):
            if driver[key]:
                rendered[key] = str(driver[key])
    return rendered


def _default(value: Any, schema: Mapping[str, Any]) -> None:
    if isinstance(value, dict):
        for key, sub in schema.get("properties", {}).items():
            if key not in value and "default" in sub:
                value[key] = copy.deepcopy(sub["default"])
            if key in value:
                _default(value[key], sub)
    elif isinstance(value, list) and "items" in schema:
        for item in value:
            _default(item, schema["items"])
