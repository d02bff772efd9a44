"""The operator view: which driver image the NVIDIA GPU Operator makes each GPU node pull.

``parse_cluster_policy`` and ``parse_nvidia_driver`` read the driver image a ClusterPolicy
(``nvidia.com/v1``, ``spec.driver``) or an NVIDIADriver (``nvidia.com/v1alpha1``, ``spec``)
configures; ``resolve_images`` applies the operator's rules to the parsed fleet and says,
per Flatcar GPU node, the exact reference the operator gives it, whether the repository is
releasebot's own (a foreign one is reported, never built for or pushed to), and why a node
gets no usable image. The rules, as NVIDIA/gpu-operator implements them:

- Image path (``internal/image/image.go``, ``ImagePath``): ``<repository>/<image>:<version>``;
  ``<repository>/<image>@<version>`` when the version starts with ``sha256:``; ``<image>``
  alone when repository and version are both empty.
- OS suffix: ``-<ID><VERSION_ID>`` from the node's NFD labels (``flatcar4593.2.5``), left
  off when the path contains ``sha256:`` (``api/nvidia/v1alpha1/nvidiadriver_types.go``,
  ``GetImagePath``; ``controllers/object_controls.go``, ``resolveDriverTag``).
- Precompiled: ``<repository>/<image>:<version>-<kernel-version.full>-<os tag>``
  (``GetPrecompiledImagePath``); an NVIDIADriver refuses a digest there, a ClusterPolicy
  builds a broken ``...:sha256:...-<kernel>`` reference.
- ClusterPolicy: ONE OS tag for every GPU node, taken from the first Node its List of
  ``nvidia.com/gpu.present=true`` returns (``kernelFullVersion`` in
  ``controllers/object_controls.go``; ``getGPUNodeOSTag`` with ``client.Limit(1)`` in newer
  ``controllers/state_manager.go``). That List is served by controller-runtime's informer
  cache (``cmd/gpu-operator/main.go`` uses ``mgr.GetClient()``), whose ``CacheReader.List``
  returns client-go's thread-safe map in Go map order (``pkg/cache/internal/
  cache_reader.go``): "first" is neither name order nor stable between reconciles. On a
  fleet with two OS tags any GPU node may be given either; releasebot reports every
  reference such a node may pull.
- NVIDIADriver (``internal/state/nodepool.go``, ``getNodePools``): the GPU nodes matching
  its ``nodeSelector`` (all GPU nodes when empty), pooled by their NFD ID+VERSION_ID (and
  kernel when precompiled); a node without those labels is skipped with a warning, so it
  gets no driver. Two NVIDIADrivers selecting one node are rejected (``conflicting
  NVIDIADriver NodeSelectors``). NVIDIADrivers only act when the ClusterPolicy sets
  ``spec.driver.useNvidiaDriverCRD`` (``controllers/nvidiadriver_controller.go``).

- The default NVIDIADriver (operator v26.7, ``spec.default: true``, no ``nodeSelector``)
  serves only the GPU nodes no other NVIDIADriver selects, and is left out of the conflict
  check (``internal/nvidiadriver/nvidiadriver.go``, ``internal/validator/validator.go``).

Deliberately not here: listing the objects (``releasebot/fleet/``), rendering a
configuration (``operator_values.py``), vGPU driver types.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from types import MappingProxyType

from releasebot.domain.fleet.nodes import (
    GPU_PRESENT,
    NFD_KERNEL,
    NFD_VERSION_ID,
    FleetNode,
    FluoState,
    ParsedNode,
)
from releasebot.domain.shared.untrusted import clean, escaped, quoted
from releasebot.domain.shared.versions import FlatcarVersion, is_oci_tag

_VERSION = re.compile(r"sha256:[0-9a-f]{64}|[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}")
"""A driver ``version`` the operator can put in a tag (a release or a branch) or a digest."""
_REFERENCE_PART = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:/@-]{0,511}")
"""A repository (``host[:port]/path``) or an image name, as a reference may hold them."""
MIN_MULTI_POOL_OPERATOR = "26.3.0"
"""The first GPU Operator whose NVIDIADriver picks the right image on multi-pool clusters."""
REFERENCE_MAX_CHARS = 512
_DIGEST = "sha256:"


class SourceKind(enum.StrEnum):
    CLUSTER_POLICY = "ClusterPolicy"
    NVIDIA_DRIVER = "NVIDIADriver"


@dataclass(frozen=True)
class DriverSource:
    """The driver image one ClusterPolicy or NVIDIADriver configures."""

    kind: SourceKind
    name: str
    repository: str
    image: str
    version: str
    precompiled: bool = False
    node_selector: tuple[tuple[str, str], ...] = ()
    driver_type: str = "gpu"
    enabled: bool = True
    """ClusterPolicy ``spec.driver.enabled`` (default true): the operator deploys drivers."""
    defers_to_crd: bool = False
    """ClusterPolicy ``spec.driver.useNvidiaDriverCRD``: NVIDIADriver objects decide."""
    default: bool = False
    """NVIDIADriver ``spec.default`` (v26.7): the fallback for nodes no other selects."""
    problem: str | None = None
    """Why no image can be named from this object at all: its version is not a driver
    version, or its repository or image is not one (as written, escaped: never cleaned
    into a value that looks valid). Every node it decides for gets this problem."""

    @property
    def label(self) -> str:
        return f"{self.kind}/{self.name}"

    @property
    def path(self) -> str:
        """``ImagePath``: what the operator appends the node's suffix to."""
        if not self.repository and not self.version:
            return self.image
        separator = "@" if self.version.startswith(_DIGEST) else ":"
        return f"{self.repository}/{self.image}{separator}{self.version}"

    def is_ours(self, repository: str) -> bool:
        """True when this source pulls from releasebot's repository (``host/path``): read
        from the repository and image as written, never from the version (which may hold
        a ``/`` or a ``:``)."""
        if self.repository or self.version:
            base = f"{self.repository}/{self.image}"
        else:  # the image alone is the whole reference
            base = self.image.split("@", 1)[0]
            if ":" in base.rsplit("/", 1)[-1]:
                base = base.rsplit(":", 1)[0]
        return _normal(base) == _normal(repository)

    def reference(self, os_tag: str, kernel: str | None) -> tuple[str | None, str | None]:
        """The reference a node with ``os_tag`` (and ``kernel``) pulls, or a problem."""
        if self.problem is not None:
            return None, self.problem
        if not self.image:
            return None, f"{self.label} names no driver image"
        if not self.precompiled:
            path = self.path
            reference = path if _DIGEST in path else f"{path}-{os_tag}"
        elif kernel is None:
            return None, "usePrecompiled needs the node's NFD kernel-version.full label"
        elif self.kind is SourceKind.NVIDIA_DRIVER and _DIGEST in self.path:
            return None, f"{self.label} sets usePrecompiled with a digest: the operator refuses it"
        elif self.kind is SourceKind.NVIDIA_DRIVER:
            reference = f"{self.path}-{kernel}-{os_tag}"
        else:
            if not self.repository and not self.version:
                head = f"{self.image}-{kernel}"
            else:
                head = f"{self.repository}/{self.image}:{self.version}-{kernel}"
            reference = head if _DIGEST in head else f"{head}-{os_tag}"
        tag = reference.rsplit("/", 1)[-1].partition(":")[2]
        if "@" not in reference and not is_oci_tag(tag):
            return None, f"{quoted(reference, limit=120)} is not a valid image reference"
        return reference, None


