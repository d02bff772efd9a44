"""Coverage: for each GPU node, whether the driver images it needs exist.

``fleet_coverage`` is one pure function from what the fleet needs (``fleet_plan``) and the
stored targets (their lifecycle states) to a ``Coverage``: a ``Verdict`` per GPU node for
the version it runs, another for the version it will reboot into, and what that means for
alerting. ``releasebot fleet``, the metrics, the Slack alert and the reboot gate all read
this one answer, so they cannot disagree. The coverage page cannot: it reads the store
alone, which keeps no ``FleetPlan`` (which driver the GPU Operator gives which node, from
which repository), so ``overview_fleet`` asks for every fleet image of a node's version and
judges them by this module's ``state_verdict`` and ``worst``: it may call a node uncovered
that this calls covered, never the other way round. Verdicts, worst first:

- ``unknown-version``: no Flatcar feed releasebot reads lists the version, so no image can
  be built (a release pulled upstream, a private build, a feed not configured);
- ``failed``: the image's target failed and waits for a person;
- ``missing``: no image and none being built (not planned yet, waiting for its inputs,
  paused, or a driver releasebot cannot build: the node's note says which);
- ``building``: a build is running or will be retried;
- ``verified``: the registry holds the tag and releasebot's checks passed (``published``);
- ``foreign-repository``: the node pulls from a repository that is not releasebot's;
  releasebot builds into its own and says nothing about the other.

A node is *exposed* when it runs a version without a verified image, or will reboot into
one that has no prospect of an image (missing, failed, unknown). Exposures are counted per
Flatcar version, the unit a person fixes, so one alert covers a hundred nodes rebooting
into the same release. Deliberately not here: time (how long something was missing is
Prometheus's ``for:``) and reading anything.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from releasebot.domain.fleet.nodes import IgnoredNode
from releasebot.domain.fleet.plan import FleetPlan, Need, NodeNeeds
from releasebot.domain.shared.versions import Arch, FlatcarVersion
from releasebot.domain.targets.models import TargetRecord, TargetState


class Verdict(enum.StrEnum):
    UNKNOWN_VERSION = "unknown-version"
    FAILED = "failed"
    MISSING = "missing"
    BUILDING = "building"
    VERIFIED = "verified"
    FOREIGN = "foreign-repository"


_WORST_FIRST = (
    Verdict.UNKNOWN_VERSION,
    Verdict.FAILED,
    Verdict.MISSING,
    Verdict.BUILDING,
    Verdict.VERIFIED,
)
_BY_STATE = {
    TargetState.PUBLISHED: Verdict.VERIFIED,
    TargetState.BUILDING: Verdict.BUILDING,
    TargetState.RETRYING: Verdict.BUILDING,
    TargetState.FAILED: Verdict.FAILED,
    TargetState.INCOMPATIBLE: Verdict.FAILED,  # it will not build: as bad for the node
    TargetState.REFUSED: Verdict.FAILED,  # a node could not prove it: no other node gets it
    TargetState.UNKNOWN: Verdict.MISSING,
    TargetState.MISSING: Verdict.MISSING,
    TargetState.WAITING: Verdict.MISSING,
    TargetState.STALE: Verdict.MISSING,  # the tag lacks an arch the plan now wants
}
RUNNING_EXPOSED = frozenset(set(Verdict) - {Verdict.VERIFIED, Verdict.FOREIGN})
PENDING_EXPOSED = frozenset({Verdict.UNKNOWN_VERSION, Verdict.FAILED, Verdict.MISSING})


@dataclass(frozen=True)
class ImageCoverage:
    """One image a node needs, and how it stands."""

    tag: str | None
    flatcar: FlatcarVersion
    pending: bool
    verdict: Verdict
    state: TargetState | None = None
    """The target's lifecycle state, if releasebot has one for the tag."""
    problem: str | None = None
    proven: bool = False
    """A GPU node of this arch proved the image after rebooting into it (the after-reboot
    proof)."""


@dataclass(frozen=True)
class NodeCoverage:
    name: str
    arch: Arch
    version: FlatcarVersion
    verdict: Verdict
    """For the version the node runs."""
    pending_version: FlatcarVersion | None
    pending_verdict: Verdict | None
    """For the version it will reboot into; ``None`` when nothing is pending."""
    before_reboot: bool
    """FLUO wants to reboot it now (``before-reboot=true``)."""
    images: tuple[ImageCoverage, ...]
    source: str | None = None
    """The GPU Operator object that gives the node its driver, if known."""
    note: str | None = None
    reference: str | None = None
    """The exact image reference the operator makes the node pull now, when known."""
    pending_reference: str | None = None
    """The one it will pull after its pending reboot (the pool it will be in then)."""
    pending_source: str | None = None

    @property
    def exposed(self) -> bool:
        return self.verdict in RUNNING_EXPOSED or self.pending_verdict in PENDING_EXPOSED


@dataclass(frozen=True)
class Exposure:
    """A Flatcar version some GPU nodes run or will reboot into without an image."""

    version: FlatcarVersion
    verdict: Verdict
    """The worst verdict among its images."""
    running: tuple[str, ...]
    """Nodes that run it now without a verified image."""
    pending: tuple[str, ...]
    """Nodes that will reboot into it."""
    images: tuple[ImageCoverage, ...]

    @property
    def key(self) -> str:
        return self.version.text


