"""The fleet view: what each Kubernetes Node says about itself, as one frozen ``FleetNode``.

The GPU Operator pulls, for each GPU node, an image tagged from THAT node's os-release, so
releasebot must know every node's Flatcar version, kernel, arch and what the Flatcar update
operator (FLUO) is about to reboot it into. ``parse_node`` reads those facts from one Node
object as the API server returns it (JSON) and answers a ``FleetNode``, or an
``IgnoredNode`` with a one-line reason (not Flatcar, no version, garbage ``osImage``, an
arch Flatcar does not ship...). It never raises for bad node data: every value is hostile
(see ``untrusted.py``), bounded and stripped of control characters before it is kept.

Where the facts come from (checked against the upstream code; see docs/domain.md):

- Flatcar version: NFD's ``feature.node.kubernetes.io/system-os_release.VERSION_ID`` (with
  ``...ID=flatcar``), which is what the GPU Operator builds the tag from; else the
  kubelet's ``status.nodeInfo.osImage`` (``Flatcar Container Linux by Kinvolk 4593.2.5
  (Oklo)``). Quotes (os-release quotes values from 4628 on), CR/LF and spaces are removed.
- Kernel: NFD ``kernel-version.full`` else ``status.nodeInfo.kernelVersion``.
- GPU: ``nvidia.com/gpu.present=true`` (the operator's label), else one of the NFD PCI
  labels the operator itself turns into it: ``pci-10de.present``, and the class-qualified
  ``pci-0302_10de.present``/``pci-0300_10de.present`` (gpu-operator
  ``controllers/state_manager.go``, ``gpuNodeLabels``).
- FLUO (flatcar-linux-update-operator ``doc/labels-and-annotations.md``): the agent's
  ``group`` label and ``status``, ``reboot-needed``, ``new-version`` annotations
  (``0.0.0`` when nothing is pending), the operator's ``before-reboot`` label, the admin's
  ``reboot-paused`` annotation.

Deliberately not here: which image a node pulls (``operator.py``), talking to the API server
(``releasebot/fleet/``), and keeping history (the store).
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace
from types import MappingProxyType

from releasebot.domain.shared.untrusted import clean, escaped, quoted
from releasebot.domain.shared.versions import Arch, FlatcarVersion

NFD_PREFIX = "feature.node.kubernetes.io/"
NFD_OS_ID = NFD_PREFIX + "system-os_release.ID"
NFD_VERSION_ID = NFD_PREFIX + "system-os_release.VERSION_ID"
NFD_KERNEL = NFD_PREFIX + "kernel-version.full"
ARCH_LABEL = "kubernetes.io/arch"
GPU_PRESENT = "nvidia.com/gpu.present"
GPU_LABELS = (
    GPU_PRESENT,
    NFD_PREFIX + "pci-10de.present",
    NFD_PREFIX + "pci-0302_10de.present",
    NFD_PREFIX + "pci-0300_10de.present",
)
"""Labels that mark a node with an NVIDIA GPU when ``true``, strongest first."""
FLUO_PREFIX = "flatcar-linux-update.v1.flatcar-linux.net/"
FLUO_GROUP = FLUO_PREFIX + "group"
FLUO_STATUS = FLUO_PREFIX + "status"
FLUO_REBOOT_NEEDED = FLUO_PREFIX + "reboot-needed"
FLUO_NEW_VERSION = FLUO_PREFIX + "new-version"
FLUO_BEFORE_REBOOT = FLUO_PREFIX + "before-reboot"
FLUO_REBOOT_PAUSED = FLUO_PREFIX + "reboot-paused"
FLUO_AFTER_REBOOT = FLUO_PREFIX + "after-reboot"
"""FLUO labels a node ``after-reboot=true`` once it is back from its reboot, and waits for
the annotations named by ``--after-reboot-annotations`` to be ``"true"``."""
GPU_RESOURCE = "nvidia.com/gpu"
"""The device plugin's extended resource: how many GPUs the kubelet offers to pods."""
DRIVER_UPGRADE_STATE = "nvidia.com/gpu-driver-upgrade-state"
"""The GPU Operator's upgrade controller's label; ``upgrade-failed`` after too many
restarts of the driver pod."""
DEFAULT_PROOF_ANNOTATION = "releasebot.io/driver-proven"
"""The annotation FLUO's ``--after-reboot-annotations`` waits for, set by releasebot."""
NO_NEW_VERSION = "0.0.0"
"""update_engine's NewVersion when no update is downloaded: nothing pending."""
DEFAULT_GATE_ANNOTATION = "releasebot.io/driver-image-ready"
"""The annotation FLUO's ``--before-reboot-annotations`` waits for, set by releasebot."""
GATE_VERSION_ANNOTATION = "releasebot.io/driver-image-ready-version"
"""Beside the gate annotation: the pending Flatcar version it was set for. FLUO deletes the
gate annotation when it proceeds; a gate whose version is not the pending one is stale."""
LIST_PAGE_SIZE = 500
"""Nodes per list call: kubectl's default chunk; 5,000 nodes take 10 calls."""
NAME_MAX_CHARS = 253
"""A Node name is a DNS subdomain: at most 253 characters."""

