"""Turn a Flatcar release feed (``releases-<channel>.json``) into ``FlatcarRelease`` values.

The feed is one JSON object keyed by version (``"4593.2.5"``, in lexicographic, not
numeric, order), each value holding ``channel``, ``architectures``, ``release_date`` and
``major_software`` (the kernel is ``major_software.kernel[0]``). This module is the only
place that looks inside it: it checks the shape of every entry it keeps, skips keys that
are not versions (the ``current``/``current-YYYY`` pseudo-keys), bounds every string it
keeps, and fingerprints what it keeps of each entry so that a later upstream edit of those
fields is noticed.

Deliberately not here: fetching (``sources/fetch.py``), deciding what a vanished or edited
entry means (the store and the policy), and ``release_notes`` (neither read nor hashed:
see ``_digest``).
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import NotRequired, TypedDict, cast

from releasebot.domain.shared.errors import FeedFormatError
from releasebot.domain.shared.versions import Arch, FlatcarVersion, is_kernel_version
from releasebot.domain.targets.models import FlatcarRelease
from releasebot.sources._json import content_sha256, load_json_document, quote

_DATE_FORMAT = "%Y-%m-%d %H:%M:%S %z"
_DATE_RE = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2} [0-9]{2}:[0-9]{2}:[0-9]{2} [+-][0-9]{4}")
_FLATCAR_ARCHES = {arch.value: arch for arch in Arch}
# Upstream's channels are alpha, beta, stable, lts (and the dead edge). The bound and the
# character set keep a broken upload from putting 300 characters or a NUL byte into a
# column (PostgreSQL rejects NUL, which would abort the whole store transaction).
_CHANNEL_RE = re.compile(r"[a-z0-9-]{1,32}")
# Only digits and dots: meant as a version. Anything else is some other kind of key.
_VERSION_LIKE_RE = re.compile(r"[0-9.]+")
_NOT_A_VERSION = "is not a version (expected MAJOR.MINOR.PATCH)"
MAX_KERNEL_CHARS = 32
"""Longest kernel version kept (real ones are ~8 characters, ``6.12.102``)."""


class RawMajorSoftware(TypedDict):
    """``major_software`` of an entry: each name maps to a ONE-element list."""

    kernel: list[str]


class RawFlatcarRelease(TypedDict):
    """One value of the feed object; only the fields releasebot reads.

    ``release_notes`` is neither read nor part of ``content_sha256`` (see ``_digest``).
    """

    channel: str
    architectures: list[str]
    release_date: NotRequired[str | None]
    major_software: RawMajorSoftware


def parse_flatcar_feed(feed: str, body: bytes) -> list[FlatcarRelease]:
    """Every release the feed lists, oldest first (integer order: 4081.3.9 < 4081.3.10).

    Raises ``FeedFormatError`` naming the version and the field when anything is off: one
    bad entry rejects the whole body, so a broken upload never looks like removed releases;
    so does a body that lists no release at all.
    """
    document = load_json_document(feed, body)
    if not isinstance(document, dict):
        raise FeedFormatError(
            feed, f"expected a JSON object keyed by version, got {type(document).__name__}"
        )
    releases: list[FlatcarRelease] = []
    skipped: list[str] = []
    for key, value in document.items():
        if not FlatcarVersion.is_valid(key):
            # Keys that are not N.N.N are skipped, but a malformed version must still fail
            # loudly. So: digits and dots ("4593.2", "4593.2.5.1", "4593..2") were
            # meant as a version and reject the body; any other key ("current",
            # "current-2024", a future "latest") is a pseudo-key holding a copy of a release
            # without its version, with nothing to learn: skip it.
            if _VERSION_LIKE_RE.fullmatch(key):
                raise FeedFormatError(feed, f"key {quote(key)} {_NOT_A_VERSION}")
            skipped.append(key)
            continue
        releases.append(_parse_entry(feed, FlatcarVersion.parse(key), value))
    if not releases:
        # Every real feed lists releases; one that lists none is broken (or not this feed),
        # and accepting it would record a "successful" poll of nothing.
        if not skipped:
            raise FeedFormatError(feed, "lists no release (an empty object)")
        raise FeedFormatError(
            feed, f"key {quote(skipped[0])} {_NOT_A_VERSION}, nor is any other: no release"
        )
    releases.sort(key=lambda release: release.version)
    return releases


def _parse_entry(feed: str, version: FlatcarVersion, value: object) -> FlatcarRelease:
    raw = _check_entry(feed, version, value)
    arches = frozenset(
        _FLATCAR_ARCHES[name] for name in raw["architectures"] if name in _FLATCAR_ARCHES
    )
    channel = raw["channel"]
    kernel = raw["major_software"]["kernel"][0]
    released_at = _parse_date(feed, version, raw.get("release_date"))
    return FlatcarRelease(
        version=version,
        channel=channel,
        arches=arches,
        kernel=kernel,
        released_at=released_at,
        content_sha256=_digest(channel, arches, kernel, released_at),
    )


def _digest(
    channel: str, arches: frozenset[Arch], kernel: str, released_at: datetime | None
) -> str:
    """Fingerprint of what releasebot stores of an entry (the version is the key).

    Not the whole entry: ``release_notes`` (and the rest of ``major_software``) are never
    stored, and the same version legitimately differs there between feeds. Real data:
    4081.3.1 has different release notes in ``releases-lts.json`` and
    ``releases-lts-2024.json``; hashing them made the store see the release edited back and
    forth each time either feed changed. Parsed values, not raw text, so a date restated
    in another offset, or an architecture releasebot does not build, is no edit either.
    """
    return content_sha256(
        {
            "channel": channel,
            "arches": sorted(arch.value for arch in arches),
            "kernel": kernel,
            "released_at": None if released_at is None else released_at.isoformat(),
        }
    )


def _check_entry(feed: str, version: FlatcarVersion, value: object) -> RawFlatcarRelease:
    """Prove that ``value`` has the ``RawFlatcarRelease`` shape, or say which field breaks it."""

    def bad(field: str, expected: str, got: object) -> FeedFormatError:
        return FeedFormatError(feed, f"{version}: {field}: expected {expected}, got {quote(got)}")

    if not isinstance(value, dict):
        raise FeedFormatError(feed, f"{version}: expected an object, got {type(value).__name__}")
    channel = value.get("channel")
    if not isinstance(channel, str) or _CHANNEL_RE.fullmatch(channel) is None:
        raise bad(
            "channel", "a lower-case channel name like 'stable' (at most 32 of a-z 0-9 -)", channel
        )
    arches = value.get("architectures")
    if not isinstance(arches, list) or not all(isinstance(name, str) for name in arches):
        raise bad("architectures", 'a list of names like "amd64"', arches)
    software = value.get("major_software")
    if not isinstance(software, dict):
        raise bad("major_software", "an object", software)
    kernel = software.get("kernel")
    if (
        not isinstance(kernel, list)
        or len(kernel) != 1
        or not isinstance(kernel[0], str)
        or len(kernel[0]) > MAX_KERNEL_CHARS
        or not is_kernel_version(kernel[0])
    ):
        raise bad("major_software.kernel", "a one-element list like ['6.12.102']", kernel)
    return cast(RawFlatcarRelease, value)


def _parse_date(feed: str, version: FlatcarVersion, text: object) -> datetime | None:
    # A missing or empty date is tolerated (nothing decides on it; it only informs people),
    # but a date that is present and malformed means the format changed: reject it.
    if text is None or text == "":
        return None
    if not isinstance(text, str) or _DATE_RE.fullmatch(text) is None:
        raise FeedFormatError(
            feed,
            f"{version}: release_date: expected 'YYYY-MM-DD HH:MM:SS +0000', got {quote(text)}",
        )
    try:
        return datetime.strptime(text, _DATE_FORMAT).astimezone(UTC)
    except (ValueError, OverflowError) as exc:
        # ValueError: no such day or offset; OverflowError: in range locally but not in UTC
        # ("0001-01-01 00:00:00 +0100").
        raise FeedFormatError(
            feed, f"{version}: release_date: not a real date in UTC: {quote(text)}"
        ) from exc
