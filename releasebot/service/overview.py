"""Use case: what the coverage page and its JSON API show, read through the store's port.

Each question is one short series of reads (``StateStore``) handed to the pure builders of
``domain.views.overview`` and ``domain.views.overview_fleet``; nothing is written, nothing
reaches the
cluster, the registry or Slack, so the page can be asked as often as browsers like. A store
that cannot answer raises its own ``ReleasebotError`` (``StoreUnavailableError`` when it
cannot be reached, ``StoreError`` when it answers with what releasebot cannot read); the
web layer answers 503 with one line for each, never a traceback.

What each answer depends on is said here, next to the reads (``READS``): the tables whose
change counters (``StateStore.revisions``) the web layer compares before it answers from
what it built last time. Nothing else in an answer moves: no answer holds a relative time
(the page computes "3 min ago" itself) and the process's options are fixed for its life.
The matrix counts the GPU nodes per version: a fleet listing that only moved the nodes'
``last_seen_at`` (every cycle's) changes no count, so ``matrix_basis`` lets the web layer
keep the matrix it built instead of building 10,000 cells again.

``/api/fleet`` needs the targets only of the versions GPU nodes run or will reboot into
(``overview_fleet.fleet_versions``), none without GPU nodes: those few are kept, by the
``targets`` counter, and read again only when it moves, when the nodes' versions are not
among the kept ones, or after ``recheck_after`` (an edit behind releasebot's back moves no
counter).

Deliberately not here: HTTP, query strings, ETags, the cache of built answers
(``web/overview.py``, ``web/answers.py``).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass

from releasebot.domain.ports import StateStore
from releasebot.domain.targets.events import build_key
from releasebot.domain.targets.models import FlatcarRelease, TargetRecord, TargetState
from releasebot.domain.views import overview, overview_fleet
from releasebot.domain.views.overview import RECHECK_AFTER_SECONDS
from releasebot.domain.views.overview_words import Json
from releasebot.service.releases import flatcar_releases_by_version

_RELEASES = ("flatcar_releases", "flatcar_feed_entries")
"""What ``_releases`` reads besides the feed names: a Flatcar feed's releases are written
with its entries (``record_flatcar_feed``), and a feed row without entries adds none, so
the ``feeds`` counter (moved by every poll) is not among them."""
READS: Mapping[str, tuple[str, ...]] = {
    "targets": ("targets", "builds", "fleet_nodes", *_RELEASES),
    "target": ("targets", "builds", "outbox", "message_refs", *_RELEASES),
    "fleet": ("fleet_nodes", "targets"),
    "feeds": ("feeds",),
}
"""Per question, the tables its answer is read from (``StateStore.revisions`` names)."""
BASIS_TABLES: Mapping[str, tuple[str, ...]] = {"targets": ("fleet_nodes",)}
"""Per question, tables it reads only in part: when nothing else moved, the question's
basis (``matrix_basis``) says whether the answer changed."""


@dataclass(frozen=True)
class OverviewOptions:
    repository: str
    """The driver repository, for the pull reference (``host/path``: no credential)."""
    gate: bool = False
    """Whether the reboot gate is on (the page shows each node's gate then)."""


@dataclass(frozen=True)
class _Kept:
    """The required targets of some Flatcar versions as read at one ``targets`` counter."""

    revision: int
    versions: frozenset[str]
    records: tuple[TargetRecord, ...]
    read_at: float


class OverviewService:
    """The page's questions, answered from the store."""

    def __init__(
        self,
        store: StateStore,
        options: OverviewOptions,
        *,
        recheck_after: float = RECHECK_AFTER_SECONDS,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._store = store
        self._options = options
        self.recheck_after = recheck_after
        self._monotonic = monotonic
        self._kept: _Kept | None = None
        self._kept_lock = threading.Lock()
        self._fresh_at = monotonic()

    def revisions(self) -> dict[str, int]:
        """The store's change counters (one small read)."""
        return self._store.revisions()

    def reads(self, question: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
        """The tables ``question``'s answer is read from, and those of them it reads only in
        part (``matrix_basis`` says whether they changed the answer)."""
        return READS[question], BASIS_TABLES.get(question, ())

    def targets(
        self,
        *,
        state: TargetState | None = None,
        flatcar: str | None = None,
        driver: str | None = None,
    ) -> Json:
        return overview.matrix_view(
            self._stored_targets(),
            self._store.fleet_nodes(),
            self._releases(),
            builds=self._store.builds(),
            state=state,
            flatcar=flatcar,
            driver=driver,
        )

    def matrix_basis(self) -> Hashable:
        """What the matrix takes from ``fleet_nodes``: the node counts per version."""
        running, pending = overview_fleet.node_counts(self._store.fleet_nodes())
        return (tuple(sorted(running.items())), tuple(sorted(pending.items())))

    def target(self, tag: str) -> Json | None:
        """One target's detail; ``None`` when the store has no such tag."""
        record = self._store.target(tag)
        if record is None:
            return None
        key = build_key(record.tag, record.attempts)
        return overview.target_detail(
            record,
            self._store.builds(tag=tag),
            self._store.outbox_events(key),
            self._store.message_ref(key),
            repository=self._options.repository,
            release=self._releases().get(record.target.flatcar_version.text),
        )

    def fleet(self) -> Json:
        """The banner and the GPU nodes; the targets only of the nodes' versions."""
        revision = self._store.revisions().get("targets", 0)  # before the reads it covers
        nodes = self._store.fleet_nodes()
        versions = overview_fleet.fleet_versions(nodes)
        targets = self._targets_of(versions, revision) if versions else ()
        return overview_fleet.fleet_view(nodes, targets, gate=self._options.gate)

    def feeds(self) -> Json:
        return overview.feeds_view(self._store.feed_states())

    def _targets_of(self, versions: frozenset[str], revision: int) -> tuple[TargetRecord, ...]:
        """The required targets of ``versions``: those kept when still good, else read."""
        now = self._monotonic()
        with self._kept_lock:
            kept = self._kept
            if (
                kept is not None
                and kept.revision == revision
                and versions <= kept.versions
                and now - kept.read_at < self.recheck_after
            ):
                return tuple(r for r in kept.records if r.target.flatcar_version.text in versions)
        records = tuple(
            record
            for record in self._stored_targets()
            if record.target.flatcar_version.text in versions
        )
        with self._kept_lock:
            self._kept = _Kept(revision, versions, records, now)
        return records

    def _stored_targets(self) -> list[TargetRecord]:
        """The store's required targets, read afresh at least every ``recheck_after``.

        The store keeps decoded rows under the ``targets`` counter (``store/targetcache.py``,
        shared with the cycle in ``run``); an edit behind releasebot's back moves no counter,
        so at the recheck the store is asked to forget them first, or a rebuilt answer would
        be built from the same rows. At most once per ``recheck_after``, whatever the number
        of answers or clients.
        """
        now = self._monotonic()
        with self._kept_lock:
            due = now - self._fresh_at >= self.recheck_after
            if due:
                self._fresh_at = now
        if due:
            self._store.forget()
        return self._store.targets()

    def _releases(self) -> dict[str, FlatcarRelease]:
        """Each Flatcar version's release, by its text, as the plan sees it."""
        releases = flatcar_releases_by_version(self._store)
        return {version.text: release for version, release in releases.items()}
