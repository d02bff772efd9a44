"""``releasebot operator-values``: the GPU Operator configuration that pulls releasebot's images.

``render_operator_values`` turns releasebot's repository, the driver of each pool
(``operator_pools.choose_drivers``) and the parsed fleet into the Helm values of the
gpu-operator chart (``driver.repository``, ``driver.image``, ``driver.version``, and
``driver.usePrecompiled: false``, since releasebot builds ``<driver>-flatcar<version>``
images, not precompiled ones) and, when the GPU nodes run (or are about to reboot into)
more than one OS version, one NVIDIADriver per Flatcar version pool with a ``nodeSelector``
on NFD's ``system-os_release.ID``/``VERSION_ID`` labels, plus the chart values that hand the
driver over to those objects (``driver.nvidiaDriverCRD.enabled: true``, ``deployDefaultCR:
false``, as gpu-operator's ``deployments/gpu-operator/values.yaml`` names them). GPU nodes
on other OSes keep the driver they have through pools of their own
(``operator_pools.keep_pools``, which says why not the chart's default NVIDIADriver). A
ClusterPolicy cannot serve a mixed fleet: it tags every node's image with the OS of one
node (see ``operator.py``), so meeting one is a warning that names the operator version
whose NVIDIADriver selects images per pool correctly.

It never proposes a node a pool it cannot use without saying so: a Flatcar version no feed
lists gets no pool (no image can ever be built for it), and every tag the proposal makes
nodes pull that is not published yet is named, with its nodes (the CLI's ``--strict``
refuses instead). The chart's objects are checked against GPU Operator v26.7.0's CRDs and
``values.yaml`` in the tests.

``values_yaml`` and ``nvidia_drivers_yaml`` write them as YAML for ``helm -f`` and
``kubectl apply -f``, warnings and notes as comment lines. The writer is a small one of our
own, on purpose: every string is double-quoted with JSON escapes (valid YAML), so a version
like ``580.95`` or a value like ``on`` can never turn into a float or a boolean.
Deliberately not here: reading the fleet, the operator's objects or the store, and the
command line (all wiring).
"""

from __future__ import annotations

import json
import re
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

from releasebot.domain.fleet.nodes import (
    NFD_OS_ID,
    NFD_VERSION_ID,
    FleetNode,
    IgnoredNode,
    ParsedNode,
)
from releasebot.domain.fleet.operator import MIN_MULTI_POOL_OPERATOR, DriverMode, OperatorView
from releasebot.domain.fleet.operator_pools import (
    KeptPool,
    keep_pools,
    some_names,
    superseded,
    unlabelled_others,
)
from releasebot.domain.shared.errors import ConfigError
from releasebot.domain.shared.versions import FlatcarVersion

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
    """One NVIDIADriver per Flatcar version pool, then one per non-Flatcar OS version
    keeping its driver; empty when a ClusterPolicy suffices."""
    versions: tuple[FlatcarVersion, ...]
    """The Flatcar versions GPU nodes run or will reboot into, oldest first."""
    warnings: tuple[str, ...]
    unpublished: tuple[str, ...] = ()
    """Tags these values make nodes pull that are not published and verified yet."""
    notes: tuple[str, ...] = ()
    """How the proposal was made, for comment lines (not warnings)."""


