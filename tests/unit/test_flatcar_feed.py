"""``parse_flatcar_feed``: shape checks, pseudo-keys, numeric order, content digests.

Covers the project's own fixtures, malformed variants of them (each error names the
version and field; strings kept are bounded and free of control characters), hostile
bodies (deep nesting), and the real upstream feeds in ``../shared/data/flatcar`` (counts
from their README, the stable replay that adds exactly 4593.2.5, the same LTS release
digested alike in two feeds, and the CPU budget).
"""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from releasebot.domain.shared.errors import FeedFormatError
from releasebot.domain.shared.versions import Arch
from releasebot.domain.targets.models import FlatcarRelease
from releasebot.sources._json import MAX_QUOTED_CHARS
from releasebot.sources.flatcar import parse_flatcar_feed


def load(path: Path) -> list[FlatcarRelease]:
    return parse_flatcar_feed("test", path.read_bytes())


def versions(releases: list[FlatcarRelease]) -> list[str]:
    return [release.version.text for release in releases]


def fixture_entries(test_data: Path) -> dict[str, Any]:
    entries: dict[str, Any] = json.loads((test_data / "flatcar/releases-stable.json").read_text())
    return entries


# -- the project's own fixtures ------------------------------------------------------------


def test_stable_fixture_parses_to_releases_in_version_order(test_data: Path) -> None:
    releases = load(test_data / "flatcar/releases-stable.json")

    assert versions(releases) == ["2345.3.0", "4459.2.4", "4593.2.4", "4593.2.5"]
    newest = releases[-1]
    assert newest.channel == "stable"
    assert newest.kernel == "6.12.102"
    assert newest.kernel_release == "6.12.102-flatcar"
    assert newest.arches == frozenset({Arch.AMD64, Arch.ARM64})
    assert newest.released_at == datetime(2026, 8, 13, 15, 48, 35, tzinfo=UTC)
    assert releases[0].arches == frozenset({Arch.AMD64})


def test_lts_pseudo_keys_are_skipped_and_versions_sort_numerically(test_data: Path) -> None:
    raw = json.loads((test_data / "flatcar/releases-lts-2024.json").read_text())
    assert list(raw)[:3] == ["4081.3.1", "4081.3.10", "4081.3.2"]  # upstream's string order
    assert {"current", "current-2024"} <= raw.keys()

    releases = load(test_data / "flatcar/releases-lts-2024.json")

    assert versions(releases) == ["4081.3.1", "4081.3.2", "4081.3.9", "4081.3.10"]
    assert {release.channel for release in releases} == {"lts"}


def test_replaying_the_stable_fixtures_shows_one_new_release(test_data: Path) -> None:
    before = {r.version.text: r for r in load(test_data / "flatcar/releases-stable.before.json")}
    after = {r.version.text: r for r in load(test_data / "flatcar/releases-stable.json")}

    assert sorted(after.keys() - before.keys()) == ["4593.2.5"]
    assert before.keys() <= after.keys()
    assert all(after[v].content_sha256 == before[v].content_sha256 for v in before)


def digests(entries: dict[str, Any]) -> dict[str, str]:
    return {r.version.text: r.content_sha256 for r in parse_flatcar(entries)}


def test_content_digest_ignores_layout(test_data: Path) -> None:
    entries = fixture_entries(test_data)
    # Same content, different key order and whitespace: same digest.
    reordered = {key: dict(reversed(value.items())) for key, value in reversed(entries.items())}
    relaid = json.dumps(reordered, indent=4).encode()

    assert {r.version.text: r.content_sha256 for r in parse_flatcar_feed("t", relaid)} == (
        digests(entries)
    )


def test_content_digest_ignores_what_releasebot_does_not_store(test_data: Path) -> None:
    # releasebot stores no release notes nor other software versions; the same release
    # differs there between feeds (4081.3.1 in lts vs lts-2024), so they must not count.
    entries = fixture_entries(test_data)
    original = digests(entries)
    entries["4593.2.4"]["release_notes"] += "\n - Late upstream edit\n"
    entries["4593.2.4"]["major_software"]["docker"] = ["99.0.0"]
    entries["4593.2.4"]["architectures"].append("riscv64")  # never built
    entries["4593.2.4"]["release_date"] = "2026-07-09 15:02:32 +0200"  # same instant

    assert (
        entries["4593.2.4"]["release_date"]
        != fixture_entries(test_data)["4593.2.4"]["release_date"]
    )
    assert digests(entries) == original


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("channel", "beta"),
        ("architectures", ["amd64"]),
        ("release_date", "2026-07-21 12:00:00 +0000"),
        ("major_software", {"kernel": ["6.12.99"]}),
    ],
)
def test_content_digest_sees_edits_of_stored_fields(
    test_data: Path, field: str, value: object
) -> None:
    entries = fixture_entries(test_data)
    original = digests(entries)
    entries["4593.2.4"][field] = value

    edited = digests(entries)

    assert {v for v in original if edited[v] != original[v]} == {"4593.2.4"}


