"""What ``releasebot operator-values`` proposes per pool: which driver, and who keeps theirs.

A proposal must not take a GPU node's driver away, so it starts from what the cluster runs:

- ``choose_drivers``: the driver each Flatcar version pool pulls. A driver named by hand
  (``--driver``) wins everywhere. Otherwise, what the GPU Operator gives the pool's nodes
  today (``operator.resolve_images``) when that object pulls from releasebot's repository
  and names a driver release (not a branch, not a digest); a pool no node runs yet (a
  version nodes will reboot into) takes what the nodes rebooting into it run, else the
  newest driver the cluster runs from releasebot's repository; when the cluster runs none,
  the newest driver releasebot plans. Several drivers in use are named in a warning.
- ``keep_pools``: the GPU nodes releasebot builds nothing for (Ubuntu, RHEL...) keep the
  image they get today through an NVIDIADriver of their own, one per NFD ID+VERSION_ID,
  because the Flatcar pools are rendered with ``deployDefaultCR: false``. Why not keep
  the chart's default NVIDIADriver instead (checked in NVIDIA/gpu-operator v26.7.0): the
  chart builds it from the same ``driver.*`` Helm values that point at releasebot's Flatcar
  images with ``usePrecompiled: false`` (``deployments/gpu-operator/templates/
  nvidiadriver.yaml``), so an Ubuntu node would pull ``<releasebot>:<driver>-ubuntu22.04``,
  which nobody builds; and only from 26.7 is it a fallback (``spec.default: true``, nodes
  no other NVIDIADriver selects: ``internal/nvidiadriver/nvidiadriver.go``,
  ``AssignOwners``). Before 26.7 it has no nodeSelector, so it selects every GPU node and
  the validator rejects it beside any pool (``internal/validator/validator.go``: "conflicting
  NVIDIADriver NodeSelectors"); nodeSelector is a plain label map matched on equality
  (``labels.SelectorFromSet``), so it cannot be told "not Flatcar". A pool of their own
  works on 26.3 and 26.7 alike and keeps each OS's own image and precompiled setting.

Which object serves a non-Flatcar node today follows the operator: the ClusterPolicy when
it deploys drivers itself; with ``useNvidiaDriverCRD``, the one NVIDIADriver whose
nodeSelector matches the node's labels, else one without a nodeSelector (before 26.7 it
selects every GPU node; from 26.7 the default one is the fallback).

Deliberately not here: the operator's rules for Flatcar nodes (``operator.py``), rendering
objects and YAML (``operator_values.py``), reading the cluster or the store (wiring).
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

from releasebot.domain.fleet.nodes import (
    GPU_PRESENT,
    NFD_OS_ID,
    NFD_VERSION_ID,
    FleetNode,
    IgnoredNode,
    ParsedNode,
)
from releasebot.domain.fleet.operator import (
    DriverMode,
    DriverSource,
    OperatorView,
    SourceKind,
    resolve_images,
)
from releasebot.domain.shared.errors import ConfigError
from releasebot.domain.shared.versions import DriverVersion, FlatcarVersion

KEEP_PREFIX = "releasebot-keep-"
NAMES_SHOWN = 5
"""Nodes named in one warning line; the rest are counted."""
_NOT_DNS = re.compile(r"[^a-z0-9]+")


@dataclass(frozen=True)
class DriverChoice:
    """The driver of every Flatcar version pool, and where it came from."""

    default: str
    """The driver of a pool nothing else decides, and of the Helm values."""
    by_version: Mapping[FlatcarVersion, str]
    """What the pool of a version runs today, where that differs from nothing."""
    origin: str
    """``--driver``, ``cluster`` (what the GPU Operator runs) or ``plan`` (the newest planned)."""
    warnings: tuple[str, ...] = ()

    @property
    def why(self) -> str:
        """One line saying which driver and why, for a comment."""
        if self.origin == "--driver":
            return f"driver {self.default}: named with --driver"
        if self.origin == "cluster":
            return f"driver {self.default}: what the GPU Operator runs from releasebot's repository"
        return f"driver {self.default}: the newest releasebot plans (the cluster runs none of its)"


@dataclass(frozen=True)
class KeptPool:
    """GPU nodes of one non-Flatcar OS version that keep the driver image they get today."""

    os_id: str
    version_id: str
    """NFD's ``system-os_release.ID`` and ``VERSION_ID`` label values, exactly as on the nodes."""
    source: DriverSource
    """The GPU Operator object that gives them their driver today."""
    nodes: tuple[str, ...]
    name: str
    """``releasebot-keep-ubuntu22-04``: a DNS label, as object and DaemonSet names need."""

    @property
    def node_selector(self) -> dict[str, str]:
        return {NFD_OS_ID: self.os_id, NFD_VERSION_ID: self.version_id}