LABELS_MAX = 512
"""Labels kept per node for selector matching; real nodes carry one or two hundred."""
UNNAMED = "(unnamed)"
UID_SHOWN_CHARS = 36
"""A Node's uid as shown beside a name listed twice (a UUID is 36 characters)."""

_ESCAPED_MAX_CHARS = 200
_NODE_NAME = re.compile(
    r"[a-z0-9](?:[-a-z0-9]{0,61}[a-z0-9])?(?:\.[a-z0-9](?:[-a-z0-9]{0,61}[a-z0-9])?)*"
)
"""A Node name as the API server accepts it: a DNS-1123 subdomain (at most 253 characters,
checked apart)."""

_LABEL_KEY = re.compile(
    r"(?:[a-z0-9](?:[-a-z0-9.]{0,251}[a-z0-9])?/)?[A-Za-z0-9](?:[-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?"
)
_LABEL_VALUE = re.compile(r"(?:[A-Za-z0-9](?:[-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?")
_FLATCAR_IMAGE = re.compile(r"flatcar\s+container\s+linux\b", re.IGNORECASE)
_IMAGE_VERSION = re.compile(r"(?<![0-9.])([0-9]{1,9}\.[0-9]{1,9}\.[0-9]{1,9})(?![0-9.])")
_KERNEL = re.compile(r"[0-9]{1,4}\.[0-9]{1,4}(?:\.[0-9]{1,6})?[-+._~A-Za-z0-9]{0,64}")
_ARCHES = {arch.value: arch for arch in Arch}


@dataclass(frozen=True)
class FluoState:
    """What the Flatcar update operator says about a node (all empty without FLUO)."""

    group: str | None = None
    """The agent's ``group`` label: the update channel of ``update.conf`` (``stable``...)."""
    status: str | None = None
    """update_engine's CurrentOperation, e.g. ``UPDATE_STATUS_UPDATED_NEED_REBOOT``."""
    reboot_needed: bool = False
    new_version: FlatcarVersion | None = None
    """The version installed and waiting for the reboot; ``None`` when none, or the same."""
    before_reboot: bool = False
    """FLUO wants to reboot the node and waits for the before-reboot annotations."""
    reboot_paused: bool = False
    after_reboot: bool = False
    """The node is back from FLUO's reboot and FLUO waits for the after-reboot annotations."""