@dataclass(frozen=True)
class Coverage:
    nodes: tuple[NodeCoverage, ...]
    """Every Flatcar GPU node, by name."""
    ignored: tuple[IgnoredNode, ...]
    """GPU nodes releasebot builds nothing for, and why."""
    exposures: tuple[Exposure, ...]
    """Per Flatcar version, newest first."""

    def counts(self) -> dict[Verdict, int]:
        """Nodes per verdict for the version they run (every verdict present, maybe 0)."""
        counts = dict.fromkeys(Verdict, 0)
        for node in self.nodes:
            counts[node.verdict] += 1
        return counts

    def missing_images(self, *, pending: bool) -> int:
        """Distinct images (or versions without a feed) that nodes need for the version
        they run (``pending=False``) or will reboot into, and that are not verified."""
        missing = {
            image.tag or f"flatcar{image.flatcar}"
            for node in self.nodes
            if node.verdict is not Verdict.FOREIGN
            for image in node.images
            if image.pending is pending and image.verdict is not Verdict.VERIFIED
        }
        return len(missing)


def fleet_coverage(plan: FleetPlan, records: Mapping[str, TargetRecord]) -> Coverage:
    """How every GPU node of ``plan`` stands, given the stored targets by tag."""
    nodes = tuple(_node(entry, records) for entry in plan.nodes)
    return Coverage(nodes, plan.ignored, _exposures(nodes))


def worst(verdicts: Iterable[Verdict]) -> Verdict:
    """The worst of ``verdicts`` (``missing`` when there is none: nothing to pull)."""
    found = set(verdicts)
    return next((verdict for verdict in _WORST_FIRST if verdict in found), Verdict.MISSING)


def state_verdict(state: TargetState) -> Verdict:
    """The verdict of an image whose target is in ``state`` (the coverage page asks too)."""
    return _BY_STATE[state]


def _node(entry: NodeNeeds, records: Mapping[str, TargetRecord]) -> NodeCoverage:
    node = entry.node
    images = tuple(_image(need, records) for need in entry.needs)
    pending = node.pending_version
    if entry.foreign is not None:
        verdict: Verdict = Verdict.FOREIGN
    else:
        verdict = worst(image.verdict for image in images if not image.pending)
    pending_verdict: Verdict | None = None
    if pending is not None:
        pending_verdict = (
            Verdict.FOREIGN
            if entry.pending_foreign is not None
            else worst(i.verdict for i in images if i.pending)
        )
    return NodeCoverage(
        name=node.name,
        arch=node.arch,
        version=node.version,
        verdict=verdict,
        pending_version=pending,
        pending_verdict=pending_verdict,
        before_reboot=node.fluo.before_reboot,
        images=images,
        source=entry.source,
        note=next((i.problem for i in images if i.problem), entry.note),
        reference=entry.reference,
        pending_reference=entry.pending_reference,
        pending_source=entry.pending_source,
    )


def _image(need: Need, records: Mapping[str, TargetRecord]) -> ImageCoverage:
    record = None if need.tag is None else records.get(need.tag)
    state = None if record is None else record.state
    if need.unknown_version:
        verdict = Verdict.UNKNOWN_VERSION
    elif not need.buildable or state is None:
        verdict = Verdict.MISSING
    else:
        verdict = _BY_STATE[state]
    proven = record is not None and need.arch in record.proven_arches
    return ImageCoverage(need.tag, need.flatcar, need.pending, verdict, state, need.problem, proven)


def _exposures(nodes: Iterable[NodeCoverage]) -> tuple[Exposure, ...]:
    running: dict[FlatcarVersion, list[str]] = {}
    pending: dict[FlatcarVersion, list[str]] = {}
    images: dict[FlatcarVersion, dict[str | None, ImageCoverage]] = {}
    for node in nodes:
        if node.verdict in RUNNING_EXPOSED:
            running.setdefault(node.version, []).append(node.name)
            for image in node.images:
                if not image.pending and image.verdict is not Verdict.VERIFIED:
                    images.setdefault(node.version, {})[image.tag] = image
        if node.pending_version is not None and node.pending_verdict in PENDING_EXPOSED:
            pending.setdefault(node.pending_version, []).append(node.name)
            for image in node.images:
                if image.pending and image.verdict is not Verdict.VERIFIED:
                    images.setdefault(node.pending_version, {})[image.tag] = image
    exposures = []
    for version in sorted({*running, *pending}, reverse=True):
        shown = tuple(images.get(version, {}).values())
        exposures.append(
            Exposure(
                version,
                worst(image.verdict for image in shown),
                tuple(running.get(version, ())),
                tuple(pending.get(version, ())),
                shown,
            )
        )
    return tuple(exposures)


def coverage_json(coverage: Coverage) -> dict[str, object]:
    """The one JSON shape of a coverage (``releasebot fleet --format json``, the demo)."""

    def image(item: ImageCoverage) -> dict[str, object]:
        return {
            "tag": item.tag,
            "flatcar_version": item.flatcar.text,
            "pending": item.pending,
            "verdict": item.verdict.value,
            "state": None if item.state is None else item.state.value,
            "problem": item.problem,
            "proven": item.proven,
        }

    return {
        "counts": {verdict.value: count for verdict, count in coverage.counts().items()},
        "nodes": [
            {
                "name": node.name,
                "arch": node.arch.value,
                "flatcar_version": node.version.text,
                "verdict": node.verdict.value,
                "pending_version": None
                if node.pending_version is None
                else node.pending_version.text,
                "pending_verdict": None
                if node.pending_verdict is None
                else node.pending_verdict.value,
                "before_reboot": node.before_reboot,
                "source": node.source,
                "image": node.reference,
                "pending_source": node.pending_source,
                "pending_image": node.pending_reference,
                "note": node.note,
                "images": [image(item) for item in node.images],
            }
            for node in coverage.nodes
        ],
        "ignored": [{"name": node.name, "reason": node.reason} for node in coverage.ignored],
        "exposed": [exposure.key for exposure in coverage.exposures],
    }