def choose_drivers(
    nodes: Sequence[ParsedNode],
    view: OperatorView | None,
    repository: str,
    *,
    asked: str | None = None,
    planned: Sequence[DriverVersion] = (),
) -> DriverChoice:
    """The driver per Flatcar version pool, by the rules in the module docstring.

    ``repository`` is releasebot's ``registry.repository`` (``host/path/image``); ``asked``
    what the person named; ``planned`` the drivers of the plan's targets. Raises
    ``ConfigError`` for an ``asked`` that is not a driver release, or when nothing at all
    names a driver.
    """
    if asked is not None:
        if not DriverVersion.is_valid(asked):
            raise ConfigError(
                "--driver",
                f"{asked[:40]!r} is not a driver release like 580.178.04: releasebot builds "
                "<driver>-flatcar<version> images of releases only",
            )
        return DriverChoice(asked, {}, "--driver")
    running: dict[str, list[str]] = {}  # driver -> the nodes that run it from our repository
    by_node: dict[str, str] = {}
    if view is not None:
        for image in resolve_images(nodes, view, repository).images:
            if image.ours and image.reference is not None and DriverVersion.is_valid(image.version):
                running.setdefault(image.version, []).append(image.node)
                by_node[image.node] = image.version
    if not running:
        if not planned:
            raise ConfigError("--driver", "no driver is planned yet: name one (e.g. 580.178.04)")
        return DriverChoice(max(planned).text, {}, "plan")
    newest = max(running, key=DriverVersion.parse)
    gpu = [node for node in nodes if isinstance(node, FleetNode) and node.is_gpu]
    runs: dict[FlatcarVersion, DriverVersion] = {}
    reboots: dict[FlatcarVersion, DriverVersion] = {}
    for node in gpu:
        driver = by_node.get(node.name)
        if driver is None:
            continue
        for pools, version in ((runs, node.version), (reboots, node.pending_version)):
            if version is not None:
                pools[version] = max(
                    pools.get(version, DriverVersion.parse(driver)), DriverVersion.parse(driver)
                )
    # what a pool's own nodes run first, then what the nodes rebooting into it run
    by_version = {version: driver.text for version, driver in {**reboots, **runs}.items()}
    warnings: list[str] = []
    if len(running) > 1:
        shown = "; ".join(
            f"{driver} on {some_names(names)}"
            for driver, names in sorted(running.items(), key=lambda item: item[0])
        )
        warnings.append(
            f"the cluster runs {len(running)} drivers from releasebot's repository ({shown}): "
            f"each Flatcar pool keeps what its nodes run, a pool no node runs yet gets the "
            f"newest, {newest}"
        )
    return DriverChoice(newest, by_version, "cluster", tuple(warnings))


def keep_pools(
    nodes: Sequence[ParsedNode], view: OperatorView | None, mode: DriverMode | None
) -> tuple[tuple[KeptPool, ...], tuple[str, ...]]:
    """A pool per non-Flatcar OS version of the GPU nodes, keeping the image they get today;
    and a warning for every such node that cannot have one (no NFD labels, no driver known)."""
    others = sorted(
        (node for node in nodes if isinstance(node, IgnoredNode) and node.is_gpu),
        key=lambda node: node.name,
    )
    warnings: list[str] = []
    unlabelled = unlabelled_others(nodes)
    if unlabelled:
        warnings.append(
            f"GPU node(s) releasebot builds nothing for lack NFD os_release labels "
            f"({some_names(unlabelled)}): no NVIDIADriver can select them, so with "
            "deployDefaultCR: false they get no driver; label them (NFD) and run this again"
        )
    groups: dict[tuple[str, str], list[tuple[IgnoredNode, DriverSource | None, str]]] = {}
    for node in others:
        labels = _os_labels(node)
        if labels is not None:
            source, why = _source_of(node, view, mode)
            groups.setdefault(labels, []).append((node, source, why))
    pools: list[KeptPool] = []
    taken: set[str] = set()
    for (os_id, version_id), members in sorted(groups.items()):
        names = [node.name for node, _, _ in members]
        sources = {source for _, source, _ in members if source is not None}
        if not sources:
            why = members[0][2]
            warnings.append(
                f"GPU node(s) on {os_id}{version_id} ({some_names(names)}) get no driver from the "
                f"GPU Operator today ({why}): no NVIDIADriver is written for them"
            )
            continue
        chosen = min(sources, key=lambda source: source.label)
        if len(sources) > 1:
            shown = ", ".join(sorted(source.label for source in sources))
            warnings.append(
                f"GPU nodes on {os_id}{version_id} ({some_names(names)}) get their driver from "
                f"{len(sources)} objects ({shown}): their pool keeps {chosen.label}'s"
            )
        name = _pool_name(f"{os_id}{version_id}", taken)
        taken.add(name)
        pools.append(KeptPool(os_id, version_id, chosen, tuple(names), name))
    return tuple(pools), tuple(warnings)