@dataclass(frozen=True)
class CrdAbsent:
    """The API server serves no such resource: its CustomResourceDefinition is not installed."""

    resource: str
    """``plural.group``, e.g. ``clusterpolicies.nvidia.com``."""


@dataclass(frozen=True)
class OperatorView:
    """The GPU Operator's objects; ``None`` for a kind whose CRD is not installed."""

    cluster_policies: tuple[DriverSource, ...] | None
    nvidia_drivers: tuple[DriverSource, ...] | None

    @classmethod
    def of(
        cls,
        cluster_policies: tuple[DriverSource, ...] | CrdAbsent,
        nvidia_drivers: tuple[DriverSource, ...] | CrdAbsent,
    ) -> OperatorView:
        """The view from what a ``FleetSource`` answered."""
        return cls(
            None if isinstance(cluster_policies, CrdAbsent) else cluster_policies,
            None if isinstance(nvidia_drivers, CrdAbsent) else nvidia_drivers,
        )


class DriverMode(enum.StrEnum):
    NONE = "none"
    """No ClusterPolicy: the operator is not installed or not configured."""
    DISABLED = "disabled"
    """The ClusterPolicy sets ``driver.enabled: false``: drivers come from elsewhere."""
    CLUSTER_POLICY = "cluster-policy"
    NVIDIA_DRIVER = "nvidia-driver"