def test_unknown_architectures_are_ignored(test_data: Path) -> None:
    entries = fixture_entries(test_data)
    entries["4593.2.5"]["architectures"] = ["amd64", "riscv64"]

    newest = parse_flatcar(entries)[-1]

    assert newest.arches == frozenset({Arch.AMD64})


def test_release_date_is_normalised_to_utc_and_may_be_empty(test_data: Path) -> None:
    entries = fixture_entries(test_data)
    entries["4593.2.5"]["release_date"] = "2026-08-13 17:48:35 +0200"
    entries["4593.2.4"]["release_date"] = ""

    by_version = {r.version.text: r for r in parse_flatcar(entries)}

    assert by_version["4593.2.5"].released_at == datetime(2026, 8, 13, 15, 48, 35, tzinfo=UTC)
    assert by_version["4593.2.4"].released_at is None


def parse_flatcar(entries: dict[str, Any]) -> list[FlatcarRelease]:
    return parse_flatcar_feed("test", json.dumps(entries).encode())


def test_keys_that_are_not_versions_at_all_are_skipped(test_data: Path) -> None:
    # The feed's pseudo-keys ("current", "current-2024") hold a copy of a release without
    # its version and are skipped. Keys of digits and dots that are not
    # MAJOR.MINOR.PATCH are malformed versions instead, and rejected (see the next test).
    entries = fixture_entries(test_data)
    expected = versions(parse_flatcar(entries))
    entries["latest"] = entries["4593.2.5"]
    entries["current-2030"] = {"anything": "at all"}
    entries["4593.2.5-rc1"] = []

    assert versions(parse_flatcar(entries)) == expected


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        pytest.param(b"{}", "feed test: lists no release", id="empty"),
        pytest.param(
            b'{"4593.2.x": {}, "current": {}}',
            "feed test: key '4593.2.x' is not a version (expected MAJOR.MINOR.PATCH), nor is "
            "any other: no release",
            id="only-skipped-keys",
        ),
    ],
)
def test_a_feed_without_any_release_is_rejected(body: bytes, expected: str) -> None:
    # Skipping non-version keys must not turn a broken body into a poll of nothing.
    with pytest.raises(FeedFormatError) as caught:
        parse_flatcar_feed("test", body)

    assert str(caught.value).startswith(expected)


# -- malformed bodies ------------------------------------------------------------------------


def _set(path: tuple[str, ...], value: object) -> Any:
    def mutate(entries: dict[str, Any]) -> None:
        target = entries
        for part in path[:-1]:
            target = target[part]
        target[path[-1]] = value

    return mutate


def _delete(path: tuple[str, ...]) -> Any:
    def mutate(entries: dict[str, Any]) -> None:
        target = entries
        for part in path[:-1]:
            target = target[part]
        del target[path[-1]]

    return mutate


