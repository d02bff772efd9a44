"""Registry adapters: ``OrasRegistry`` (``registry/oras.py``) and ``MemoryRegistry``.

This package module holds only what both adapters must agree on, so that an index published
in a dry run looks exactly like one published for real: the OCI media types and the one
function that renders an image index. It imports no transport library; wiring imports the
concrete adapter it wants from its own module.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta

from releasebot.domain.shared.versions import Arch

OCI_INDEX = "application/vnd.oci.image.index.v1+json"
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
DOCKER_MANIFEST_LIST = "application/vnd.docker.distribution.manifest.list.v2+json"
DOCKER_MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"

INDEX_TYPES = frozenset({OCI_INDEX, DOCKER_MANIFEST_LIST})
IMAGE_TYPES = frozenset({OCI_MANIFEST, DOCKER_MANIFEST})
MANIFEST_TYPES = (OCI_INDEX, OCI_MANIFEST, DOCKER_MANIFEST_LIST, DOCKER_MANIFEST)
"""Every manifest kind releasebot reads, in the order sent in ``Accept``."""

DEFAULT_TIMEOUT = timedelta(seconds=30)
"""One registry request's timeout (``registry.timeout_seconds``): a manifest or a tag page
comes in milliseconds; 30 s rides out a slow proxy without stalling a cycle for long."""


@dataclass(frozen=True)
class IndexEntry:
    """One per-arch image an index points at."""

    arch: Arch
    digest: str
    media_type: str
    size: int


def sha256_digest(body: bytes) -> str:
    return "sha256:" + hashlib.sha256(body).hexdigest()


def common_labels(per_arch: Sequence[Mapping[str, str]]) -> dict[str, str]:
    """The labels every per-arch image carries with the same value.

    ``push_index`` copies them into the index's annotations, so ``labels(tag)`` answers in
    one request for a multi-arch tag as it does for a single-arch one.
    """
    if not per_arch:
        return {}
    first, *rest = per_arch
    return {
        key: value
        for key, value in sorted(first.items())
        if all(other.get(key) == value for other in rest)
    }


def render_index(entries: Sequence[IndexEntry], annotations: Mapping[str, str]) -> bytes:
    """The exact bytes of the OCI image index both adapters publish.

    Entries are sorted by arch and keys by name, so the same images always give the same
    index digest: publishing a tag twice is a no-op, not a new digest.
    """
    arches = [entry.arch for entry in entries]
    if not entries or len(set(arches)) != len(arches):
        raise ValueError(f"an index needs distinct arches, got {[str(a) for a in arches]}")
    document: dict[str, object] = {
        "schemaVersion": 2,
        "mediaType": OCI_INDEX,
        "manifests": [
            {
                "mediaType": entry.media_type,
                "digest": entry.digest,
                "size": entry.size,
                "platform": {"architecture": entry.arch.value, "os": "linux"},
            }
            for entry in sorted(entries, key=lambda entry: entry.arch.value)
        ],
    }
    if annotations:
        document["annotations"] = dict(sorted(annotations.items()))
    return json.dumps(document, sort_keys=True, separators=(",", ":")).encode()
