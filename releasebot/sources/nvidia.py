"""Turn NVIDIA's datacenter driver feed (``releases.json``) into ``DriverRelease`` values.

The feed is one JSON object keyed by driver branch (``"580"``), each with a branch ``type``
and a ``driver_info`` list of releases, newest first (``release_version``,
``release_date``, which may be empty, ``architectures`` in NVIDIA's spelling,
``runfile_url`` per architecture). This module is the only place that looks inside it: it
checks the shape of every release, maps NVIDIA's architecture names to Flatcar's (dropping
ones releasebot never builds, like ``ppc64le``), bounds every string it keeps, and
fingerprints what it keeps of each release so that an upstream edit of those fields is
noticed.

Deliberately not here: fetching (``sources/fetch.py``), choosing branches (the policy), and
checking that a runfile URL still answers (a build step does, and a 404 there is permanent),
and ``release_notes`` (neither read nor hashed: see ``_digest``).
"""

from __future__ import annotations

import re
from datetime import date
from typing import TypedDict, cast
from urllib.parse import urlsplit

from releasebot.domain.shared.errors import FeedFormatError
from releasebot.domain.shared.versions import Arch, DriverVersion, is_driver_branch
from releasebot.domain.targets.models import DriverRelease
from releasebot.sources._json import content_sha256, load_json_document, quote

_DATE_RE = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}")
# Printable ASCII without spaces: what a URL may hold unescaped. Control characters or NUL
# in a stored string abort the store's transaction (PostgreSQL) or end up in a build's args.
_URL_RE = re.compile(r"https?://[!-~]+", re.IGNORECASE)
MAX_URL_CHARS = 2048
"""Longest runfile URL kept (real ones are ~80 characters)."""
MAX_BRANCH_TYPE_CHARS = 64
"""Longest branch type kept (real ones: ``new feature branch``, 18 characters)."""


class RawDriverInfo(TypedDict):
    """One element of a branch's ``driver_info``; only the fields releasebot reads.

    ``release_notes`` (a URL) is neither read nor part of ``content_sha256``.
    """

    release_version: str
    release_date: str | None
    architectures: list[str]
    runfile_url: dict[str, str]


class RawBranch(TypedDict):
    """One value of the feed object, keyed by the branch number."""

    type: str
    driver_info: list[object]


def parse_nvidia_feed(feed: str, body: bytes) -> list[DriverRelease]:
    """Every driver release the feed lists, oldest first (integer order, never string order).

    Raises ``FeedFormatError`` naming the branch, the version and the field when anything is
    off; one bad release rejects the whole body.
    """
    document = load_json_document(feed, body)
    if not isinstance(document, dict):
        raise FeedFormatError(
            feed, f"expected a JSON object keyed by branch, got {type(document).__name__}"
        )
    releases: dict[str, DriverRelease] = {}
    for branch, value in document.items():
        if not is_driver_branch(branch):
            raise FeedFormatError(
                feed, f"key {quote(branch)} is not a driver branch (expected digits like 580)"
            )
        raw_branch = _check_branch(feed, branch, value)
        branch_type = raw_branch["type"].strip().lower()
        for index, entry in enumerate(raw_branch["driver_info"]):
            release = _parse_release(feed, branch, branch_type, index, entry)
            known = releases.get(release.version.text)
            if known is not None and known.content_sha256 != release.content_sha256:
                raise FeedFormatError(
                    feed, f"branch {branch}: {release.version} is listed twice, differently"
                )
            # A duplicate identical in what releasebot stores is harmless; keep the first.
            releases.setdefault(release.version.text, release)
    return sorted(releases.values(), key=lambda release: release.version)


def _check_branch(feed: str, branch: str, value: object) -> RawBranch:
    if not isinstance(value, dict):
        raise FeedFormatError(
            feed, f"branch {branch}: expected an object, got {type(value).__name__}"
        )
    branch_type = value.get("type")
    # Surrounding whitespace is dropped later (types are matched case-insensitively, trimmed).
    kept = branch_type.strip() if isinstance(branch_type, str) else ""
    if not kept or len(kept) > MAX_BRANCH_TYPE_CHARS or not kept.isprintable():
        raise FeedFormatError(
            feed,
            f"branch {branch}: type: expected a branch type like 'lts branch' (at most "
            f"{MAX_BRANCH_TYPE_CHARS} printable characters), got {quote(branch_type)}",
        )
    if not isinstance(value.get("driver_info"), list):
        raise FeedFormatError(
            feed,
            f"branch {branch}: driver_info: expected a list, got {quote(value.get('driver_info'))}",
        )
    return cast(RawBranch, value)