@dataclass(frozen=True)
class FleetNode:
    """A Flatcar node, GPU or not, with what the image plan needs to know about it."""

    name: str
    gpu: str | None
    """Why this is a GPU node (the label, e.g. ``nvidia.com/gpu.present=true``); ``None``: none."""
    version: FlatcarVersion
    version_source: str
    """``nfd`` (the label the GPU Operator reads) or ``osImage`` (the kubelet's fallback)."""
    has_os_labels: bool
    """NFD's ID and VERSION_ID labels are present: the GPU Operator can compute a tag."""
    kernel: str | None
    """``uname -r`` of the node (``6.12.102-flatcar``), if it says."""
    arch: Arch
    fluo: FluoState
    gate: str | None
    """The value of releasebot's reboot-gate annotation, if set."""
    gate_version: str | None = None
    """The pending version the gate annotation was set for (``GATE_VERSION_ANNOTATION``)."""
    resource_version: str | None = field(default=None, compare=False)
    """``metadata.resourceVersion`` as listed: a patch of the gate is sent on this condition."""
    labels: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}), compare=False)
    """The node's well-formed labels, for matching NVIDIADriver node selectors."""
    notes: tuple[str, ...] = ()
    """Oddities worth a line in the fleet view (labels that needed cleaning...)."""
    proof: str | None = field(default=None, compare=False)
    """The value of releasebot's after-reboot proof annotation, if set."""
    gpus: int | None = field(default=None, compare=False)
    """``status.allocatable["nvidia.com/gpu"]``: the GPUs the device plugin offers now;
    ``None`` when the node does not say (no device plugin, or an unreadable value)."""
    upgrade_state: str | None = field(default=None, compare=False)
    """The GPU Operator's ``gpu-driver-upgrade-state`` label, if any."""
    boot_id: str | None = field(default=None, compare=False)
    """``status.nodeInfo.bootID``: changes at every boot, so a second reboot is seen."""
    address: str | None = field(default=None, compare=False)
    """The exact name to write to (the reboot gate, the proof) and to select Pods by: the
    listed name when it is a valid Node name that no other listed Node shares; ``None``
    otherwise, and then releasebot never writes to the node (``name`` is only shown)."""
    uid: str | None = field(default=None, compare=False)
    """``metadata.uid`` as listed (cleaned): what tells apart two Nodes shown alike."""

    @property
    def is_gpu(self) -> bool:
        return self.gpu is not None

    @property
    def pending_version(self) -> FlatcarVersion | None:
        return self.fluo.new_version

    @property
    def os_tag(self) -> str | None:
        """The OS part of the image tag the GPU Operator computes (``flatcar4593.2.5``);
        ``None`` without NFD labels, where the operator computes none."""
        return f"flatcar{self.version.text}" if self.has_os_labels else None


@dataclass(frozen=True)
class IgnoredNode:
    """A node releasebot builds nothing for, and why (one line for people)."""

    name: str
    reason: str
    gpu: str | None = None
    os_tag: str | None = None
    """NFD ID + VERSION_ID (``ubuntu22.04``) when present: a ClusterPolicy may still take
    its one OS tag from this node."""
    arch: str | None = None
    kernel: str | None = None
    labels: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}), compare=False)
    """The node's well-formed labels: ``operator-values`` keeps a non-Flatcar GPU node's
    driver with a pool selecting its NFD labels, and matches the operator's selectors."""
    uid: str | None = field(default=None, compare=False)
    """``metadata.uid`` as listed (cleaned)."""

    @property
    def is_gpu(self) -> bool:
        return self.gpu is not None


ParsedNode = FleetNode | IgnoredNode


