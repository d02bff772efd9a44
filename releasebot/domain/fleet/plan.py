"""Planning for the fleet: the images each GPU node needs, and the targets that makes.

The channel policy (``policy.plan_targets``) builds the newest releases of the configured
channels. A node one release behind, on a channel nobody configured, or about to reboot
into a release published an hour ago needs its image all the same, so ``plan_fleet`` adds,
for every Flatcar GPU node, every (driver it needs) x (the version it runs, and the version
FLUO says it will boot into) as a target, whatever the channel policy says:

- the drivers: the one the GPU Operator gives the node (``operator.resolve_images``), when
  that object pulls from releasebot's repository and names a driver release the NVIDIA
  feed lists; otherwise (no operator, a foreign repository, no object for this node) the
  drivers the policy selects;
- the release: looked up in every Flatcar feed releasebot has read (the configured ones and
  the channels the nodes follow, ``fleet_channels``); a version in no feed cannot be built
  (there is no kernel to build against) and is a ``Need`` with a problem, never an error;
- the arches: the nodes' own, added to the channel target's when both want one tag.

Each target says why it exists (``TargetReason``); the merged plan keeps the channel
policy's order (newest release first, then newest driver). Deliberately not here: how a
node stands (``coverage.py``), the reboot gate (``gate.py``), reading anything.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from releasebot.domain.fleet.nodes import FleetNode, IgnoredNode, ParsedNode, channel_for_version
from releasebot.domain.fleet.operator import DriverMode, NodeImage, OperatorView, resolve_images
from releasebot.domain.shared.versions import Arch, DriverVersion, FlatcarVersion, image_tag
from releasebot.domain.targets.models import DriverRelease, FlatcarRelease, Target, TargetReason
from releasebot.domain.targets.policy import Policy, select_drivers

WARNING_NODES = 5
"""Nodes named in one warning line; the rest are counted."""
_ALL_ARCHES = frozenset(Arch)


@dataclass(frozen=True)
class Need:
    """One driver image one GPU node needs, for the version it runs or will reboot into."""

    node: str
    arch: Arch
    flatcar: FlatcarVersion
    pending: bool
    """The node will reboot into ``flatcar`` (FLUO's ``new-version``), it does not run it."""
    tag: str | None
    """The image tag (``<driver>-flatcar<version>``); ``None`` when no driver is known."""
    driver: DriverVersion | None = None
    problem: str | None = None
    """Why releasebot cannot build it (no feed lists the version, no such driver...)."""
    unknown_version: bool = False
    """No Flatcar feed releasebot reads lists ``flatcar``."""
    pinned: bool = False
    """The operator object pins the driver image by digest: an image releasebot did not
    build for this version (the after-reboot proof leaves it to its owner)."""

    @property
    def buildable(self) -> bool:
        return self.tag is not None and self.problem is None


@dataclass(frozen=True)
class NodeNeeds:
    """A Flatcar GPU node and every image it needs."""

    node: FleetNode
    needs: tuple[Need, ...]
    source: str | None = None
    """The GPU Operator object that gives the node its driver (``ClusterPolicy/x``)."""
    foreign: str | None = None
    """The reference the node pulls when that is not releasebot's repository."""
    note: str | None = None
    """What the operator view says about this node, when it is worth a line."""
    reference: str | None = None
    """The exact image reference the operator makes the node pull now, when known."""
    pending_reference: str | None = None
    """The one it will pull after its pending reboot, by the pool it will be in then."""
    pending_source: str | None = None
    """The GPU Operator object that will give it its driver after the reboot."""
    pending_foreign: str | None = None
    """The reference it will pull after the reboot, when that is not releasebot's."""

    @property
    def name(self) -> str:
        return self.node.name


@dataclass(frozen=True)
class FleetPlan:
    """What the fleet needs, and the whole plan: the channel targets merged with its own."""

    nodes: tuple[NodeNeeds, ...]
    """Every Flatcar GPU node, by name."""
    ignored: tuple[IgnoredNode, ...]
    """GPU nodes releasebot builds nothing for (not Flatcar, no version...), and why."""
    targets: tuple[Target, ...]
    warnings: tuple[str, ...]
    operator_known: bool = True
    """False when the GPU Operator's objects could not be read: each node's driver is a
    guess (the selected drivers), and the reboot gate trusts no guess."""
    additions: tuple[Target, ...] = field(default=(), compare=False, repr=False)
    """The fleet's own targets before they were merged into the channel targets: what
    ``plan_fleet``'s ``same_as`` compares."""

    def urgent_tags(self) -> frozenset[str]:
        """Tags a node waiting at FLUO's reboot gate needs for the version it reboots into:
        they are launched before anything else."""
        return frozenset(
            need.tag
            for entry in self.nodes
            if entry.node.fluo.before_reboot
            for need in entry.needs
            if need.pending and need.tag is not None
        )


def fleet_channels(nodes: Iterable[ParsedNode]) -> frozenset[str]:
    """The channel feeds the GPU nodes follow, for the versions they run and will run."""
    channels: set[str | None] = set()
    for node in nodes:
        if isinstance(node, FleetNode) and node.is_gpu:
            for version in (node.version, node.pending_version):
                if version is not None:
                    channels.add(channel_for_version(version, node.fluo.group))
    return frozenset(channel for channel in channels if channel is not None)


def plan_fleet(
    policy: Policy,
    channel_targets: Sequence[Target],
    nodes: Sequence[ParsedNode],
    operator: OperatorView | None,
    *,
    repository: str,
    releases: Mapping[FlatcarVersion, FlatcarRelease],
    drivers: Sequence[DriverRelease],
    same_as: FleetPlan | None = None,
) -> FleetPlan:
    """The fleet's needs and the merged plan.

    ``operator`` is ``None`` when the GPU Operator's objects could not be read (the
    selected drivers stand in); ``releases`` is every release any Flatcar feed listed;
    ``drivers`` every release of the NVIDIA feed. ``same_as``: a plan made earlier from the
    same ``channel_targets`` (the caller's promise); when the fleet adds the same targets
    as it did then, the result's ``targets`` is that plan's (the same tuple, not an
    equal one), so a caller that keeps what it derived from them sees nothing changed, and
    the merge, which walks every channel target, is not done again.
    """
    selected = select_drivers(drivers, policy.drivers, _ALL_ARCHES)
    by_version = {driver.version.text: driver for driver in drivers}
    view = operator if operator is not None else OperatorView(None, None)
    kernels = {version: release.kernel for version, release in releases.items()}
    resolution = resolve_images(nodes, view, repository, kernels)
    images = {image.node: image for image in resolution.images}
    if resolution.mode is DriverMode.NONE:  # no operator configured: nothing to say per node
        images = {}
    pools = resolution.mode is DriverMode.NVIDIA_DRIVER
    gpu = sorted(
        (node for node in nodes if isinstance(node, FleetNode) and node.is_gpu),
        key=lambda node: node.name,
    )
    entries = tuple(
        _node_needs(node, images.get(node.name), by_version, selected, releases, pools=pools)
        for node in gpu
    )
    ignored = tuple(
        sorted(
            (node for node in nodes if isinstance(node, IgnoredNode) and node.is_gpu),
            key=lambda node: node.name,
        )
    )
    warnings = list(resolution.warnings) if operator is not None else []
    warnings += _need_warnings(entries)
    if not selected and any(not entry.source for entry in entries):
        warnings.append("fleet: no driver matches nvidia.branches or nvidia.branch_types")
    fleet = _fleet_targets(entries, releases, by_version)
    additions = tuple(fleet.values())
    if same_as is not None and same_as.additions == additions:
        targets = same_as.targets
    else:
        targets = _merge(channel_targets, fleet)
    return FleetPlan(entries, ignored, targets, tuple(warnings), operator is not None, additions)


# -- one node --------------------------------------------------------------------------------


def _node_needs(
    node: FleetNode,
    image: NodeImage | None,
    by_version: Mapping[str, DriverRelease],
    selected: Sequence[DriverRelease],
    releases: Mapping[FlatcarVersion, FlatcarRelease],
    *,
    pools: bool = False,
) -> NodeNeeds:
    """What ``node`` needs for the version it runs (by the pool it is in) and for the one
    it will reboot into (by the pool it will be in then: ``NodeImage.after_reboot``)."""
    now = _version_needs(node, image, node.version, False, by_version, selected, releases)
    pending = node.pending_version
    if pending is None:
        return NodeNeeds(node, now.needs, now.source, now.foreign, now.note, now.reference)
    later_image = image if image is None or image.after_reboot is None else image.after_reboot
    later = _version_needs(
        node, later_image, pending, True, by_version, selected, releases, pools=pools
    )
    return NodeNeeds(
        node,
        (*now.needs, *later.needs),
        now.source,
        now.foreign,
        now.note or later.note,
        now.reference,
        later.reference,
        later.source,
        later.foreign,
    )


@dataclass(frozen=True)
class _VersionNeeds:
    needs: tuple[Need, ...]
    source: str | None
    foreign: str | None
    note: str | None
    reference: str | None


def _version_needs(
    node: FleetNode,
    image: NodeImage | None,
    version: FlatcarVersion,
    pending: bool,
    by_version: Mapping[str, DriverRelease],
    selected: Sequence[DriverRelease],
    releases: Mapping[FlatcarVersion, FlatcarRelease],
    *,
    pools: bool = False,
) -> _VersionNeeds:
    reference = None if image is None else image.reference
    if image is not None and image.source_problem is not None:
        # The object names no image at all: not a foreign repository, a broken object.
        doubt = Need(node.name, node.arch, version, pending, None, problem=image.source_problem)
        return _VersionNeeds((doubt,), image.source, None, image.source_problem, reference)
    if image is None or image.source is None or not image.ours:
        foreign = None
        note = None if image is None else image.problem
        if image is not None and image.source is not None:  # a repository not releasebot's
            foreign = image.reference or image.source
            note = f"{image.source} pulls from a repository that is not releasebot's"
        needs = tuple(_need(node, driver, version, pending, releases) for driver in selected)
        if pools and pending and image is not None and image.source is None and image.problem:
            # After the reboot the operator gives the node no driver (no pool selects it,
            # two do): the selected drivers are still planned, but no image vouches for
            # the node, so its reboot gate stays closed with the reason.
            doubt = Need(node.name, node.arch, version, pending, None, problem=image.problem)
            needs = (*needs, doubt)
        source = None if image is None else image.source
        return _VersionNeeds(needs, source, foreign, note, reference)
    driver, problem = _operator_driver(image, by_version)
    need = (
        _need(node, driver, version, pending, releases)
        if driver is not None
        else Need(
            node.name,
            node.arch,
            version,
            pending,
            None,
            problem=problem,
            pinned=image.version.startswith("sha256:"),
        )
    )
    return _VersionNeeds((need,), image.source, None, image.problem, reference)


def _operator_driver(
    image: NodeImage, by_version: Mapping[str, DriverRelease]
) -> tuple[DriverRelease | None, str | None]:
    """The driver release the operator object names, or why releasebot cannot build it."""
    source, version = image.source, image.version
    if image.problem is not None:
        return None, image.problem
    if image.precompiled:
        return None, (
            f"{source} sets usePrecompiled: releasebot builds <driver>-flatcar<version> "
            "images, not precompiled ones"
        )
    if version.startswith("sha256:"):
        return None, f"{source} pins the driver image by digest: one image for every version"
    found = by_version.get(version)
    if found is None:
        shown = version or "no version"
        return None, f"{source} names driver {shown!r}, which the NVIDIA feed does not list"
    return found, None


def _need(
    node: FleetNode,
    driver: DriverRelease,
    version: FlatcarVersion,
    pending: bool,
    releases: Mapping[FlatcarVersion, FlatcarRelease],
) -> Need:
    need = Need(node.name, node.arch, version, pending, image_tag(driver.version, version))
    need = replace(need, driver=driver.version)
    release = releases.get(version)
    if release is None:
        why = f"Flatcar {version} is in no feed releasebot reads: no image can be built"
        return replace(need, problem=why, unknown_version=True)
    if node.arch not in release.arches:
        return replace(need, problem=f"Flatcar {version} lists no {node.arch} build")
    if node.arch not in driver.arches:
        why = f"driver {driver.version} has no {node.arch.nvidia_name} runfile"
        return replace(need, problem=why)
    return need


def _need_warnings(entries: Sequence[NodeNeeds]) -> list[str]:
    """One line per problem, naming a few of the nodes that have it."""
    nodes_by_problem: dict[str, list[str]] = {}
    for entry in entries:
        for need in entry.needs:
            if need.problem is not None:
                nodes_by_problem.setdefault(need.problem, []).append(entry.name)
    return [
        f"fleet: {problem} (node {_some(names)})"
        for problem, names in sorted(nodes_by_problem.items())
    ]


def _some(names: Collection[str]) -> str:
    unique = sorted(set(names))
    shown = ", ".join(unique[:WARNING_NODES])
    more = len(unique) - WARNING_NODES
    return shown + (f" and {more} more" if more > 0 else "")


# -- the merged plan ---------------------------------------------------------------------------


def _fleet_targets(
    entries: Sequence[NodeNeeds],
    releases: Mapping[FlatcarVersion, FlatcarRelease],
    by_version: Mapping[str, DriverRelease],
) -> dict[str, Target]:
    """A target for every buildable need, by tag, with the arches and reasons of every
    node that needs it."""
    fleet: dict[str, Target] = {}
    for entry in entries:
        for need in entry.needs:
            if not need.buildable or need.driver is None:
                continue
            reason = TargetReason.PENDING_REBOOT if need.pending else TargetReason.FLEET
            known = fleet.get(need.tag or "")
            if known is None:
                driver, release = by_version[need.driver.text], releases[need.flatcar]
                known = Target.of(driver, release, frozenset({need.arch}), frozenset({reason}))
            fleet[known.tag] = replace(
                known,
                arches=(*known.arches, need.arch),
                reasons=known.reasons | {reason},
            )
    return fleet


def _merge(
    channel_targets: Sequence[Target], additions: Mapping[str, Target]
) -> tuple[Target, ...]:
    """The channel targets, with the fleet's arches and reasons added to those it needs
    too, and the fleet's other targets."""
    fleet = dict(additions)
    merged = []
    for target in channel_targets:
        extra = fleet.pop(target.tag, None)
        if extra is not None:
            target = replace(
                target,
                arches=(*target.arches, *extra.arches),
                reasons=target.reasons | extra.reasons,
            )
        merged.append(target)
    merged += fleet.values()
    merged.sort(key=lambda t: (t.flatcar_version, t.driver_version), reverse=True)
    return tuple(merged)