def render_operator_values(
    *,
    repository: str,
    driver_version: str,
    nodes: Sequence[ParsedNode],
    mode: DriverMode | None = None,
    view: OperatorView | None = None,
    drivers: Mapping[FlatcarVersion, str] | None = None,
    listed: Collection[FlatcarVersion] | None = None,
    published: Collection[str] | None = None,
    warnings: Sequence[str] = (),
    notes: Sequence[str] = (),
) -> OperatorValues:
    """The configuration for ``driver_version`` from ``repository`` (``host/path/image``).

    ``mode`` is how the cluster's operator deploys drivers today and ``view`` its objects
    (``None``: unreadable): a ClusterPolicy meeting a fleet of several OS tags is warned
    about, and non-Flatcar GPU nodes keep their driver (``operator_pools.keep_pools``).
    ``drivers`` overrides ``driver_version`` per Flatcar version (what a pool runs today).
    ``listed`` holds the Flatcar versions some feed lists (``None``: unknown): no pool is
    written for another. ``published`` holds the published tags (``None``: not checked):
    every other tag the result makes nodes pull is named. ``warnings`` and ``notes`` (comment
    lines: how the driver was chosen) come first.
    """
    base, _, image = repository.rpartition("/")
    if not base or not image or "/" in image or ":" in image:
        raise ConfigError("registry.repository", f"{repository!r} is not host/path/image")
    per_version = drivers or {}
    gpu = [node for node in nodes if isinstance(node, FleetNode) and node.is_gpu]
    users: dict[FlatcarVersion, list[str]] = {}
    for node in gpu:
        for version in (node.version, node.pending_version):
            if version is not None:
                users.setdefault(version, []).append(node.name)
    every = sorted(users)
    unlisted = [version for version in every if listed is not None and version not in listed]
    versions = [version for version in every if version not in unlisted]
    said = list(warnings)
    if not gpu:
        said.append("no Flatcar GPU node found: these values assume one Flatcar version")
    unlabelled = sorted(node.name for node in gpu if not node.has_os_labels)
    if unlabelled:
        shown = ", ".join(unlabelled[:5]) + (", ..." if len(unlabelled) > 5 else "")
        said.append(
            f"{len(unlabelled)} GPU node(s) lack NFD os_release labels ({shown}): the "
            "operator computes no image tag for them until NFD labels them"
        )
    for version in unlisted:
        said.append(
            f"Flatcar {version} is in no feed releasebot reads, so no image can be built for "
            f"it: no NVIDIADriver is written for it (GPU nodes running or rebooting into it: "
            f"{some_names(users[version])})"
        )
    foreign_tags = {
        node.os_tag
        for node in nodes
        if isinstance(node, IgnoredNode) and node.is_gpu and node.os_tag
    }
    driver: dict[str, object] = {
        "repository": base,
        "image": image,
        "version": per_version.get(versions[0], driver_version)
        if len(versions) == 1
        else driver_version,
        "usePrecompiled": False,
    }
    pooled = len(every) + len(foreign_tags) > 1 or mode is DriverMode.NVIDIA_DRIVER
    tags = {
        version: f"{per_version.get(version, driver_version)}-flatcar{version}"
        for version in versions
    }
    if not pooled:
        unlabelled_other = unlabelled_others(nodes)
        if unlabelled_other:
            said.append(
                f"GPU node(s) releasebot builds nothing for lack NFD os_release labels "
                f"({some_names(unlabelled_other)}): a ClusterPolicy tags their image with "
                "another node's OS; label them (NFD) and run this again"
            )
        missing = _unpublished(tags, users, published, said)
        return OperatorValues(
            {"driver": driver}, (), tuple(versions), tuple(said), missing, tuple(notes)
        )
    if mode is DriverMode.CLUSTER_POLICY:
        shown = ", ".join([*(version.text for version in every), *sorted(foreign_tags)])
        said.append(
            f"the cluster's ClusterPolicy gives all GPU nodes one OS tag, but they run or "
            f"reboot into {len(every) + len(foreign_tags)} OS versions ({shown}): apply these "
            f"NVIDIADrivers and values; multi-pool image selection needs GPU Operator >= "
            f"{MIN_MULTI_POOL_OPERATOR}"
        )
    driver["nvidiaDriverCRD"] = {"enabled": True, "deployDefaultCR": False}
    pools = [
        _nvidia_driver(version, base, image, per_version.get(version, driver_version))
        for version in versions
    ]
    kept, kept_warnings = keep_pools(nodes, view, mode)
    said += kept_warnings
    notes = [*notes, DEFAULT_CR_NOTE]
    for pool in kept:
        if pool.os_id == "flatcar" and pool.version_id in {v.text for v in tags}:
            said.append(
                f"GPU node(s) {some_names(pool.nodes)} share the Flatcar pool of "
                f"{pool.version_id} though releasebot builds nothing for them"
            )
            continue
        pools.append(_kept_driver(pool))
        notes.append(
            f"{pool.name} keeps {pool.source.label}'s driver {pool.source.path!s} for "
            f"{some_names(pool.nodes)} ({pool.os_id}{pool.version_id})"
        )
    names = {nvidia_driver_name(version) for version in versions} | {p.name for p in kept}
    clash = superseded(nodes, view, names)
    if clash is not None:
        said.append(clash)
    missing = _unpublished(tags, users, published, said)
    return OperatorValues(
        {"driver": driver}, tuple(pools), tuple(versions), tuple(said), missing, tuple(notes)
    )


