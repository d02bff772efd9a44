"""Use case: what the coverage page and its JSON API show, read through the store's port.

Each question is one short series of reads (``StateStore``) handed to the pure builders of
``domain.overview`` and ``domain.overview_fleet``; nothing is written, nothing reaches the
cluster, the registry or Slack, so the page can be asked as often as browsers like. A store
that cannot answer raises its own ``ReleasebotError`` (``StoreUnavailableError`` when it
cannot be reached, ``StoreError`` when it answers with what releasebot cannot read); the
web layer answers 503 with one line for each, never a traceback.

Deliberately not here: HTTP, query strings, ETags (``web/overview.py``); caching (the
answers are small and every read is one indexed query).
"""

from __future__ import annotations

from dataclasses import dataclass

from releasebot.domain import overview, overview_fleet
from releasebot.domain.events import build_key
from releasebot.domain.models import FlatcarRelease, TargetState
from releasebot.domain.overview_words import Json
from releasebot.domain.ports import StateStore

FLATCAR_FEED_PREFIX = "flatcar/"


@dataclass(frozen=True)
class OverviewOptions:
    repository: str
    """The driver repository, for the pull reference (``host/path``: no credential)."""
    gate: bool = False
    """Whether the reboot gate is on (the page shows each node's gate then)."""


class OverviewService:
    """The page's questions, answered from the store."""

    def __init__(self, store: StateStore, options: OverviewOptions) -> None:
        self._store = store
        self._options = options

    def targets(
        self,
        *,
        state: TargetState | None = None,
        flatcar: str | None = None,
        driver: str | None = None,
    ) -> Json:
        def read() -> Json:
            return overview.matrix_view(
                self._store.targets(),
                self._store.fleet_nodes(),
                self._releases(),
                builds=self._store.builds(),
                state=state,
                flatcar=flatcar,
                driver=driver,
            )

        return read()

    def target(self, tag: str) -> Json | None:
        """One target's detail; ``None`` when the store has no such tag."""

        def read() -> Json | None:
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

        return read()

    def fleet(self) -> Json:
        def read() -> Json:
            return overview_fleet.fleet_view(
                self._store.fleet_nodes(), self._store.targets(), gate=self._options.gate
            )

        return read()

    def feeds(self) -> Json:
        return overview.feeds_view(self._store.feed_states())

    def _releases(self) -> dict[str, FlatcarRelease]:
        releases: list[FlatcarRelease] = []
        for feed in self._store.feed_states():
            if feed.name.startswith(FLATCAR_FEED_PREFIX):
                releases.extend(self._store.flatcar_releases(feed.name))
        return overview.releases_by_version(releases)