@dataclass(frozen=True)
class NodeImage:
    """What the operator makes one Flatcar GPU node pull."""

    node: str
    source: str | None
    """The object that decides (``ClusterPolicy/cluster-policy``); ``None`` if none does."""
    reference: str | None
    """The reference that works on this node; ``None`` when the operator gives it none."""
    alternatives: tuple[str, ...] = ()
    """Other references it may get instead (ClusterPolicy on a fleet with several OS tags)."""
    ours: bool = False
    """The reference is in releasebot's repository (else: reported, never built)."""
    problem: str | None = None
    version: str = ""
    """The deciding object's driver ``version`` as written (a release, a branch, a digest)."""
    precompiled: bool = False
    source_problem: str | None = None
    """The deciding object itself names no usable image (``DriverSource.problem``): the
    node needs an image nobody can name, whatever repository the object writes."""
    after_reboot: NodeImage | None = None
    """What the node pulls after FLUO reboots it into its pending version: the operator
    pools it by its labels as they will be then (the new ``VERSION_ID``, the new kernel),
    so another NVIDIADriver, and another driver, may decide. ``None`` if nothing is pending."""


@dataclass(frozen=True)
class ImageResolution:
    mode: DriverMode
    images: tuple[NodeImage, ...]
    warnings: tuple[str, ...]


def parse_cluster_policy(raw: object) -> DriverSource:
    """The driver part of a ClusterPolicy (``spec.driver``) as a ``DriverSource``."""
    meta, spec = _object(raw)
    driver = _mapping(spec.get("driver"))
    name = _name(meta)
    return DriverSource(
        kind=SourceKind.CLUSTER_POLICY,
        name=name,
        repository=_text(driver.get("repository")),
        image=_text(driver.get("image")),
        version=_text(driver.get("version")),
        precompiled=driver.get("usePrecompiled") is True,
        enabled=driver.get("enabled") is not False,
        defers_to_crd=driver.get("useNvidiaDriverCRD") is True,
        problem=_image_problem(f"{SourceKind.CLUSTER_POLICY}/{name}", driver),
    )


def parse_nvidia_driver(raw: object) -> DriverSource:
    """An NVIDIADriver's ``spec`` as a ``DriverSource`` (the CRD defaults ``driverType: gpu``)."""
    meta, spec = _object(raw)
    selector = _mapping(spec.get("nodeSelector"))
    pairs = sorted(
        (key, value)
        for key, value in ((clean(k, limit=317), clean(v, limit=63)) for k, v in selector.items())
        if key is not None
    )
    name = _name(meta)
    return DriverSource(
        kind=SourceKind.NVIDIA_DRIVER,
        name=name,
        repository=_text(spec.get("repository")),
        image=_text(spec.get("image")),
        version=_text(spec.get("version")),
        precompiled=spec.get("usePrecompiled") is True,
        node_selector=tuple((key, value or "") for key, value in pairs),
        driver_type=_text(spec.get("driverType")) or "gpu",
        default=spec.get("default") is True,
        problem=_image_problem(f"{SourceKind.NVIDIA_DRIVER}/{name}", spec),
    )