def parse_node(
    raw: object,
    *,
    gate_annotation: str = DEFAULT_GATE_ANNOTATION,
    proof_annotation: str = DEFAULT_PROOF_ANNOTATION,
) -> ParsedNode:
    """One Node object (as JSON from the API server) as a ``FleetNode`` or ``IgnoredNode``."""
    node = _mapping(raw)
    meta = _mapping(node.get("metadata"))
    raw_labels = _mapping(meta.get("labels"))
    raw_annotations = _mapping(meta.get("annotations"))
    status = _mapping(node.get("status"))
    info = _mapping(status.get("nodeInfo"))
    name, address = _name(meta.get("name"))
    uid = clean(meta.get("uid"), limit=UID_SHOWN_CHARS)

    gpu = _gpu_evidence(raw_labels)
    arch_text = clean(raw_labels.get(ARCH_LABEL), limit=32) or clean(
        info.get("architecture"), limit=32
    )
    kernel = _kernel(raw_labels.get(NFD_KERNEL)) or _kernel(info.get("kernelVersion"))
    os_id = clean(raw_labels.get(NFD_OS_ID), limit=63, unquote=True)
    version_id = clean(raw_labels.get(NFD_VERSION_ID), limit=63, unquote=True)
    os_image = clean(info.get("osImage"))
    os_tag = f"{os_id}{version_id}" if os_id and version_id else None

    def ignored(reason: str) -> IgnoredNode:
        labels = MappingProxyType(_valid_labels(raw_labels))
        return IgnoredNode(name, reason, gpu, os_tag, arch_text, kernel, labels, uid)

    image_is_flatcar = os_image is not None and _FLATCAR_IMAGE.match(os_image) is not None
    if os_id is not None and os_id.lower() != "flatcar":
        return ignored(f"runs {quoted(os_tag or os_id)} (NFD label), not Flatcar Container Linux")
    if os_id is None and os_image is None:
        return ignored("no OS information: no NFD os_release labels and no status.nodeInfo.osImage")
    if os_id is None and not image_is_flatcar:
        return ignored(f"osImage {quoted(os_image)} is not Flatcar Container Linux")

    notes: list[str] = []
    image_version = _image_version(os_image) if image_is_flatcar else None
    version: FlatcarVersion | None = None
    source = "nfd"
    if version_id is not None and FlatcarVersion.is_valid(version_id):
        version = FlatcarVersion.parse(version_id)
        raw_version = raw_labels.get(NFD_VERSION_ID)
        if raw_version != version_id:
            notes.append(f"VERSION_ID label {escaped(raw_version)} read as {version_id}")
    elif os_id is not None:
        notes.append(
            f"NFD VERSION_ID {quoted(version_id)} is not a Flatcar version"
            if version_id is not None
            else "NFD VERSION_ID label missing"
        )
    if version is None and image_version is not None:
        version, source = FlatcarVersion.parse(image_version), "osImage"
    if version is None:
        return ignored(
            f"no Flatcar version: VERSION_ID label {quoted(version_id)}, osImage {quoted(os_image)}"
        )
    if source == "nfd" and image_version is not None and image_version != version.text:
        notes.append(
            f"osImage says {image_version}: NFD has not relabelled the node since its reboot"
        )

    if arch_text is None:
        return ignored(
            f"no architecture: label {ARCH_LABEL} and status.nodeInfo.architecture missing"
        )
    arch = _ARCHES.get(arch_text.lower())
    if arch is None:
        return ignored(f"architecture {quoted(arch_text)}: Flatcar ships amd64 and arm64 only")

    fluo, fluo_notes = _fluo(raw_labels, raw_annotations, version)
    return FleetNode(
        name=name,
        gpu=gpu,
        version=version,
        version_source=source,
        has_os_labels=os_id is not None and source == "nfd",
        kernel=kernel,
        arch=arch,
        fluo=fluo,
        gate=clean(raw_annotations.get(gate_annotation), limit=63),
        gate_version=clean(raw_annotations.get(GATE_VERSION_ANNOTATION), limit=63),
        resource_version=clean(meta.get("resourceVersion"), limit=63),
        labels=MappingProxyType(_valid_labels(raw_labels)),
        notes=(*notes, *fluo_notes),
        proof=clean(raw_annotations.get(proof_annotation), limit=63),
        gpus=_count(_mapping(status.get("allocatable")).get(GPU_RESOURCE)),
        upgrade_state=clean(raw_labels.get(DRIVER_UPGRADE_STATE), limit=63),
        boot_id=clean(info.get("bootID"), limit=64),
        address=address,
        uid=uid,
    )