@pytest.mark.parametrize(
    ("mutate", "expected"),
    [
        # Malformed versions: only digits and dots, but not MAJOR.MINOR.PATCH. Other
        # non-version keys ("latest") are skipped, see the test above.
        pytest.param(_set(("4593.2",), {}), "key '4593.2' is not a version", id="short-key"),
        pytest.param(_set(("4593.2.5.1",), {}), "key '4593.2.5.1' is not a version", id="long-key"),
        pytest.param(_set(("4593..2",), {}), "key '4593..2' is not a version", id="empty-part"),
        pytest.param(_set(("04593.2.5",), {}), "key '04593.2.5' is not", id="leading-zero"),
        pytest.param(_set(("4593",), {}), "key '4593' is not a version", id="digits-key"),
        pytest.param(_set(("4593.2.5",), []), "4593.2.5: expected an object, got list", id="list"),
        pytest.param(_delete(("4593.2.5", "channel")), "4593.2.5: channel:", id="no-channel"),
        pytest.param(_set(("4593.2.5", "channel"), ""), "4593.2.5: channel:", id="empty-channel"),
        pytest.param(
            _set(("4593.2.5", "channel"), "s" * 300), "4593.2.5: channel:", id="long-channel"
        ),
        pytest.param(
            _set(("4593.2.5", "channel"), "stable\u0000"), "4593.2.5: channel:", id="nul-channel"
        ),
        pytest.param(
            _set(("4593.2.5", "channel"), "Stable"), "4593.2.5: channel:", id="upper-channel"
        ),
        pytest.param(
            _set(("4593.2.5", "channel"), "stable\n"), "4593.2.5: channel:", id="newline-channel"
        ),
        pytest.param(
            _set(("4593.2.5", "architectures"), "amd64"), "4593.2.5: architectures:", id="arch-str"
        ),
        pytest.param(
            _delete(("4593.2.5", "major_software")), "4593.2.5: major_software:", id="no-software"
        ),
        pytest.param(
            _delete(("4593.2.5", "major_software", "kernel")),
            "4593.2.5: major_software.kernel:",
            id="no-kernel",
        ),
        pytest.param(
            _set(("4593.2.5", "major_software", "kernel"), ["6.12.102", "6.12.103"]),
            "4593.2.5: major_software.kernel:",
            id="two-kernels",
        ),
        pytest.param(
            _set(("4593.2.5", "major_software", "kernel"), ["linux-latest"]),
            "got ['linux-latest']",
            id="bad-kernel",
        ),
        pytest.param(
            _set(("4593.2.5", "major_software", "kernel"), ["6." + "1" * 100]),
            "4593.2.5: major_software.kernel:",
            id="long-kernel",
        ),
        pytest.param(
            _set(("4593.2.5", "release_date"), "2026-08-13T15:48:35Z"),
            "4593.2.5: release_date: expected 'YYYY-MM-DD HH:MM:SS +0000'",
            id="iso-date",
        ),
        pytest.param(
            _set(("4593.2.5", "release_date"), "2026-02-30 15:48:35 +0000"),
            "4593.2.5: release_date: not a real date",
            id="impossible-date",
        ),
        pytest.param(
            _set(("4593.2.5", "release_date"), "0001-01-01 00:00:00 +0100"),
            "4593.2.5: release_date: not a real date in UTC: '0001-01-01 00:00:00 +0100'",
            id="before-year-1-in-utc",
        ),
        pytest.param(
            _set(("4593.2.5", "release_date"), "9999-12-31 23:30:00 -0100"),
            "4593.2.5: release_date: not a real date in UTC",
            id="after-year-9999-in-utc",
        ),
    ],
)
def test_malformed_entries_are_rejected_naming_version_and_field(
    test_data: Path, mutate: Any, expected: str
) -> None:
    entries = fixture_entries(test_data)
    mutate(entries)

    with pytest.raises(FeedFormatError) as caught:
        parse_flatcar(entries)

    assert expected in str(caught.value)
    assert str(caught.value).startswith("feed test: ")
    assert str(caught.value).isprintable()
    assert len(str(caught.value)) < 200
    assert caught.value.feed == "test"


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        pytest.param(b"<!DOCTYPE html><html><body>Login</body></html>", "returned HTML", id="html"),
        pytest.param(b"  \n<html>", "returned HTML, not JSON", id="html-after-space"),
        pytest.param(
            b'["4593.2.5"]', "expected a JSON object keyed by version, got list", id="list"
        ),
        pytest.param(b'"stable"', "got str", id="string"),
        pytest.param(b"", "empty body", id="empty"),
        pytest.param(
            b'{"4593.2.5": {"channel": "st',
            "truncated or invalid JSON at line 1 column 26 (unterminated string starting)",
            id="cut",
        ),
        pytest.param(b"\xff\xfe\xfa{}", "not UTF-8", id="binary"),
        pytest.param(b"[" * 200_000, "JSON nested too deeply", id="deep-list"),
        pytest.param(b'{"a":' * 200_000, "JSON nested too deeply", id="deep-object"),
    ],
)
def test_bodies_that_are_not_a_feed_are_rejected_with_one_line(body: bytes, expected: str) -> None:
    with pytest.raises(FeedFormatError) as caught:
        parse_flatcar_feed("stable", body)

    assert expected in str(caught.value)
    assert "\n" not in str(caught.value)


