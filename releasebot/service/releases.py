"""Every Flatcar release releasebot has read, by version: one answer for the plan and the page.

A Flatcar feed is stored under ``flatcar/<channel>``, with every release it ever listed. A
version that two feeds list (a release promoted from beta to stable) counts once, as the
feed first in name order gives it, so the plan (``service/plan.py``) and the coverage page
(``service/overview.py``) always see the same release of a version.

Deliberately not here: polling and parsing the feeds (``service/plan.py``).
"""

from __future__ import annotations

from collections.abc import Iterable

from releasebot.domain.ports import StateStore
from releasebot.domain.shared.versions import FlatcarVersion
from releasebot.domain.targets.models import FlatcarRelease

FLATCAR_FEED_PREFIX = "flatcar/"
"""What the store's name of every Flatcar feed starts with."""


def flatcar_feed_name(channel: str) -> str:
    """The store's name of ``channel``'s feed."""
    return f"{FLATCAR_FEED_PREFIX}{channel}"


def flatcar_feed_names(store: StateStore, known: Iterable[str] = ()) -> set[str]:
    """``known`` feed names and every Flatcar feed the store has a row of."""
    stored = {s.name for s in store.feed_states() if s.name.startswith(FLATCAR_FEED_PREFIX)}
    return set(known) | stored


def flatcar_releases_by_version(
    store: StateStore, known: Iterable[str] = ()
) -> dict[FlatcarVersion, FlatcarRelease]:
    """Every release any Flatcar feed (``flatcar_feed_names``) ever listed, by version."""
    return releases_of_feeds(store, flatcar_feed_names(store, known))


def releases_of_feeds(
    store: StateStore, names: Iterable[str]
) -> dict[FlatcarVersion, FlatcarRelease]:
    """Every release the feeds ``names`` (found already) ever listed, by version; a version
    two feeds list counts once, as the feed first in name order gives it."""
    releases: dict[FlatcarVersion, FlatcarRelease] = {}
    for name in sorted(names):
        for release in store.flatcar_releases(name):
            releases.setdefault(release.version, release)
    return releases
