"""``releasebot operator-values``: the GPU Operator configuration that pulls releasebot's images.

``render_operator_values`` turns releasebot's repository, the driver to run and the parsed
fleet into the Helm values of the gpu-operator chart (``driver.repository``,
``driver.image``, ``driver.version``) and, when the GPU nodes run (or are about to reboot
into) more than one Flatcar version, one NVIDIADriver per version pool with a
``nodeSelector`` on NFD's ``system-os_release.ID``/``VERSION_ID`` labels, plus the chart
values that hand the driver over to those objects (``driver.nvidiaDriverCRD.enabled: true``,
``deployDefaultCR: false``, as gpu-operator's ``deployments/gpu-operator/values.yaml``
names them). A ClusterPolicy cannot serve a mixed fleet: it tags every node's image with
the OS of one node (see ``operator.py``), so meeting one is a warning that names the
operator version whose NVIDIADriver selects images per pool correctly.

``values_yaml`` and ``nvidia_drivers_yaml`` write them as YAML for ``helm -f`` and
``kubectl apply -f``. The writer is a small one of our own, on purpose: every string is
double-quoted with JSON escapes (valid YAML), so a version like ``580.95`` or a value like
``on`` can never turn into a float or a boolean. Deliberately not here: reading the fleet
or the operator's objects, and the command line (both are wiring).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from releasebot.domain.errors import ConfigError
from releasebot.domain.fleet import NFD_OS_ID, NFD_VERSION_ID, FleetNode, ParsedNode
from releasebot.domain.operator import MIN_MULTI_POOL_OPERATOR, DriverMode
from releasebot.domain.versions import FlatcarVersion

NVIDIA_DRIVER_API = "nvidia.com/v1alpha1"
NAME_PREFIX = "releasebot-flatcar-"

_PLAIN_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_./-]*")
_YAML_WORDS = frozenset({"y", "n", "yes", "no", "on", "off", "true", "false", "null", "~"})
Document = Mapping[str, object]


@dataclass(frozen=True)
class OperatorValues:
    """What to give the GPU Operator, and what the person applying it must know."""

    values: Document
    """Helm values for the gpu-operator chart."""
    nvidia_drivers: tuple[Document, ...]
    """One NVIDIADriver per Flatcar version pool; empty when a ClusterPolicy suffices."""
    versions: tuple[FlatcarVersion, ...]
    """The Flatcar versions GPU nodes run or will reboot into, oldest first."""
    warnings: tuple[str, ...]


def render_operator_values(
    *,
    repository: str,
    driver_version: str,
    nodes: Sequence[ParsedNode],
    mode: DriverMode | None = None,
) -> OperatorValues:
    """The configuration for ``driver_version`` from ``repository`` (``host/path/image``).

    ``mode`` is how the cluster's operator deploys drivers today, if known: a ClusterPolicy
    meeting a fleet of several Flatcar versions is warned about.
    """
    base, _, image = repository.rpartition("/")
    if not base or not image or "/" in image or ":" in image:
        raise ConfigError("registry.repository", f"{repository!r} is not host/path/image")
    gpu = [node for node in nodes if isinstance(node, FleetNode) and node.is_gpu]
    versions = sorted(
        {node.version for node in gpu}
        | {node.pending_version for node in gpu if node.pending_version is not None}
    )
    warnings: list[str] = []
    if not gpu:
        warnings.append("no Flatcar GPU node found: these values assume one Flatcar version")
    unlabelled = sorted(node.name for node in gpu if not node.has_os_labels)
    if unlabelled:
        shown = ", ".join(unlabelled[:5]) + (", ..." if len(unlabelled) > 5 else "")
        warnings.append(
            f"{len(unlabelled)} GPU node(s) lack NFD os_release labels ({shown}): the "
            "operator computes no image tag for them until NFD labels them"
        )
    driver: dict[str, object] = {"repository": base, "image": image, "version": driver_version}
    if len(versions) <= 1 and mode is not DriverMode.NVIDIA_DRIVER:
        return OperatorValues({"driver": driver}, (), tuple(versions), tuple(warnings))
    if mode is DriverMode.CLUSTER_POLICY:
        shown = ", ".join(version.text for version in versions)
        warnings.append(
            f"the cluster's ClusterPolicy gives all GPU nodes one OS tag, but they run or reboot "
            f"into {len(versions)} Flatcar versions ({shown}): apply these NVIDIADrivers and "
            f"values; multi-pool image selection needs GPU Operator >= {MIN_MULTI_POOL_OPERATOR}"
        )
    driver["nvidiaDriverCRD"] = {"enabled": True, "deployDefaultCR": False}
    pools = tuple(_nvidia_driver(version, base, image, driver_version) for version in versions)
    return OperatorValues({"driver": driver}, pools, tuple(versions), tuple(warnings))


def nvidia_driver_name(version: FlatcarVersion) -> str:
    """``releasebot-flatcar-4593-2-5``: a DNS label, as object and DaemonSet names need."""
    return NAME_PREFIX + version.text.replace(".", "-")


def values_yaml(result: OperatorValues) -> str:
    """The Helm values as one YAML document, warnings and pools named in comments."""
    lines = ["# GPU Operator Helm values for releasebot's driver images (helm -f this-file)."]
    if result.nvidia_drivers:
        lines.append(
            f"# Driver pools: {len(result.nvidia_drivers)} NVIDIADriver objects, one per Flatcar "
            f"version (GPU Operator >= {MIN_MULTI_POOL_OPERATOR})."
        )
    lines += [f"# warning: {warning}" for warning in result.warnings]
    return "\n".join(lines) + "\n" + to_yaml(result.values)


def nvidia_drivers_yaml(result: OperatorValues) -> str:
    """The NVIDIADriver objects as a YAML stream (``kubectl apply -f``); empty if none."""
    return "".join("---\n" + to_yaml(document) for document in result.nvidia_drivers)


def to_yaml(document: Document) -> str:
    """``document`` (mappings, lists, strings, booleans, integers) as block-style YAML."""
    return "\n".join(_lines(document, 0)) + "\n"


def _nvidia_driver(version: FlatcarVersion, base: str, image: str, driver: str) -> Document:
    return {
        "apiVersion": NVIDIA_DRIVER_API,
        "kind": "NVIDIADriver",
        "metadata": {
            "name": nvidia_driver_name(version),
            "labels": {"app.kubernetes.io/managed-by": "releasebot"},
        },
        "spec": {
            "driverType": "gpu",
            "repository": base,
            "image": image,
            "version": driver,
            "nodeSelector": {NFD_OS_ID: "flatcar", NFD_VERSION_ID: version.text},
        },
    }


def _lines(value: object, indent: int) -> list[str]:
    pad = "  " * indent
    if isinstance(value, Mapping):
        if not value:
            return [pad + "{}"]
        lines: list[str] = []
        for key, item in value.items():
            head = f"{pad}{_key(key)}:"
            if _is_block(item):
                lines.append(head)
                lines += _lines(item, indent + 1)
            else:
                lines.append(f"{head} {_scalar(item)}")
        return lines
    if isinstance(value, list | tuple):
        if not value:
            return [pad + "[]"]
        lines = []
        for item in value:
            if _is_block(item):
                nested = _lines(item, indent + 1)
                lines.append(f"{pad}- {nested[0].lstrip()}")
                lines += nested[1:]
            else:
                lines.append(f"{pad}- {_scalar(item)}")
        return lines
    return [pad + _scalar(value)]


def _is_block(value: object) -> bool:
    return isinstance(value, Mapping | list | tuple) and len(value) > 0


def _key(key: object) -> str:
    text = str(key)
    if _PLAIN_KEY.fullmatch(text) and text.lower() not in _YAML_WORDS:
        return text
    return json.dumps(text)


def _scalar(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if value is None:
        return "null"
    if isinstance(value, Mapping):
        return "{}"
    if isinstance(value, list | tuple):
        return "[]"
    return json.dumps(str(value))