def parse_nodes(
    items: Sequence[tuple[int, object]],
    *,
    kind: str = "Node",
    gate_annotation: str = DEFAULT_GATE_ANNOTATION,
    proof_annotation: str = DEFAULT_PROOF_ANNOTATION,
) -> tuple[tuple[ParsedNode, ...], tuple[str, ...]]:
    """Every listed Node (its number in the listing, its JSON) parsed by ``parse_node``,
    with names that tell them apart, and one warning line per name shown for several.

    Two Nodes may be shown alike: names that differ only in what ``clean`` removes
    (``gpu-1`` and ``gpu-\\x1b[0m1``; the second is shown escaped, so only a name escaped
    alike collides), a name listed twice, several Nodes without a name. Each of them is
    shown with its uid (or, without distinct uids, its item number) after the name, and
    loses its ``address``: a decision about one is never written to another."""
    parsed = [
        (
            number,
            parse_node(raw, gate_annotation=gate_annotation, proof_annotation=proof_annotation),
        )
        for number, raw in items
    ]
    by_name: dict[str, list[int]] = {}
    for index, (_, node) in enumerate(parsed):
        by_name.setdefault(node.name, []).append(index)
    warnings: list[str] = []
    for (number, raw), (_, node) in zip(items, parsed, strict=True):
        raw_name = _mapping(_mapping(raw).get("metadata")).get("name")
        if node.name == UNNAMED:
            warnings.append(f"item {number} of the {kind} list has no name: shown as {UNNAMED}")
        elif _name(raw_name)[1] is None:
            reads = clean(raw_name, limit=NAME_MAX_CHARS)
            alike = f" (it reads as {reads}, another listed {kind})" if reads in by_name else ""
            warnings.append(
                f"item {number} of the {kind} list is named {node.name}, which is not a valid "
                f"{kind} name{alike}: shown escaped, and releasebot writes nothing to it"
            )
    nodes = [node for _, node in parsed]
    taken = set(by_name)
    for name, indexes in by_name.items():
        if len(indexes) < 2:
            continue
        uids = [parsed[index][1].uid for index in indexes]
        distinct = None not in uids and len(set(uids)) == len(uids)
        shown = []
        for index in indexes:
            number, node = parsed[index]
            suffix = f"uid {node.uid}" if distinct else f"item {number}"
            apart = f"{name} ({suffix})"
            while apart in taken:  # a hostile name may already read like this
                apart += "'"
            taken.add(apart)
            shown.append(apart)
            nodes[index] = (
                replace(node, name=apart, address=None)
                if isinstance(node, FleetNode)
                else replace(node, name=apart)
            )
        items_text = _some([str(parsed[index][0]) for index in indexes])
        warnings.append(
            f"{len(indexes)} {kind}s of the listing (items {items_text}) are shown as "
            f"{name}: shown apart as {_some(shown)}; releasebot writes to none of them "
            "(no reboot gate, no proof): rename or remove the odd ones"
        )
    return tuple(nodes), tuple(warnings)


def channel_for_version(
    version: FlatcarVersion,
    group: str | None = None,
    known_channels: Collection[str] = ("alpha", "beta", "stable", "lts"),
) -> str | None:
    """The Flatcar channel (feed name) a node on ``version`` follows; ``None`` if unknown.

    FLUO's ``group`` label wins when it names a known channel. Otherwise the minor tells
    (x.0 alpha, x.1 beta, x.2 stable, x.3 lts), except where Flatcar used it otherwise:
    LTS-2021 released ``2605.N.1``; before 2765 the minor counted point releases; the dead
    ``edge`` channel used 99 (docs/domain.md, section 1).
    """
    if group is not None and group.lower() in known_channels:
        return group.lower()
    major, minor, patch = version.key
    if major == 2605 and patch == 1:
        return "lts"
    if major < 2765 or minor == 99:
        return None
    return {0: "alpha", 1: "beta", 2: "stable", 3: "lts"}.get(minor)


