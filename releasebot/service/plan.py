"""Use case: poll every feed, remember what it said, and plan the targets.

One feed failing never stops the others: its error is recorded, its last good data stays in
the store and keeps feeding the plan. The plan itself is computed from the store (every
release ever seen), not from this poll's bodies, so a feed that answered 304 or failed
costs nothing and loses nothing.

With a ``FleetService``, the plan starts from the fleet: the channel feeds its GPU nodes
follow are polled too (configured or not), and every version a GPU node runs or will
reboot into becomes a target (``domain.fleet.plan``), looked up in every Flatcar feed
releasebot has ever read.

What the plan read is kept (``_KeptPlan``) with the change counters of the release tables
it came from: while no feed body changed, a cycle neither reads the releases again nor
plans again, and when the targets' counter has not moved since a ``sync_targets`` that
wrote nothing, it does not sync again either (the same list comes back, so the registry
check can tell the plan did not change). With a fleet, the Nodes are listed and their
needs worked out every cycle (cheap: a need per node), but the releases they are looked up
in are the kept ones, and while the fleet adds the same targets to the channel plan the
merged plan is the kept one (``plan_fleet``'s ``same_as``), so the rest is kept as without
a fleet. ``forget`` drops it all (the cycle's full pass).

This module does not print: it reports each feed's outcome to a callback and returns a
``PlanResult``; the CLI decides how to show it. Nor does it read the feeds' formats: the
parsers (``sources.flatcar``, ``sources.nvidia``) are handed to it by the wiring.
"""

from __future__ import annotations

import enum
import logging
import time
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta

from releasebot.domain.fleet.plan import FleetPlan, fleet_channels
from releasebot.domain.fleet.told import Flag, FlagChange, feed_answered, feed_failed, feed_flag
from releasebot.domain.ports import (
    DriverFeedParser,
    FeedFetcher,
    FetchedBody,
    FlatcarFeedParser,
    StateStore,
)
from releasebot.domain.shared.errors import FeedFormatError, ReleasebotError, UnknownTargetError
from releasebot.domain.shared.versions import Arch, DriverVersion, FlatcarVersion
from releasebot.domain.targets.models import (
    DriverRelease,
    FeedState,
    FlatcarRelease,
    Target,
    TargetRecord,
)
from releasebot.domain.targets.policy import Policy, plan_targets, select_drivers, skip_incompatible
from releasebot.service.fleet import FleetService, FleetSnapshot
from releasebot.service.releases import (
    FLATCAR_FEED_PREFIX,
    flatcar_feed_name,
    flatcar_feed_names,
    flatcar_releases_by_version,
    releases_of_feeds,
)

log = logging.getLogger("releasebot.plan")

NVIDIA_FEED = "nvidia"


class FeedKind(enum.Enum):
    FLATCAR = "flatcar"
    NVIDIA = "nvidia"


@dataclass(frozen=True)
class FeedSpec:
    """One feed to poll: its name in the store, its URL and which parser reads it."""

    name: str
    url: str
    kind: FeedKind
    channel: str = ""

    @classmethod
    def flatcar(cls, channel: str, url: str) -> FeedSpec:
        return cls(flatcar_feed_name(channel), url, FeedKind.FLATCAR, channel)

    @classmethod
    def nvidia(cls, url: str) -> FeedSpec:
        return cls(NVIDIA_FEED, url, FeedKind.NVIDIA)


class PollStatus(enum.Enum):
    CHANGED = "changed"
    UNCHANGED = "unchanged"
    FAILED = "failed"


@dataclass(frozen=True)
class FeedOutcome:
    feed: str
    status: PollStatus
    releases: int = 0
    """Releases in the body when it changed; 0 otherwise."""
    requests: int = 0
    elapsed: timedelta = timedelta()
    error: ReleasebotError | None = None


RELEASE_TABLES = (
    "flatcar_releases",
    "flatcar_feed_entries",
    "driver_releases",
    "driver_feed_entries",
)
"""The tables the channel plan is made from: while their counters stay, so does the plan."""


@dataclass
class _KeptPlan:
    """The channel plan as made from the release tables at ``counters``, and what
    ``sync_targets`` returned for it (``synced``) while ``targets`` stayed at ``synced_at``."""

    counters: tuple[int, ...]
    drivers: list[DriverRelease]
    planned: list[Target]
    warnings: list[str]
    source: Sequence[Target] | None = None
    """What ``kept``, ``skipped`` and ``synced`` were made from: ``planned``, or a fleet
    plan's ``targets`` (compared by identity: ``plan_fleet`` hands the same tuple back while
    the fleet adds the same targets)."""
    kept: list[Target] = field(default_factory=list)
    """``source`` once ``skip_incompatible`` ran."""
    skipped: list[str] = field(default_factory=list)
    synced: list[TargetRecord] | None = None
    synced_at: int | None = None
    releases: dict[FlatcarVersion, FlatcarRelease] | None = None
    """Every release of the Flatcar feeds ``releases_of`` names (the fleet's lookup)."""
    releases_of: frozenset[str] = frozenset()
    listed: frozenset[FlatcarVersion] = frozenset()
    fleet: FleetPlan | None = None
    """The last fleet plan made on ``planned`` (``plan_fleet``'s ``same_as``)."""


