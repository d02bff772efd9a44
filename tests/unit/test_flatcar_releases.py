"""Every Flatcar release by version, as the plan and the coverage page both read it.

A version that two feeds list counts once, and the plan and the page see the same release of
it; a feed the settings name is read even before the store has a row of it.
"""

from __future__ import annotations

from datetime import UTC, datetime

from releasebot.service.overview import OverviewOptions, OverviewService
from releasebot.service.releases import (
    flatcar_feed_name,
    flatcar_feed_names,
    flatcar_releases_by_version,
)
from releasebot.store.memory import MemoryStateStore
from tests.contract.test_store_contract import SEEN, URL, flatcar

T0 = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


def test_a_version_in_two_feeds_counts_once_and_the_same_on_the_plan_and_the_page() -> None:
    store = MemoryStateStore()
    store.record_flatcar_feed("flatcar/stable", URL, [flatcar("4593.2.5")], SEEN, T0)
    beta = [flatcar("4593.2.5", channel="beta"), flatcar("4620.0.0", channel="beta")]
    store.record_flatcar_feed("flatcar/beta", URL, beta, SEEN, T0)

    releases = flatcar_releases_by_version(store)

    assert sorted(v.text for v in releases) == ["4593.2.5", "4620.0.0"]
    page = OverviewService(store, OverviewOptions(repository="registry.example/driver"))
    assert page._releases() == {v.text: r for v, r in releases.items()}


def test_the_feeds_read_are_the_named_ones_and_every_stored_flatcar_feed() -> None:
    store = MemoryStateStore()
    store.record_flatcar_feed(flatcar_feed_name("stable"), URL, [flatcar()], SEEN, T0)
    assert flatcar_feed_names(store, ["flatcar/lts"]) == {"flatcar/lts", "flatcar/stable"}
    assert list(flatcar_releases_by_version(store, ["flatcar/lts"])) == [flatcar().version]