def _mapping(value: object) -> Mapping[str, object]:
    return value if isinstance(value, Mapping) else {}


def is_node_name(value: object) -> bool:
    """``value`` is a name the API server accepts for a Node (a DNS-1123 subdomain)."""
    return (
        isinstance(value, str)
        and len(value) <= NAME_MAX_CHARS
        and bool(_NODE_NAME.fullmatch(value))
    )


def _some(texts: Sequence[str], shown: int = 3) -> str:
    """The first few of ``texts``, and how many more."""
    more = f" and {len(texts) - shown} more" if len(texts) > shown else ""
    return ", ".join(texts[:shown]) + more


def _name(value: object) -> tuple[str, str | None]:
    """How a listed name is shown, and the name to address the Node by (``None``: it is
    not a valid Node name, so releasebot never writes to it). A valid name is shown as it
    is; any other is shown escaped (``'gpu-\\x1b[0m1'``), never as the valid name it
    would clean to."""
    if isinstance(value, str) and is_node_name(value):
        return value, value
    if not isinstance(value, str) or clean(value) is None:
        return UNNAMED, None
    shown = escaped(value, limit=NAME_MAX_CHARS)
    if len(shown) > _ESCAPED_MAX_CHARS:  # room left for a uid after it, within 253
        shown = shown[: _ESCAPED_MAX_CHARS - 1] + "…"
    return shown, None


def _true(value: object) -> bool:
    text = clean(value, limit=8, unquote=True)
    return text is not None and text.lower() == "true"


def _gpu_evidence(labels: Mapping[str, object]) -> str | None:
    for key in GPU_LABELS:
        if _true(labels.get(key)):
            return f"{key}=true"
    return None


def _count(value: object) -> int | None:
    """A resource quantity that counts devices (``"8"``); ``None`` for anything else."""
    text = clean(value, limit=6)
    if text is None or not text.isascii() or not text.isdigit():
        return None
    return int(text)


def _kernel(value: object) -> str | None:
    text = clean(value, limit=80, unquote=True)
    return text if text is not None and _KERNEL.fullmatch(text) else None


def _image_version(os_image: str | None) -> str | None:
    match = _IMAGE_VERSION.search(os_image or "")
    return match.group(1) if match else None


def _valid_labels(raw: Mapping[str, object]) -> dict[str, str]:
    kept: dict[str, str] = {}
    for count, (key, value) in enumerate(raw.items()):
        if count >= LABELS_MAX:
            break
        if (
            isinstance(key, str)
            and isinstance(value, str)
            and len(key) <= 317
            and _LABEL_KEY.fullmatch(key)
            and _LABEL_VALUE.fullmatch(value)
        ):
            kept[key] = value
    return kept


def _fluo(
    labels: Mapping[str, object], annotations: Mapping[str, object], running: FlatcarVersion
) -> tuple[FluoState, list[str]]:
    notes: list[str] = []
    new_text = clean(annotations.get(FLUO_NEW_VERSION), limit=63, unquote=True)
    new_version: FlatcarVersion | None = None
    if new_text is not None and new_text != NO_NEW_VERSION:
        if FlatcarVersion.is_valid(new_text):
            parsed = FlatcarVersion.parse(new_text)
            new_version = parsed if parsed != running else None
        else:
            notes.append(f"FLUO new-version {quoted(new_text)} is not a Flatcar version")
    state = FluoState(
        group=clean(labels.get(FLUO_GROUP), limit=63, unquote=True),
        status=clean(annotations.get(FLUO_STATUS), limit=63),
        reboot_needed=_true(annotations.get(FLUO_REBOOT_NEEDED))
        or _true(labels.get(FLUO_REBOOT_NEEDED)),
        new_version=new_version,
        before_reboot=_true(labels.get(FLUO_BEFORE_REBOOT)),
        reboot_paused=_true(annotations.get(FLUO_REBOOT_PAUSED)),
        after_reboot=_true(labels.get(FLUO_AFTER_REBOOT)),
    )
    return state, notes
