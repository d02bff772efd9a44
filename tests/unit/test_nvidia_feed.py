"""``parse_nvidia_feed``: branches, versions, architecture mapping, dates, digests.

Covers the project's own ``tests/data/nvidia/releases.json``, malformed variants of it (each
error names the branch, version and field; strings kept are bounded and free of control
characters), digests over exactly the stored fields, and NVIDIA's real trimmed sample in
``../shared/data/nvidia``.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import date
from pathlib import Path
from typing import Any

import pytest

from releasebot.domain.shared.errors import FeedFormatError
from releasebot.domain.shared.versions import Arch
from releasebot.domain.targets.models import DriverRelease
from releasebot.sources.nvidia import parse_nvidia_feed

Mutation = Callable[[dict[str, Any]], None]


def fixture_feed(test_data: Path) -> dict[str, Any]:
    feed: dict[str, Any] = json.loads((test_data / "nvidia/releases.json").read_text())
    return feed


def parse(feed: dict[str, Any]) -> list[DriverRelease]:
    return parse_nvidia_feed("nvidia", json.dumps(feed).encode())


def by_version(releases: list[DriverRelease]) -> dict[str, DriverRelease]:
    return {release.version.text: release for release in releases}


# -- the project's own fixture -------------------------------------------------------------


def test_fixture_parses_to_releases_in_numeric_version_order(test_data: Path) -> None:
    releases = parse_nvidia_feed("nvidia", (test_data / "nvidia/releases.json").read_bytes())

    assert [r.version.text for r in releases] == [
        "470.57.02",
        "470.256.02",
        "570.86.15",
        "570.195.03",
        "580.65.06",
        "580.95.05",
        "580.178.04",
    ]
    newest = releases[-1]
    assert newest.branch == "580"
    assert newest.branch_type == "lts branch"
    assert newest.released_on == date(2026, 8, 3)
    assert newest.arches == frozenset({Arch.AMD64, Arch.ARM64})
    assert newest.runfile_urls == (
        (
            Arch.AMD64,
            "https://us.download.nvidia.com/tesla/580.178.04/NVIDIA-Linux-x86_64-580.178.04.run",
        ),
        (
            Arch.ARM64,
            "https://us.download.nvidia.com/tesla/580.178.04/NVIDIA-Linux-aarch64-580.178.04.run",
        ),
    )


def test_ppc64le_is_dropped_and_an_empty_date_is_none(test_data: Path) -> None:
    releases = by_version(parse(fixture_feed(test_data)))

    old = releases["470.57.02"]
    assert old.arches == frozenset({Arch.AMD64})
    assert [arch for arch, _ in old.runfile_urls] == [Arch.AMD64]
    assert old.released_on is None
    assert releases["470.256.02"].arches == frozenset({Arch.AMD64, Arch.ARM64})
    assert releases["470.256.02"].branch_type == "production branch"


def test_branch_type_is_matched_case_insensitively(test_data: Path) -> None:
    feed = fixture_feed(test_data)
    feed["570"]["type"] = " Production Branch "

    assert {r.branch_type for r in parse(feed) if r.branch == "570"} == {"production branch"}


def digests(feed: dict[str, Any]) -> dict[str, str]:
    return {v: r.content_sha256 for v, r in by_version(parse(feed)).items()}


def test_digest_sees_stored_fields_and_a_changed_branch_type(test_data: Path) -> None:
    original = digests(fixture_feed(test_data))

    feed = fixture_feed(test_data)
    feed["570"]["type"] = "lts branch"
    feed["580"]["driver_info"][1]["release_date"] = "2025-10-02"
    feed["580"]["driver_info"][2]["runfile_url"]["x86_64"] += "?v=2"
    feed["470"]["driver_info"][0]["architectures"] = ["x86_64"]
    edited = digests(feed)

    changed = {v for v in original if original[v] != edited[v]}
    assert changed == {"570.195.03", "570.86.15", "580.95.05", "580.65.06", "470.256.02"}


def test_digest_ignores_what_releasebot_does_not_store(test_data: Path) -> None:
    # releasebot stores neither the release notes URL nor ppc64le: an edit there is no edit
    # of the release (the Flatcar feeds list one release with different notes, too).
    original = digests(fixture_feed(test_data))

    feed = fixture_feed(test_data)
    feed["580"]["driver_info"][1]["release_notes"] += "?v=2"
    feed["470"]["driver_info"][0]["runfile_url"]["ppc64le"] = "https://example.test/p.run"
    feed["570"]["type"] = " Production Branch "  # the same type once normalised

    assert digests(feed) == original


def test_identical_duplicates_are_kept_once_and_conflicting_ones_rejected(test_data: Path) -> None:
    feed = fixture_feed(test_data)
    feed["580"]["driver_info"].append(dict(feed["580"]["driver_info"][0]))
    assert len(parse(feed)) == 7

    feed["580"]["driver_info"][-1]["release_notes"] = "https://example.test/other-notes"
    assert len(parse(feed)) == 7  # differs only in what is not stored: still identical

    feed["580"]["driver_info"][-1]["release_date"] = "2026-08-04"
    with pytest.raises(FeedFormatError, match=r"580\.178\.04 is listed twice"):
        parse(feed)


# -- malformed bodies ------------------------------------------------------------------------


def _entry(branch: str, index: int, field: str, value: object) -> Mutation:
    def mutate(feed: dict[str, Any]) -> None:
        feed[branch]["driver_info"][index][field] = value

    return mutate


def _branch(branch: str, value: object) -> Mutation:
    def mutate(feed: dict[str, Any]) -> None:
        feed[branch] = value

    return mutate


def _branch_field(branch: str, field: str, value: object) -> Mutation:
    def mutate(feed: dict[str, Any]) -> None:
        feed[branch][field] = value

    return mutate


def _runfile(branch: str, index: int, arch: str, url: object) -> Mutation:
    def mutate(feed: dict[str, Any]) -> None:
        feed[branch]["driver_info"][index]["runfile_url"][arch] = url

    return mutate


RUNFILE = "branch 570: 570.195.03: runfile_url.x86_64: expected an http(s) URL"


@pytest.mark.parametrize(
    ("mutate", "expected"),
    [
        pytest.param(_branch("r580", {}), "key 'r580' is not a driver branch", id="branch-key"),
        pytest.param(_branch("580", []), "branch 580: expected an object, got list", id="branch"),
        pytest.param(_branch_field("580", "type", None), "branch 580: type:", id="no-type"),
        pytest.param(_branch_field("580", "type", "  "), "branch 580: type:", id="blank-type"),
        pytest.param(
            _branch_field("580", "type", "lts branch" * 30), "branch 580: type:", id="long-type"
        ),
        pytest.param(
            _branch_field("580", "type", "lts\u0000branch"), "branch 580: type:", id="nul-type"
        ),
        pytest.param(
            _branch_field("580", "type", "lts\nbranch"), "branch 580: type:", id="newline-type"
        ),
        pytest.param(_runfile("570", 0, "x86_64", "ftp://example.test/a.run"), RUNFILE, id="ftp"),
        pytest.param(_runfile("570", 0, "x86_64", "/tesla/a.run"), RUNFILE, id="relative"),
        pytest.param(_runfile("570", 0, "x86_64", "https://"), RUNFILE, id="no-host"),
        pytest.param(_runfile("570", 0, "x86_64", "https://[::1/a.run"), RUNFILE, id="bad-ipv6"),
        pytest.param(
            _runfile("570", 0, "x86_64", "https://example.test/a b.run"), RUNFILE, id="space"
        ),
        pytest.param(
            _runfile("570", 0, "x86_64", "https://example.test/\u0000.run"), RUNFILE, id="nul"
        ),
        pytest.param(
            _runfile("570", 0, "x86_64", "https://example.test/ü.run"), RUNFILE, id="non-ascii"
        ),
        pytest.param(
            _runfile("570", 0, "x86_64", "https://example.test/" + "a" * 2048),
            RUNFILE,
            id="long",
        ),
        pytest.param(
            _branch_field("580", "driver_info", {}), "branch 580: driver_info:", id="info-dict"
        ),
        pytest.param(
            _branch_field("580", "driver_info", ["580.1.2"]),
            "branch 580: driver_info[0]: expected an object, got str",
            id="entry-str",
        ),
        pytest.param(
            _entry("580", 1, "release_version", "580.x"),
            "branch 580: driver_info[1]: release_version: expected a version like 580.178.04",
            id="bad-version",
        ),
        pytest.param(
            _entry("580", 1, "release_version", "570.95.05"),
            "branch 580: 570.95.05: release_version is not in branch 580",
            id="wrong-branch",
        ),
        pytest.param(
            _entry("570", 0, "architectures", "x86_64"),
            "branch 570: 570.195.03: architectures:",
            id="arch-str",
        ),
        pytest.param(
            _entry("570", 0, "runfile_url", ["https://example.test/a.run"]),
            "branch 570: 570.195.03: runfile_url:",
            id="urls-list",
        ),
        pytest.param(
            _entry("570", 0, "release_date", "09/30/2025"),
            "branch 570: 570.195.03: release_date: expected 'YYYY-MM-DD'",
            id="us-date",
        ),
        pytest.param(
            _entry("570", 0, "release_date", "2025-02-30"),
            "branch 570: 570.195.03: release_date: not a real date",
            id="impossible-date",
        ),
        pytest.param(
            _entry("570", 0, "release_date", 20250930),
            "branch 570: 570.195.03: release_date:",
            id="numeric-date",
        ),
    ],
)
def test_malformed_releases_are_rejected_naming_branch_version_and_field(
    test_data: Path, mutate: Mutation, expected: str
) -> None:
    feed = fixture_feed(test_data)
    mutate(feed)

    with pytest.raises(FeedFormatError) as caught:
        parse(feed)

    assert expected in str(caught.value)
    assert str(caught.value).startswith("feed nvidia: ")
    assert str(caught.value).isprintable()
    assert len(str(caught.value)) < 250


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        pytest.param(b"<html><title>404</title></html>", "returned HTML, not JSON", id="html"),
        pytest.param(b"[]", "expected a JSON object keyed by branch, got list", id="list"),
        pytest.param(b"null", "got NoneType", id="null"),
        pytest.param(
            b'{"580": {"type": "lts branch", "driver_', "truncated or invalid JSON", id="cut"
        ),
        pytest.param(b'{"580": ' + b"[" * 200_000, "JSON nested too deeply", id="deep"),
    ],
)
def test_bodies_that_are_not_a_feed_are_rejected(body: bytes, expected: str) -> None:
    with pytest.raises(FeedFormatError, match=expected):
        parse_nvidia_feed("nvidia", body)


def test_urls_of_architectures_never_built_are_not_checked(test_data: Path) -> None:
    feed = fixture_feed(test_data)
    feed["470"]["driver_info"][0]["runfile_url"]["ppc64le"] = "not a URL\u0000"
    long_ok = "https://us.download.nvidia.com/" + "a" * (2048 - 31)
    assert len(long_ok) == 2048
    feed["570"]["driver_info"][0]["runfile_url"]["x86_64"] = long_ok

    releases = by_version(parse(feed))

    assert all("ppc64le" not in url for _, url in releases["470.256.02"].runfile_urls)
    assert dict(releases["570.195.03"].runfile_urls)[Arch.AMD64] == long_ok


def test_a_missing_runfile_map_and_date_are_tolerated(test_data: Path) -> None:
    feed = fixture_feed(test_data)
    del feed["570"]["driver_info"][0]["runfile_url"]
    del feed["570"]["driver_info"][0]["release_date"]

    release = by_version(parse(feed))["570.195.03"]

    assert release.runfile_urls == ()
    assert release.released_on is None
    assert release.arches == frozenset({Arch.AMD64, Arch.ARM64})


# -- NVIDIA's real (trimmed) feed ------------------------------------------------------------


@pytest.mark.shared_data
def test_real_sample_parses_to_four_branches(shared_data: Path) -> None:
    body = (shared_data / "nvidia/datacenter-releases.fixture.json").read_bytes()

    releases = parse_nvidia_feed("nvidia", body)

    branches: dict[str, list[str]] = {}
    for release in sorted(releases, key=lambda r: r.version, reverse=True):
        branches.setdefault(release.branch, []).append(release.version.text)
    assert branches == {
        "615": ["615.71.09"],
        "595": ["595.91.07", "595.71.05", "595.58.03"],
        "580": ["580.178.04", "580.173.02", "580.65.06"],
        "460": ["460.106.00", "460.32.03"],
    }
    types = {release.branch: release.branch_type for release in releases}
    assert types == {
        "615": "new feature branch",
        "595": "production branch",
        "580": "lts branch",
        "460": "production branch",
    }
    old = by_version(releases)
    assert old["460.106.00"].arches == frozenset({Arch.AMD64, Arch.ARM64})  # ppc64le dropped
    assert all("ppc64le" not in url for _, url in old["460.106.00"].runfile_urls)
    assert old["460.32.03"].released_on is None
    assert old["580.178.04"].released_on == date(2026, 8, 3)
    # Integer order: 580.65.06 is older than 580.173.02 although "65" > "173" as strings.
    assert old["580.65.06"].version < old["580.173.02"].version