DEFAULT_CR_NOTE = (
    "deployDefaultCR: false, and GPU nodes on other OSes keep their driver through an "
    "NVIDIADriver of their own (releasebot-keep-*): the chart's default NVIDIADriver would "
    "pull these values (releasebot's Flatcar images) on every OS, and before GPU Operator "
    "26.7 it selects every GPU node, which the operator rejects beside the pools "
    "(nodeSelector matches labels on equality only)"
)
"""Why the chart's default NVIDIADriver is not deployed (``operator_pools`` has the sources)."""


def _unpublished(
    tags: Mapping[FlatcarVersion, str],
    users: Mapping[FlatcarVersion, Sequence[str]],
    published: Collection[str] | None,
    said: list[str],
) -> tuple[str, ...]:
    """The tags not published yet, each named in ``said`` with the nodes that would pull it."""
    if published is None:
        return ()
    missing = []
    for version, tag in sorted(tags.items()):
        if tag not in published:
            missing.append(tag)
            said.append(
                f"{tag} is not published and verified yet: GPU nodes running or rebooting "
                f"into Flatcar {version} ({some_names(users[version])}) would get "
                "no driver until it is (releasebot fleet shows its state; --strict refuses)"
            )
    return tuple(missing)


def nvidia_driver_name(version: FlatcarVersion) -> str:
    """``releasebot-flatcar-4593-2-5``: a DNS label, as object and DaemonSet names need."""
    return NAME_PREFIX + version.text.replace(".", "-")


def values_yaml(result: OperatorValues) -> str:
    """The Helm values as one YAML document, warnings and pools named in comments."""
    lines = ["# GPU Operator Helm values for releasebot's driver images (helm -f this-file)."]
    if result.nvidia_drivers:
        lines.append(
            f"# Driver pools: {len(result.nvidia_drivers)} NVIDIADriver objects, one per OS "
            f"version (GPU Operator >= {MIN_MULTI_POOL_OPERATOR})."
        )
    return "\n".join(lines + _comments(result)) + "\n" + to_yaml(result.values)


def nvidia_drivers_yaml(result: OperatorValues) -> str:
    """The NVIDIADriver objects as a YAML stream (``kubectl apply -f``); empty if none."""
    if not result.nvidia_drivers:
        return ""
    head = ["# NVIDIADriver pools for releasebot's driver images (kubectl apply -f this-file)."]
    documents = "".join("---\n" + to_yaml(document) for document in result.nvidia_drivers)
    return "\n".join(head + _comments(result)) + "\n" + documents


def _comments(result: OperatorValues) -> list[str]:
    return [f"# {note}" for note in result.notes] + [
        f"# warning: {warning}" for warning in result.warnings
    ]


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
            "usePrecompiled": False,
            "nodeSelector": {NFD_OS_ID: "flatcar", NFD_VERSION_ID: version.text},
        },
    }


def _kept_driver(pool: KeptPool) -> Document:
    source = pool.source
    spec: dict[str, object] = {"driverType": "gpu"}
    if source.repository:
        spec["repository"] = source.repository
    spec["image"] = source.image
    if source.version:
        spec["version"] = source.version
    spec["usePrecompiled"] = source.precompiled
    spec["nodeSelector"] = pool.node_selector
    return {
        "apiVersion": NVIDIA_DRIVER_API,
        "kind": "NVIDIADriver",
        "metadata": {"name": pool.name, "labels": {"app.kubernetes.io/managed-by": "releasebot"}},
        "spec": spec,
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