def test_a_truncated_fixture_names_where_it_stops(test_data: Path) -> None:
    body = (test_data / "flatcar/releases-stable.json").read_bytes()

    with pytest.raises(FeedFormatError, match=r"truncated or invalid JSON at line \d+ column \d+"):
        parse_flatcar_feed("stable", body[: len(body) // 2])


def test_a_huge_bad_key_is_trimmed_in_the_message() -> None:
    body = json.dumps({"1." * 10_000: {}}).encode()

    with pytest.raises(FeedFormatError) as caught:
        parse_flatcar_feed("stable", body)

    assert len(caught.value.problem) < MAX_QUOTED_CHARS + 60


# -- the real upstream feeds ---------------------------------------------------------------

# Version counts and channels from ../shared/data/flatcar/README.md. The edge count is not in
# the README; it was counted once (27 keys besides "current", all NNNN.99.N).
REAL_FEEDS = {
    "releases-stable.2026-07-09.json": (136, "stable"),
    "releases-stable.2026-08-13.json": (137, "stable"),
    "releases-beta.json": (151, "beta"),
    "releases-alpha.json": (164, "alpha"),
    "releases-lts.json": (61, "lts"),
    "releases-lts-2024.json": (11, "lts"),
    "releases-lts-2023.json": (9, "lts"),
    "releases-lts-2022.json": (19, "lts"),
    "releases-lts-2021.json": (21, "lts"),
    "releases-edge.json": (27, "edge"),
}


@pytest.mark.shared_data
def test_every_real_feed_parses_with_the_documented_counts(shared_data: Path) -> None:
    files = sorted((shared_data / "flatcar").glob("releases-*.json"))
    assert {path.name for path in files} == REAL_FEEDS.keys()

    for path in files:
        releases = load(path)
        count, channel = REAL_FEEDS[path.name]
        assert len(releases) == count, path.name
        assert {release.channel for release in releases} == {channel}, path.name
        assert releases == sorted(releases, key=lambda release: release.version), path.name
        assert all(release.released_at is not None for release in releases), path.name
        assert all(release.arches for release in releases), path.name


@pytest.mark.shared_data
def test_real_lts_2024_is_ordered_numerically(shared_data: Path) -> None:
    releases = load(shared_data / "flatcar/releases-lts-2024.json")

    assert versions(releases)[-2:] == ["4081.3.9", "4081.3.10"]
    assert releases[-1].version > releases[-2].version
    assert {release.channel for release in releases} == {"lts"}
    assert releases[-1].kernel == "6.6.150"


@pytest.mark.shared_data
def test_real_stable_replay_adds_exactly_4593_2_5(shared_data: Path) -> None:
    old = {r.version.text: r for r in load(shared_data / "flatcar/releases-stable.2026-07-09.json")}
    new = {r.version.text: r for r in load(shared_data / "flatcar/releases-stable.2026-08-13.json")}

    assert sorted(new.keys() - old.keys()) == ["4593.2.5"]
    assert old.keys() <= new.keys()
    assert new["4593.2.5"].kernel == "6.12.102"
    assert new["4593.2.5"].arches == frozenset({Arch.AMD64, Arch.ARM64})
    changed = [v for v in old if old[v].content_sha256 != new[v].content_sha256]
    assert changed == []


@pytest.mark.shared_data
def test_real_lts_release_digests_alike_in_both_lts_feeds(shared_data: Path) -> None:
    # Upstream lists 4081.3.1 in releases-lts.json and releases-lts-2024.json with different
    # release notes; releasebot stores none, so the store must not see an edit either way.
    raw_all = json.loads((shared_data / "flatcar/releases-lts.json").read_text())
    raw_2024 = json.loads((shared_data / "flatcar/releases-lts-2024.json").read_text())
    assert raw_all["4081.3.1"]["release_notes"] != raw_2024["4081.3.1"]["release_notes"]

    in_all = {r.version.text: r for r in load(shared_data / "flatcar/releases-lts.json")}
    in_2024 = {r.version.text: r for r in load(shared_data / "flatcar/releases-lts-2024.json")}

    assert in_all["4081.3.1"] == in_2024["4081.3.1"]
    assert in_all["4081.3.1"].content_sha256 == in_2024["4081.3.1"].content_sha256
    assert all(in_all[v].content_sha256 == in_2024[v].content_sha256 for v in in_2024)


@pytest.mark.shared_data
def test_parsing_every_real_feed_is_cheap(shared_data: Path) -> None:
    bodies = [
        path.read_bytes() for path in sorted((shared_data / "flatcar").glob("releases-*.json"))
    ]
    assert sum(len(body) for body in bodies) > 5_000_000  # the budget covers ~5 MB of JSON

    started = time.process_time()
    for body in bodies:
        parse_flatcar_feed("bench", body)
    spent = time.process_time() - started

    # The target is well under 0.1 s (about 0.04 s measured); the bound leaves room for slow
    # CI machines while still catching an accidental quadratic or per-entry re-parse.
    assert spent < 0.5
