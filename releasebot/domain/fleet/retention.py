"""Retention: which of releasebot's own registry tags may go, and why every other one stays.

``plan_retention`` is one pure function from what releasebot knows (the repository's tags,
the fleet as listed now, the fleet history, when each Flatcar feed last listed each
release, the current targets) to a ``RetentionPlan``: the tags to delete, each with its
reason, and the tags kept, each with its reason. A tag may go only when ALL hold:

1. it has releasebot's own shape, ``<driver>-flatcar<version>`` (or a multi-arch target's
   per-arch ``<driver>-flatcar<version>-<arch>``); any other tag is not releasebot's and
   is never considered; a driver base's tag (``<driver>-base-<arch>-r<revision>-<os>``)
   is releasebot's but always kept, with its reason (``BASE_KEPT``);
2. no GPU node runs its Flatcar version, none will reboot into it (FLUO's
   ``new-version``), and none the store saw within the retention period ran it (a node
   pool scaled to zero comes back);
3. every Flatcar feed releasebot has read stopped listing the version more than
   ``after`` ago (a version no feed ever listed is kept: releasebot cannot date it);
4. no current (required) target is that tag.

The fleet view must be sure: when the Nodes could not be listed, or not all of them (an
item of the listing skipped, the listing cut short by a bound), or a GPU node's Flatcar
version (or pending version) cannot be read, NOTHING is deleted and ``held`` says why.

``guard_shared_digests`` is the second, equally pure step once the service has resolved
every tag's digest and everything each digest reaches (an index's images, signatures,
attestations, referrers): a registry deletes a manifest by digest, which removes EVERY tag
pointing at it, and a kept image whose signature is deleted is refused by admission
control. So the plan's ``protected`` set is every digest any kept tag reaches, computed
before anything is deleted; a candidate in it is kept (and what it reaches joins the set,
until nothing changes), and no attachment in it is ever deleted. A digest whose reach is
not known is a doubt, and a doubt keeps: nothing is deleted. Deliberately not here:
reading the registry, deleting, recording (``service/retention.py``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta

from releasebot.domain.fleet.nodes import FleetNode, IgnoredNode, ParsedNode
from releasebot.domain.fleet.records import FleetRecord
from releasebot.domain.shared.versions import Arch, DriverVersion, FlatcarVersion
from releasebot.domain.targets.base_tags import parse_base_tag
from releasebot.domain.targets.models import TargetRecord

DEFAULT_AFTER = timedelta(days=30)
"""How long a release must have been out of every feed before its tags may go."""
DEFAULT_MAX_DELETIONS = 50
"""Deletions per run at most: a bug or a bad input never empties a repository at once."""

_TAG = re.compile(
    r"(?P<driver>[0-9][0-9.]*)-flatcar(?P<flatcar>[0-9]+\.[0-9]+\.[0-9]+)"
    r"(?:-(?P<arch>amd64|arm64))?"
)
BASE_KEPT = "a driver base: the images of its driver share its layers; retention keeps bases"
"""Why a base tag (``domain/targets/bases.py``) stays: retention deletes only Flatcar-shaped tags
(a base has no Flatcar version to judge), and a kept image is built on its base's blobs."""
_PENDING_NOTE = "FLUO new-version"
"""How ``fleet.parse_node`` notes a pending version it could not read."""


@dataclass(frozen=True)
class OwnTag:
    """A tag of releasebot's own shape."""

    tag: str
    driver: DriverVersion
    flatcar: FlatcarVersion
    arch: Arch | None = None
    """Set for a multi-arch target's per-arch tag."""

    @property
    def image_tag(self) -> str:
        """The target tag this one belongs to (itself, or the tag of its index)."""
        return f"{self.driver.text}-flatcar{self.flatcar.text}"


def parse_own_tag(tag: str) -> OwnTag | None:
    """``OwnTag`` for a tag of releasebot's shape; ``None`` for any other tag."""
    match = _TAG.fullmatch(tag)
    if match is None:
        return None
    driver, flatcar = match.group("driver"), match.group("flatcar")
    if not DriverVersion.is_valid(driver) or not FlatcarVersion.is_valid(flatcar):
        return None
    arch = match.group("arch")
    return OwnTag(
        tag,
        DriverVersion.parse(driver),
        FlatcarVersion.parse(flatcar),
        None if arch is None else Arch(arch),
    )


@dataclass(frozen=True)
class Listing:
    """That one Flatcar feed lists (or listed) one release, as the store remembers it."""

    feed: str
    version: str
    present: bool
    last_seen_at: datetime
    """When the feed last listed it; meaningful once it is no longer ``present`` (the
    feed's last successful poll before the body that dropped it)."""


@dataclass(frozen=True)
class Deletion:
    tag: str
    flatcar: FlatcarVersion
    reason: str
    digest: str | None = None
    """Set by ``guard_shared_digests``: what the registry is asked to delete."""


@dataclass(frozen=True)
class Kept:
    tag: str
    reason: str