def _parse_release(
    feed: str, branch: str, branch_type: str, index: int, entry: object
) -> DriverRelease:
    raw = _check_release(feed, branch, index, entry)
    version = DriverVersion.parse(raw["release_version"])
    where = f"branch {branch}: {version}"
    if version.branch != branch:
        raise FeedFormatError(feed, f"{where}: release_version is not in branch {branch}")
    arches = frozenset(
        arch for name in raw["architectures"] if (arch := Arch.from_nvidia(name)) is not None
    )
    urls = {
        arch: _check_url(feed, where, name, url)
        for name, url in raw["runfile_url"].items()
        if (arch := Arch.from_nvidia(name)) is not None
    }
    released_on = _parse_date(feed, where, raw["release_date"])
    runfile_urls = tuple(sorted(urls.items(), key=lambda item: item[0].value))
    return DriverRelease(
        version=version,
        branch=branch,
        branch_type=branch_type,
        arches=arches,
        released_on=released_on,
        runfile_urls=runfile_urls,
        content_sha256=_digest(version, branch, branch_type, arches, released_on, runfile_urls),
    )


def _digest(
    version: DriverVersion,
    branch: str,
    branch_type: str,
    arches: frozenset[Arch],
    released_on: date | None,
    runfile_urls: tuple[tuple[Arch, str], ...],
) -> str:
    """Fingerprint of exactly what releasebot stores of a release.

    The branch type is in it: a branch moving from "new feature" to "production" changes
    what the release means to the policy. The ``release_notes`` URL is not: releasebot never
    stores it, so an edit there must not look like an edited release (the same reasoning as
    for Flatcar, whose release notes differ between feeds listing the same version).
    Architectures releasebot does not build (``ppc64le``) are left out for the same reason.
    """
    return content_sha256(
        {
            "version": version.text,
            "branch": branch,
            "branch_type": branch_type,
            "arches": sorted(arch.value for arch in arches),
            "released_on": None if released_on is None else released_on.isoformat(),
            "runfile_urls": [[arch.value, url] for arch, url in runfile_urls],
        }
    )


def _check_url(feed: str, where: str, name: str, url: str) -> str:
    """A runfile URL releasebot keeps: http(s), bounded, printable ASCII, with a host."""
    if len(url) <= MAX_URL_CHARS and _URL_RE.fullmatch(url) is not None:
        try:
            has_host = bool(urlsplit(url).hostname)
        except ValueError:  # e.g. an unclosed "[" of an IPv6 address
            has_host = False
        if has_host:
            return url
    raise FeedFormatError(
        feed,
        f"{where}: runfile_url.{name}: expected an http(s) URL of at most {MAX_URL_CHARS} "
        f"printable ASCII characters, got {quote(url)}",
    )


def _check_release(feed: str, branch: str, index: int, entry: object) -> RawDriverInfo:
    """Prove that ``entry`` has the ``RawDriverInfo`` shape, or say which field breaks it."""
    if not isinstance(entry, dict):
        raise FeedFormatError(
            feed,
            f"branch {branch}: driver_info[{index}]: expected an object, "
            f"got {type(entry).__name__}",
        )
    version = entry.get("release_version")
    if not isinstance(version, str) or not DriverVersion.is_valid(version):
        raise FeedFormatError(
            feed,
            f"branch {branch}: driver_info[{index}]: release_version: expected a version "
            f"like 580.178.04, got {quote(version)}",
        )

    def bad(field: str, expected: str, got: object) -> FeedFormatError:
        return FeedFormatError(
            feed, f"branch {branch}: {version}: {field}: expected {expected}, got {quote(got)}"
        )

    released = entry.get("release_date")
    if not isinstance(released, str | None):
        raise bad("release_date", "'YYYY-MM-DD' or ''", released)
    arches = entry.get("architectures")
    if not isinstance(arches, list) or not all(isinstance(name, str) for name in arches):
        raise bad("architectures", 'a list of names like "x86_64"', arches)
    # A release without runfile URLs is still a release: the URL follows a known pattern.
    urls = entry.get("runfile_url", {})
    if not isinstance(urls, dict) or not all(isinstance(url, str) for url in urls.values()):
        raise bad("runfile_url", "an object of architecture -> URL", urls)
    return {
        "release_version": version,
        "release_date": released,
        "architectures": arches,
        "runfile_url": urls,
    }


def _parse_date(feed: str, where: str, text: str | None) -> date | None:
    # NVIDIA publishes some releases with "release_date": "" (see the sample feed).
    if not text:
        return None
    if _DATE_RE.fullmatch(text) is None:
        raise FeedFormatError(
            feed, f"{where}: release_date: expected 'YYYY-MM-DD', got {quote(text)}"
        )
    try:
        return date.fromisoformat(text)
    except ValueError as exc:
        raise FeedFormatError(
            feed, f"{where}: release_date: not a real date: {quote(text)}"
        ) from exc
