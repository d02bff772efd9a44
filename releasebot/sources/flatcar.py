"""Turn a Flatcar release feed (``releases-<channel>.json``) into ``FlatcarRelease`` values.

The feed is one JSON object keyed by version (see ``docs/domain.md`` section 1). This
module is the only place that looks inside it: it checks the shape of every entry it keeps,
skips the ``current``/``current-YYYY`` pseudo-keys, and fingerprints each entry so that a
later upstream edit (even of the release notes) is noticed.

Deliberately not here: fetching (``sources/fetch.py``), deciding what a vanished or edited
entry means (the store and the policy), and reading ``release_notes`` beyond hashing them.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import NotRequired, TypedDict, cast

from releasebot.domain.errors import FeedFormatError
from releasebot.domain.models import FlatcarRelease
from releasebot.domain.versions import Arch, FlatcarVersion, is_kernel_version
from releasebot.sources._json import content_sha256, load_json_document, quote

_DATE_FORMAT = "%Y-%m-%d %H:%M:%S %z"
_DATE_RE = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2} [0-9]{2}:[0-9]{2}:[0-9]{2} [+-][0-9]{4}")
_FLATCAR_ARCHES = {arch.value: arch for arch in Arch}


class RawMajorSoftware(TypedDict):
    """``major_software`` of an entry: each name maps to a ONE-element list."""

    kernel: list[str]


class RawFlatcarRelease(TypedDict):
    """One value of the feed object; only the fields releasebot reads.

    ``release_notes`` is not read, but it is part of ``content_sha256``.
    """

    channel: str
    architectures: list[str]
    release_date: NotRequired[str | None]
    major_software: RawMajorSoftware


def parse_flatcar_feed(feed: str, body: bytes) -> list[FlatcarRelease]:
    """Every release the feed lists, oldest first (integer order: 4081.3.9 < 4081.3.10).

    Raises ``FeedFormatError`` naming the version and the field when anything is off: one
    bad entry rejects the whole body, so a broken upload never looks like removed releases.
    """
    document = load_json_document(feed, body)
    if not isinstance(document, dict):
        raise FeedFormatError(
            feed, f"expected a JSON object keyed by version, got {type(document).__name__}"
        )
    releases: list[FlatcarRelease] = []
    for key, value in document.items():
        if key == "current" or key.startswith("current-"):
            # Pseudo-keys hold a copy of one release without its version: nothing to learn.
            continue
        if not FlatcarVersion.is_valid(key):
            raise FeedFormatError(
                feed, f"key {quote(key)} is not a version (expected MAJOR.MINOR.PATCH)"
            )
        releases.append(_parse_entry(feed, FlatcarVersion.parse(key), value))
    releases.sort(key=lambda release: release.version)
    return releases


def _parse_entry(feed: str, version: FlatcarVersion, value: object) -> FlatcarRelease:
    raw = _check_entry(feed, version, value)
    arches = frozenset(
        _FLATCAR_ARCHES[name] for name in raw["architectures"] if name in _FLATCAR_ARCHES
    )
    return FlatcarRelease(
        version=version,
        channel=raw["channel"],
        arches=arches,
        kernel=raw["major_software"]["kernel"][0],
        released_at=_parse_date(feed, version, raw.get("release_date")),
        content_sha256=content_sha256(value),
    )


def _check_entry(feed: str, version: FlatcarVersion, value: object) -> RawFlatcarRelease:
    """Prove that ``value`` has the ``RawFlatcarRelease`` shape, or say which field breaks it."""

    def bad(field: str, expected: str, got: object) -> FeedFormatError:
        return FeedFormatError(feed, f"{version}: {field}: expected {expected}, got {quote(got)}")

    if not isinstance(value, dict):
        raise FeedFormatError(feed, f"{version}: expected an object, got {type(value).__name__}")
    channel = value.get("channel")
    if not isinstance(channel, str) or not channel:
        raise bad("channel", "a channel name", channel)
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
    except ValueError as exc:
        raise FeedFormatError(
            feed, f"{version}: release_date: not a real date: {quote(text)}"
        ) from exc