@dataclass(frozen=True)
class RetentionPlan:
    delete: tuple[Deletion, ...]
    keep: tuple[Kept, ...]
    held: str | None = None
    """Why nothing at all may be deleted (the fleet view is unsure); ``None``: sure."""
    foreign: int = 0
    """Tags not of releasebot's shape, left alone."""
    protected: frozenset[str] = frozenset()
    """Set by ``guard_shared_digests``: every digest a kept tag reaches (its manifest, an
    index's images, signatures, attestations, referrers). Never deleted."""


@dataclass(frozen=True)
class RetentionInputs:
    tags: Iterable[str]
    nodes: Sequence[ParsedNode] | None
    """The fleet as listed now; ``None`` when it could not be listed."""
    listings: Sequence[Listing]
    targets: Sequence[TargetRecord]
    """The current (required) targets."""
    history: Sequence[FleetRecord] = ()
    """The latest record of every node the store has seen."""
    fleet_problem: str | None = None
    fleet_unsure: str | None = None
    """Why ``nodes`` may not be every node (``NodeListing.unsure``): nothing is deleted."""


def plan_retention(
    inputs: RetentionInputs,
    *,
    now: datetime,
    after: timedelta = DEFAULT_AFTER,
    max_deletions: int = DEFAULT_MAX_DELETIONS,
) -> RetentionPlan:
    """What may be deleted from the repository, and why everything else stays."""
    own: list[OwnTag] = []
    bases: list[Kept] = []
    foreign = 0
    for tag in sorted(set(inputs.tags)):
        parsed = parse_own_tag(tag)
        if parsed is not None:
            own.append(parsed)
        elif parse_base_tag(tag) is not None:
            bases.append(Kept(tag, BASE_KEPT))
        else:
            foreign += 1
    held = _unsure(inputs.nodes, inputs.fleet_problem, inputs.fleet_unsure)
    if held is not None:
        kept = tuple(Kept(tag.tag, "the fleet view is unsure: deleting nothing") for tag in own)
        return RetentionPlan((), (*kept, *bases), held, foreign)
    in_use = _in_use(inputs.nodes or (), inputs.history, now - after)
    channels = _channel_reasons(inputs.listings, now, after)
    targets = {record.tag for record in inputs.targets}
    left: dict[str, datetime] = {}
    for li in inputs.listings:
        left[li.version] = max(li.last_seen_at, left.get(li.version, li.last_seen_at))
    delete: list[Deletion] = []
    keep: list[Kept] = []
    for own_tag in own:
        version = own_tag.flatcar.text
        if own_tag.image_tag in targets:
            keep.append(Kept(own_tag.tag, f"a current target ({own_tag.image_tag})"))
        elif version in in_use:
            keep.append(Kept(own_tag.tag, in_use[version]))
        elif channels.get(version) is not None:
            keep.append(Kept(own_tag.tag, channels[version] or ""))
        elif version not in channels:
            keep.append(
                Kept(own_tag.tag, f"no Flatcar feed releasebot reads ever listed {version}")
            )
        elif len(delete) >= max_deletions:
            keep.append(Kept(own_tag.tag, f"over this run's limit of {max_deletions} deletions"))
        else:
            why = _why(version, left[version], after)
            delete.append(Deletion(own_tag.tag, own_tag.flatcar, why))
    return RetentionPlan(tuple(delete), (*keep, *bases), None, foreign)


def guard_shared_digests(
    plan: RetentionPlan,
    digests: Mapping[str, str | None],
    reaches: Mapping[str, frozenset[str]],
) -> RetentionPlan:
    """``plan`` with each deletion's digest set and ``protected`` filled: candidates whose
    digest a kept tag reaches are kept, those whose tag is gone (``None``) dropped.

    ``digests`` maps every tag of the repository that might share a manifest (releasebot's
    and others', attachments aside) to its digest; ``reaches`` maps each of those digests
    to every digest it reaches, itself included. A digest missing from ``reaches`` is a
    doubt: the plan is held and nothing is deleted."""
    deleting = {deletion.tag for deletion in plan.delete}
    keep = list(plan.keep)
    candidates: dict[str, Deletion] = {}
    for deletion in plan.delete:
        digest = digests.get(deletion.tag)
        if digest is None:
            keep.append(Kept(deletion.tag, "the registry no longer has the tag"))
        else:
            candidates[deletion.tag] = replace(deletion, digest=digest)
    unknown = sorted(
        tag for tag, digest in digests.items() if digest is not None and digest not in reaches
    )
    if unknown:
        why = f"what tag {unknown[0]} reaches is not known: deleting nothing"
        return _hold(replace(plan, keep=tuple(keep)), list(candidates.values()), why)
    protected: dict[str, str] = {}
    """digest -> the kept tag that reaches it (the first by name)."""
    pending = sorted(
        tag for tag, digest in digests.items() if digest is not None and tag not in deleting
    )
    while pending:
        for tag in pending:
            for reached in sorted(reaches[digests[tag] or ""]):
                protected.setdefault(reached, tag)
        pending = []
        for tag, deletion in sorted(candidates.items()):
            holder = protected.get(deletion.digest or "")
            if holder is None:
                continue
            if digests[holder] == deletion.digest:
                keep.append(Kept(tag, f"shares its digest with kept tag {holder}"))
            else:
                keep.append(
                    Kept(
                        tag,
                        f"kept tag {holder} reaches its manifest (an image of its index, "
                        "a signature, an attestation or a referrer)",
                    )
                )
            del candidates[tag]
            pending.append(tag)  # kept now: what it reaches is protected too
    return replace(
        plan,
        delete=tuple(
            candidates[deletion.tag] for deletion in plan.delete if deletion.tag in candidates
        ),
        keep=tuple(sorted(keep, key=lambda k: k.tag)),
        protected=frozenset(protected),
    )