def unlabelled_others(nodes: Sequence[ParsedNode]) -> list[str]:
    """The GPU nodes releasebot builds nothing for that lack NFD's os_release labels: no
    NVIDIADriver can select them, and a ClusterPolicy tags their image with another's OS."""
    return sorted(
        node.name
        for node in nodes
        if isinstance(node, IgnoredNode) and node.is_gpu and _os_labels(node) is None
    )


def superseded(
    nodes: Sequence[ParsedNode], view: OperatorView | None, proposed: Collection[str]
) -> str | None:
    """A warning naming the cluster's NVIDIADrivers not in ``proposed`` that select a GPU
    node: beside the proposed pools they select the same nodes, which the operator rejects."""
    if view is None or not view.nvidia_drivers:
        return None
    gpu = [node for node in nodes if node.is_gpu]
    clashing = sorted(
        driver.name
        for driver in view.nvidia_drivers
        if driver.driver_type == "gpu"
        and driver.name not in proposed
        and any(_selects(driver, node) for node in gpu)
    )
    if not clashing:
        return None
    return (
        f"NVIDIADriver(s) {some_names(clashing)} select GPU nodes these pools select too: "
        "delete them right after applying these; the operator reconciles no NVIDIADriver "
        "while two select one node"
    )


def some_names(names: Collection[str]) -> str:
    """A few of ``names`` for a message, sorted, the rest counted."""
    unique = sorted(set(names))
    more = len(unique) - NAMES_SHOWN
    return ", ".join(unique[:NAMES_SHOWN]) + (f" and {more} more" if more > 0 else "")


def _selects(driver: DriverSource, node: ParsedNode) -> bool:
    labels: Mapping[str, str] = {**node.labels, GPU_PRESENT: "true"}
    return all(labels.get(key) == value for key, value in driver.node_selector)


def _pool_name(words: str, taken: Collection[str]) -> str:
    base = (KEEP_PREFIX + _NOT_DNS.sub("-", words.lower()).strip("-"))[:60].rstrip("-")
    name, number = base, 1
    while name in taken:  # two label values that differ only in case or punctuation
        number += 1
        name = f"{base}-{number}"
    return name


def _os_labels(node: IgnoredNode) -> tuple[str, str] | None:
    os_id, version_id = node.labels.get(NFD_OS_ID), node.labels.get(NFD_VERSION_ID)
    return (os_id, version_id) if os_id and version_id else None


def _source_of(
    node: IgnoredNode, view: OperatorView | None, mode: DriverMode | None
) -> tuple[DriverSource | None, str]:
    """The object that gives ``node`` its driver today, or why none does."""
    if view is None:
        return None, "the GPU Operator's objects could not be read"
    if mode is DriverMode.CLUSTER_POLICY and view.cluster_policies:
        return min(view.cluster_policies, key=lambda source: source.name), ""
    if mode is not DriverMode.NVIDIA_DRIVER:
        return None, "no ClusterPolicy deploys drivers" if mode else "the operator is unknown"
    labels: Mapping[str, str] = {**node.labels, GPU_PRESENT: "true"}
    drivers = [
        d
        for d in view.nvidia_drivers or ()
        if d.kind is SourceKind.NVIDIA_DRIVER and d.driver_type == "gpu"
    ]
    selecting = [d for d in drivers if d.node_selector]
    chosen = [d for d in selecting if all(labels.get(k) == v for k, v in d.node_selector)]
    if not chosen:
        chosen = [d for d in drivers if not d.node_selector]
    if len(chosen) != 1:
        names = ", ".join(sorted(d.name for d in chosen))
        return None, f"selected by several NVIDIADrivers ({names})" if chosen else "none selects it"
    return chosen[0], ""