def resolve_images(
    nodes: Sequence[ParsedNode],
    view: OperatorView,
    repository: str,
    kernels: Mapping[FlatcarVersion, str] | None = None,
) -> ImageResolution:
    """Per Flatcar GPU node, the image the operator gives it, by the rules above, and the
    one it will give it after its pending reboot (``NodeImage.after_reboot``).

    ``kernels`` is the kernel (``6.12.102``) of each Flatcar release the feeds list: after
    the reboot NFD labels the node with it, which a precompiled pool's tag contains.
    """
    flatcar = [node for node in nodes if isinstance(node, FleetNode) and node.is_gpu]
    now = _resolve(flatcar, nodes, view, repository)
    futures = [
        rebooted(node, (kernels or {}).get(node.pending_version))
        for node in flatcar
        if node.pending_version is not None
    ]
    if not futures:
        return now
    # The fleet as it may be mid-rollout: some nodes rebooted, some not (a ClusterPolicy
    # may take its one OS tag from any of them).
    later = _resolve(futures, [*nodes, *futures], view, repository)
    after = {image.node: image for image in later.images}
    images = tuple(replace(image, after_reboot=after.get(image.node)) for image in now.images)
    return replace(now, images=images)


def rebooted(node: FleetNode, kernel: str | None) -> FleetNode:
    """``node`` as NFD will label it once it runs its pending version: the operator's
    node-selector rules are applied to these labels, never to today's."""
    pending = node.pending_version
    if pending is None:
        return node
    labels = dict(node.labels)
    major, minor, _ = pending.text.split(".")
    for key, value in (("", pending.text), (".major", major), (".minor", minor)):
        if NFD_VERSION_ID + key in labels:
            labels[NFD_VERSION_ID + key] = value
    full = None if kernel is None else f"{kernel}-flatcar"
    if full is not None:
        labels[NFD_KERNEL] = full
    else:
        labels.pop(NFD_KERNEL, None)
    return replace(
        node,
        version=pending,
        kernel=full,
        fluo=FluoState(group=node.fluo.group),
        labels=MappingProxyType(labels),
    )


def driver_mode(view: OperatorView) -> DriverMode:
    """How the operator deploys drivers: by the first ClusterPolicy (by name) alone, by its
    NVIDIADriver objects, not at all (disabled), or no ClusterPolicy (none)."""
    policies = sorted(view.cluster_policies or (), key=lambda source: source.name)
    if not policies:
        return DriverMode.NONE
    if policies[0].defers_to_crd:
        return DriverMode.NVIDIA_DRIVER
    if not policies[0].enabled:
        return DriverMode.DISABLED
    return DriverMode.CLUSTER_POLICY


def _resolve(
    flatcar: Sequence[FleetNode],
    nodes: Sequence[ParsedNode],
    view: OperatorView,
    repository: str,
) -> ImageResolution:
    """Per node of ``flatcar``, the image the operator gives it, by the rules above, in a
    fleet of ``nodes``."""
    policies = sorted(view.cluster_policies or (), key=lambda source: source.name)
    drivers = [d for d in view.nvidia_drivers or () if d.driver_type == "gpu"]
    warnings: list[str] = []
    if len(policies) > 1:
        names = ", ".join(policy.name for policy in policies)
        warnings.append(f"several ClusterPolicies ({names}): the operator acts on one only")
    if not policies:
        if drivers:
            warnings.append(
                "NVIDIADriver objects exist but no ClusterPolicy: no driver is deployed"
            )
        return ImageResolution(DriverMode.NONE, _none(flatcar, "no ClusterPolicy"), tuple(warnings))
    policy = policies[0]
    if policy.defers_to_crd:
        if not drivers:
            warnings.append(f"{policy.label} defers to NVIDIADriver objects, but there are none")
        images = tuple(_by_nvidia_driver(node, drivers, repository) for node in flatcar)
        return ImageResolution(DriverMode.NVIDIA_DRIVER, images, tuple(warnings))
    if not policy.enabled:
        why = f"{policy.label} sets driver.enabled: false"
        return ImageResolution(DriverMode.DISABLED, _none(flatcar, why), tuple(warnings))
    if drivers:
        warnings.append(
            f"NVIDIADriver objects are ignored: {policy.label} does not set useNvidiaDriverCRD"
        )
    tags = _cluster_policy_tags(nodes)
    if len(tags) > 1:
        shown = ", ".join(tag or "<no NFD labels>" for tag in sorted(tags, key=str))
        warnings.append(
            f"{policy.label} gives all GPU nodes the OS tag of one of them, whichever the "
            f"operator lists first, but they have {len(tags)} OS tags ({shown}): use one "
            f"NVIDIADriver per Flatcar version (GPU Operator >= {MIN_MULTI_POOL_OPERATOR})"
        )
    if None in tags:
        warnings.append(
            "a GPU node without NFD os_release labels makes the ClusterPolicy driver fail if picked"
        )
    images = tuple(_by_cluster_policy(node, policy, tags, repository) for node in flatcar)
    return ImageResolution(DriverMode.CLUSTER_POLICY, images, tuple(warnings))