def hold_plan(plan: RetentionPlan, why: str) -> RetentionPlan:
    """``plan`` deleting nothing, every candidate kept because of ``why``."""
    return _hold(plan, plan.delete, why)


def _hold(plan: RetentionPlan, candidates: Sequence[Deletion], why: str) -> RetentionPlan:
    kept = [*plan.keep, *(Kept(deletion.tag, why) for deletion in candidates)]
    return replace(plan, delete=(), keep=tuple(sorted(kept, key=lambda k: k.tag)), held=why)


def _unsure(
    nodes: Sequence[ParsedNode] | None, problem: str | None, unsure: str | None
) -> str | None:
    if nodes is None:
        return f"the fleet could not be listed ({problem or 'no fleet view'}): deleting nothing"
    if unsure is not None:
        return f"the fleet view is unsure ({unsure}): deleting nothing"
    for node in nodes:
        if isinstance(node, IgnoredNode) and node.is_gpu and _maybe_flatcar(node):
            return (
                f"GPU node {node.name} has no Flatcar version releasebot can read "
                f"({node.reason}): deleting nothing"
            )
        if isinstance(node, FleetNode) and node.is_gpu:
            note = next((n for n in node.notes if n.startswith(_PENDING_NOTE)), None)
            if note is not None:
                return f"GPU node {node.name}: {note}: deleting nothing"
    return None


def _maybe_flatcar(node: IgnoredNode) -> bool:
    """An ignored node that may still pull a Flatcar tag: one whose NFD labels do not say
    another OS (no labels, a Flatcar without a readable version, an odd arch)."""
    return node.os_tag is None or node.os_tag.lower().startswith("flatcar")


def _in_use(
    nodes: Iterable[ParsedNode], history: Iterable[FleetRecord], since: datetime
) -> dict[str, str]:
    """Flatcar version -> why a GPU node needs it (running, pending, recently seen)."""
    used: dict[str, str] = {}
    for node in nodes:
        if not isinstance(node, FleetNode) or not node.is_gpu:
            continue
        used.setdefault(node.version.text, f"GPU node {node.name} runs it")
        if node.pending_version is not None:
            text = node.pending_version.text
            used.setdefault(text, f"GPU node {node.name} will reboot into it")
    for record in history:
        state = record.state
        if state.gpu and state.version is not None and record.last_seen_at >= since:
            used.setdefault(
                state.version,
                f"GPU node {state.name} ran it on {record.last_seen_at:%Y-%m-%d}",
            )
        if state.gpu and state.pending_version is not None and record.last_seen_at >= since:
            used.setdefault(
                state.pending_version,
                f"GPU node {state.name} was about to reboot into it on "
                f"{record.last_seen_at:%Y-%m-%d}",
            )
    return used


def _channel_reasons(
    listings: Iterable[Listing], now: datetime, after: timedelta
) -> dict[str, str | None]:
    """Flatcar version -> why a feed keeps it (``None``: every feed let it go long ago);
    versions no feed ever listed are absent."""
    reasons: dict[str, str | None] = {}
    for listing in sorted(listings, key=lambda li: (li.version, li.feed)):
        current = reasons.get(listing.version)
        if listing.version in reasons and current is not None and "lists it" in current:
            continue
        if listing.present:
            reasons[listing.version] = f"the {listing.feed} feed lists it"
        elif now - listing.last_seen_at <= after:
            reasons[listing.version] = (
                f"left the {listing.feed} feed on {listing.last_seen_at:%Y-%m-%d}, "
                f"{_days(after)} not yet passed"
            )
        else:
            reasons.setdefault(listing.version, None)
    return reasons


def _why(version: str, left: datetime, after: timedelta) -> str:
    return (
        f"Flatcar {version}: no GPU node runs or will reboot into it, it left every feed on "
        f"{left:%Y-%m-%d} (over {_days(after)} ago), no current target"
    )


def _days(period: timedelta) -> str:
    days = period / timedelta(days=1)
    return f"{days:g} day" + ("" if days == 1 else "s")


@dataclass(frozen=True)
class DeletionRecord:
    """One tag retention deleted, as the store keeps it (``retention_deletions``)."""

    tag: str
    digest: str
    flatcar_version: str
    reason: str
    deleted_at: datetime
    attachments: int = 0
    """Signature, attestation and referrer manifests deleted with it."""