@dataclass(frozen=True)
class PlanResult:
    targets: list[TargetRecord]
    outcomes: list[FeedOutcome]
    warnings: list[str] = field(default_factory=list)
    snapshot: FleetSnapshot | None = None
    """The fleet as listed for this plan (``None`` without a ``FleetService``)."""
    fleet: FleetPlan | None = None
    """What the fleet needs (``None`` without one, or when its Nodes could not be listed)."""
    listed: frozenset[FlatcarVersion] | None = None
    """Every Flatcar version any feed releasebot read ever listed (``None`` without a
    fleet): no image can be built for any other (``operator-values`` pools none)."""

    @property
    def failed(self) -> list[FeedOutcome]:
        return [outcome for outcome in self.outcomes if outcome.status is PollStatus.FAILED]


class PlanService:
    """Polls the configured feeds into the store and turns the store into targets."""

    def __init__(
        self,
        *,
        store: StateStore,
        fetcher: FeedFetcher,
        flatcar_feeds: Sequence[FeedSpec],
        nvidia_feed: FeedSpec,
        parse_flatcar: FlatcarFeedParser,
        parse_nvidia: DriverFeedParser,
        policy: Policy,
        clock: Callable[[], datetime],
        on_outcome: Callable[[FeedOutcome], None] = lambda outcome: None,
        feed_alert_after: timedelta | None = None,
        fleet: FleetService | None = None,
        channel_feed: Callable[[str], FeedSpec] | None = None,
    ) -> None:
        self._store = store
        self._fetcher = fetcher
        self._feeds = [*flatcar_feeds, nvidia_feed]
        self._flatcar_feeds = list(flatcar_feeds)
        self._nvidia_feed = nvidia_feed
        self._parse_flatcar = parse_flatcar
        self._parse_nvidia = parse_nvidia
        self._policy = policy
        self._clock = clock
        self._on_outcome = on_outcome
        self._feed_alert_after = feed_alert_after
        self._fleet = fleet
        self._channel_feed = channel_feed
        """The feed of a channel the fleet follows; ``None``: only the configured ones."""
        self._kept: _KeptPlan | None = None

    def forget(self) -> None:
        """Drop the kept plan: the next ``plan`` reads the releases and plans again."""
        self._kept = None

    @property
    def store(self) -> StateStore:
        return self._store

    @property
    def fleet(self) -> FleetService | None:
        return self._fleet

    def poll_feed(self, spec: FeedSpec) -> FeedOutcome:
        """Fetch one feed conditionally and record what it said (or why it failed)."""
        started = time.monotonic()
        state = self._store.feed_state(spec.name)
        # Validators are only valid for the URL they were taken from.
        validators = state.validators if state is not None and state.url == spec.url else None
        requests = 0
        try:
            result = self._fetcher.fetch(spec.name, spec.url, validators)
            requests = result.requests
            now = self._clock()
            if not isinstance(result, FetchedBody):
                self._store.record_feed_unchanged(spec.name, spec.url, result.validators, now)
                outcome = FeedOutcome(spec.name, PollStatus.UNCHANGED, requests=requests)
            else:
                count = self._record_body(spec, result, now)
                outcome = FeedOutcome(spec.name, PollStatus.CHANGED, count, requests)
        except ReleasebotError as error:
            if getattr(error, "feed", None) != spec.name:
                raise  # the store failed, not the feed: the caller decides
            now = self._clock()
            self._store.record_feed_failure(spec.name, spec.url, str(error), now)
            self._alert_if_failing_too_long(spec.name, str(error), state, now)
            outcome = FeedOutcome(spec.name, PollStatus.FAILED, requests=requests, error=error)
        else:
            self._clear_alert(spec.name, now)
        outcome = replace(outcome, elapsed=timedelta(seconds=time.monotonic() - started))
        self._on_outcome(outcome)
        return outcome

    def _alert_if_failing_too_long(
        self, feed: str, error: str, state: FeedState | None, now: datetime
    ) -> None:
        """Tell a human once when ``feed`` has failed for ``feed_alert_after``
        (``told.feed_failed``: the flags, the alert and their transactions)."""
        if self._feed_alert_after is None:
            return
        changes = feed_failed(
            feed,
            failing=self._store.flag(feed_flag(Flag.FEED_FAILING, feed)),
            alerted=self._store.flag(feed_flag(Flag.FEED_ALERTED, feed)),
            now=now,
            alert_after=self._feed_alert_after,
            error=error,
            failures=(state.consecutive_failures if state else 0) + 1,
        )
        self._apply(changes, now)

    def _clear_alert(self, feed: str, now: datetime) -> None:
        """The feed answered: forget its failure streak; tell if a human was alerted."""
        if self._feed_alert_after is None:
            return
        failing = self._store.flag(feed_flag(Flag.FEED_FAILING, feed))
        alerted = self._store.flag(feed_flag(Flag.FEED_ALERTED, feed))
        self._apply(feed_answered(feed, failing=failing, alerted=alerted, now=now), now)

    def _apply(self, changes: Sequence[FlagChange], now: datetime) -> None:
        for change in changes:  # each with its event, in one transaction
            self._store.set_flag(change.name, change.value, now, events=change.events)

    def _record_body(self, spec: FeedSpec, result: FetchedBody, now: datetime) -> int:
        try:
            if spec.kind is FeedKind.FLATCAR:
                releases = self._parse_flatcar(spec.name, result.body)
            else:
                drivers = self._parse_nvidia(spec.name, result.body)
        except ReleasebotError:
            raise
        except Exception as error:
            # The parsers translate every failure they know of (edge.json bounds the JSON);
            # one they do not is still this body's, so this feed's failure only: the other
            # feeds are polled, this one is marked failing and its alert can fire.
            log.warning(
                "feed %s: the parser failed on this body (%s)", spec.name, type(error).__name__
            )
            problem = f"unreadable body ({type(error).__name__}; a releasebot bug, please report)"
            raise FeedFormatError(spec.name, problem) from error
        if spec.kind is FeedKind.FLATCAR:
            self._store.record_flatcar_feed(spec.name, spec.url, releases, result.validators, now)
            return len(releases)
        self._store.record_driver_feed(spec.name, spec.url, drivers, result.validators, now)
        return len(drivers)

    def plan(self) -> PlanResult:
        """List the fleet (if any), poll every feed, then compute and store the targets."""
        snapshot = self._fleet.snapshot() if self._fleet is not None else None
        warnings = [] if snapshot is None else list(snapshot.problems)
        extra = self._fleet_feeds(snapshot, warnings)
        outcomes = [self.poll_feed(spec) for spec in [*self._feeds, *extra]]
        counters = self._store.revisions()
        kept = self._channel_plan(counters)
        drivers, planned = kept.drivers, kept.planned
        warnings += kept.warnings
        fleet = None
        listed = None
        source: Sequence[Target] = planned
        if self._fleet is not None and snapshot is not None:
            releases, listed = self._releases(kept, extra)
            fleet = self._fleet.plan(
                self._policy,
                planned,
                snapshot,
                releases=releases,
                drivers=drivers,
                same_as=kept.fleet,
            )
            if fleet is not None:
                kept.fleet = fleet
                source = fleet.targets
                warnings += fleet.warnings
        if kept.source is not source:
            kept.source = source
            kept.kept, kept.skipped = skip_incompatible(source, self._policy.incompatible)
            kept.synced = kept.synced_at = None
        warnings += kept.skipped
        targets = self._sync(kept, kept.kept, counters)
        return PlanResult(targets, outcomes, warnings, snapshot, fleet, listed)

    def _channel_plan(self, counters: dict[str, int]) -> _KeptPlan:
        """The channel plan: the kept one while the release tables did not move."""
        key = tuple(counters.get(table, 0) for table in RELEASE_TABLES)
        kept = self._kept
        if kept is not None and kept.counters == key:
            return kept
        flatcar = {
            spec.channel: self._store.flatcar_releases(spec.name) for spec in self._flatcar_feeds
        }
        drivers = self._store.driver_releases(self._nvidia_feed.name)
        planned = plan_targets(self._policy, flatcar, drivers)
        kept = _KeptPlan(key, drivers, planned, self._warnings(flatcar, drivers))
        self._kept = kept
        return kept

    def _sync(
        self, kept: _KeptPlan, planned: list[Target], counters: dict[str, int]
    ) -> list[TargetRecord]:
        """``sync_targets``, unless the same plan was synced with nothing written and no
        target was written since: then the same records, as the same list."""
        before = counters.get("targets", 0)
        if kept.synced is not None and kept.synced_at == before:
            return kept.synced
        targets = self._store.sync_targets(planned, self._clock())
        # Kept only when the counter did not move: this sync wrote nothing, nor anyone else.
        after = self._store.revisions().get("targets", 0)
        kept.synced, kept.synced_at = (targets, after) if after == before else (None, None)
        return targets

    def _fleet_feeds(self, snapshot: FleetSnapshot | None, warnings: list[str]) -> list[FeedSpec]:
        """The feeds of channels GPU nodes follow that are not configured."""
        if snapshot is None or snapshot.nodes is None:
            return []
        configured = {spec.channel for spec in self._flatcar_feeds}
        channels = sorted(fleet_channels(snapshot.nodes) - configured)
        if channels and self._channel_feed is None:
            warnings.append(
                f"fleet: GPU nodes follow {', '.join(channels)}, but flatcar.feed_url has no "
                "{channel}: their feeds are not read"
            )
            return []
        make = self._channel_feed
        return [] if make is None else [make(channel) for channel in channels]

    def _releases(
        self, kept: _KeptPlan, extra: Sequence[FeedSpec]
    ) -> tuple[dict[FlatcarVersion, FlatcarRelease], frozenset[FlatcarVersion]]:
        """``_all_releases``, read once per kept plan (the release tables' counters) and
        set of Flatcar feeds, and every version they list."""
        names = frozenset(self._flatcar_feed_names(extra))
        if kept.releases is None or kept.releases_of != names:
            kept.releases = self._all_releases(extra, names)
            kept.releases_of, kept.listed = names, frozenset(kept.releases)
        return kept.releases, kept.listed

    def _all_releases(
        self, extra: Sequence[FeedSpec], names: Collection[str] | None = None
    ) -> dict[FlatcarVersion, FlatcarRelease]:
        """Every release any Flatcar feed releasebot has read ever listed, by version
        (``names``: those feeds, found already)."""
        if names is None:
            return flatcar_releases_by_version(self._store, self._known_feeds(extra))
        return releases_of_feeds(self._store, names)

    def _flatcar_feed_names(self, extra: Sequence[FeedSpec]) -> set[str]:
        return flatcar_feed_names(self._store, self._known_feeds(extra))

    def _known_feeds(self, extra: Sequence[FeedSpec]) -> list[str]:
        return [spec.name for spec in [*self._flatcar_feeds, *extra]]

    def find_target(self, driver: str, flatcar: str, arches: frozenset[Arch] | None) -> Target:
        """The target for ``driver`` on ``flatcar`` from what the feeds have ever listed.

        ``arches`` defaults to the configured ones; the result has only the arches the
        release and the driver both list. Raises ``UnknownTargetError`` naming what is
        unknown, ``VersionError`` for a malformed version.
        """
        flatcar_version = FlatcarVersion.parse(flatcar)
        driver_version = DriverVersion.parse(driver)
        release = self._all_releases(()).get(flatcar_version)
        if release is None:
            read = sorted(
                name.removeprefix(FLATCAR_FEED_PREFIX) for name in self._flatcar_feed_names(())
            )
            raise UnknownTargetError(
                f"Flatcar {flatcar} is in no Flatcar feed releasebot reads ({', '.join(read)})"
            )
        drivers = {d.version: d for d in self._store.driver_releases(self._nvidia_feed.name)}
        found = drivers.get(driver_version)
        if found is None or found.version.text != driver:
            raise UnknownTargetError(f"driver {driver} is not in the NVIDIA feed")
        wanted = self._policy.flatcar.arches if arches is None else arches
        common = release.arches & found.arches & wanted
        if not common:
            offered = ", ".join(sorted(release.arches & found.arches)) or "none"
            raise UnknownTargetError(
                f"no common arch: asked {', '.join(sorted(wanted))}, "
                f"Flatcar {flatcar} and driver {driver} both offer {offered}"
            )
        return Target.of(found, release, common)

    def _warnings(
        self, flatcar: dict[str, list[FlatcarRelease]], drivers: list[DriverRelease]
    ) -> list[str]:
        warnings = []
        known_branches = {driver.branch for driver in drivers}
        for branch in sorted(self._policy.drivers.branches - known_branches):
            if drivers:
                warnings.append(f"nvidia.branches: branch {branch} is not in the NVIDIA feed")
        if drivers and not select_drivers(
            drivers, self._policy.drivers, self._policy.flatcar.arches
        ):
            warnings.append("nvidia: no driver matches nvidia.branches or nvidia.branch_types")
        for channel, releases in flatcar.items():
            wanted = self._policy.flatcar.arches
            if releases and not any(release.arches & wanted for release in releases):
                arches = ", ".join(sorted(wanted))
                warnings.append(f"flatcar/{channel}: no release offers {arches}")
        return warnings