def _cluster_policy_tags(nodes: Sequence[ParsedNode]) -> set[str | None]:
    """Every OS tag the ClusterPolicy may take: one per GPU node, Flatcar or not."""
    return {node.os_tag for node in nodes if node.is_gpu}


def _by_cluster_policy(
    node: FleetNode, policy: DriverSource, tags: set[str | None], repository: str
) -> NodeImage:
    own = node.os_tag or f"flatcar{node.version.text}"
    reference, problem = policy.reference(own, node.kernel)
    others = []
    for tag in sorted(tag for tag in tags if tag is not None and tag != own):
        other, _ = policy.reference(tag, node.kernel)
        if other is not None and other != reference:
            others.append(other)
    return NodeImage(
        node.name,
        policy.label,
        reference,
        tuple(others),
        policy.is_ours(repository),
        problem,
        policy.version,
        policy.precompiled,
        policy.problem,
    )


def _by_nvidia_driver(
    node: FleetNode, drivers: Sequence[DriverSource], repository: str
) -> NodeImage:
    labels: Mapping[str, str] = {**node.labels, GPU_PRESENT: "true"}
    matching = [d for d in drivers if all(labels.get(k) == v for k, v in d.node_selector)]
    chosen = [d for d in matching if not d.default] or [d for d in matching if d.default]
    if not chosen:
        return NodeImage(node.name, None, None, problem="no NVIDIADriver selects this node")
    if len(chosen) > 1:
        names = ", ".join(sorted(d.name for d in chosen))
        return NodeImage(
            node.name,
            None,
            None,
            problem=f"selected by several NVIDIADrivers ({names}): the operator rejects them",
        )
    driver = chosen[0]
    ours = driver.is_ours(repository)
    reference: str | None = None
    problem: str | None = (
        "no NFD os_release labels: the operator puts the node in no pool and deploys no driver"
    )
    if node.os_tag is not None:
        reference, problem = driver.reference(node.os_tag, node.kernel)
    return NodeImage(
        node.name,
        driver.label,
        reference,
        ours=ours,
        problem=problem,
        version=driver.version,
        precompiled=driver.precompiled,
        source_problem=driver.problem,
    )


def _none(nodes: Sequence[FleetNode], why: str) -> tuple[NodeImage, ...]:
    return tuple(NodeImage(node.name, None, None, problem=why) for node in nodes)


def _normal(repository: str) -> str:
    host, _, path = repository.strip().strip("/").partition("/")
    return f"{host.lower()}/{path}" if path else host.lower()


def _mapping(value: object) -> Mapping[str, object]:
    return value if isinstance(value, Mapping) else {}


def _object(raw: object) -> tuple[Mapping[str, object], Mapping[str, object]]:
    obj = _mapping(raw)
    return _mapping(obj.get("metadata")), _mapping(obj.get("spec"))


def _name(meta: Mapping[str, object]) -> str:
    return clean(meta.get("name"), limit=253) or "(unnamed)"


def _text(value: object) -> str:
    return clean(value, limit=REFERENCE_MAX_CHARS) or ""


def _image_problem(label: str, fields: Mapping[str, object]) -> str | None:
    """Why the ``version``, ``repository`` or ``image`` an operator object writes cannot be
    part of an image reference (checked as written: a value with control characters is not
    cleaned into one that looks valid); ``None`` when each is one, or absent."""
    checks = (
        ("version", _VERSION, "a driver version"),
        ("repository", _REFERENCE_PART, "an image repository"),
        ("image", _REFERENCE_PART, "an image name"),
    )
    for key, pattern, what in checks:
        value = fields.get(key)
        if isinstance(value, str) and value and not pattern.fullmatch(value):
            return f"{label} names driver {key} {escaped(value)}, which is not {what}"
    return None
