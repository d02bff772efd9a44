"""``MemoryRegistry``: the in-memory ``Registry`` for dry runs and unit tests.

It behaves like ``OrasRegistry`` on the questions releasebot asks (a missing tag is
``None``, tags come in pages and ``request_count`` counts them, labels come from the image
config or the index's annotations, an index is the same bytes the real adapter publishes),
and offers helpers a test uses to arrange the registry: ``add_image``, ``remove_tag`` and
``fail_with``. It keeps real manifest bytes so that digests and sizes are honest sha256s.

Not here: blobs (configs are kept as label maps), networking, auth, retries.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from releasebot.domain.shared.errors import RegistryError, ReleasebotError
from releasebot.domain.shared.versions import Arch
from releasebot.registry import (
    DOCKER_MANIFEST,
    IMAGE_TYPES,
    OCI_INDEX,
    OCI_MANIFEST,
    IndexEntry,
    common_labels,
    render_index,
    sha256_digest,
)

DEFAULT_PAGE_SIZE = 1000


@dataclass(frozen=True)
class _Stored:
    media_type: str
    body: bytes
    arch: Arch | None  # None for an index
    labels: dict[str, str] = field(default_factory=dict)
    """Config labels of an image, annotations of an index."""


class MemoryRegistry:
    """``Registry`` kept in dicts. Thread-safe, so a service's thread pool can share it."""

    def __init__(
        self,
        repository: str = "registry.invalid/nvidia/driver",
        *,
        page_size: int = DEFAULT_PAGE_SIZE,
    ) -> None:
        if page_size < 1:
            raise ValueError("page_size must be positive")
        self._repository = repository
        self._page_size = page_size
        self._tags: dict[str, str] = {}
        self._manifests: dict[str, _Stored] = {}
        self._lock = threading.Lock()
        self._failure: ReleasebotError | None = None
        self.request_count = 0
        """Requests the real registry would have needed for the same calls."""

    def __repr__(self) -> str:
        return f"MemoryRegistry({self._repository!r}, tags={len(self._tags)})"

    @property
    def repository(self) -> str:
        return self._repository

    # -- test helpers ------------------------------------------------------------------

    def add_image(
        self,
        tag: str,
        *,
        arch: Arch = Arch.AMD64,
        labels: Mapping[str, str] | None = None,
        media_type: str = OCI_MANIFEST,
    ) -> str:
        """Store an image manifest under ``tag`` (as a Kaniko push would); its digest."""
        if media_type not in IMAGE_TYPES:
            raise ValueError(f"not an image manifest media type: {media_type}")
        image_labels = dict(labels or {})
        config = json.dumps(
            {"architecture": arch.value, "os": "linux", "config": {"Labels": image_labels}},
            sort_keys=True,
        ).encode()
        config_type = (
            "application/vnd.docker.container.image.v1+json"
            if media_type == DOCKER_MANIFEST
            else "application/vnd.oci.image.config.v1+json"
        )
        body = json.dumps(
            {
                "schemaVersion": 2,
                "mediaType": media_type,
                "config": {
                    "mediaType": config_type,
                    "digest": sha256_digest(config),
                    "size": len(config),
                },
                "layers": [],
            },
            sort_keys=True,
        ).encode()
        digest = sha256_digest(body)
        with self._lock:
            self._manifests[digest] = _Stored(media_type, body, arch, image_labels)
            self._tags[tag] = digest
        return digest

    def remove_tag(self, tag: str) -> None:
        with self._lock:
            self._tags.pop(tag, None)

    def fail_with(self, error: ReleasebotError | None) -> None:
        """Make every port call raise ``error`` (e.g. ``RegistryUnavailableError``) until
        called again with ``None``."""
        with self._lock:
            self._failure = error

    # -- the Registry port -------------------------------------------------------------

    def close(self) -> None:
        pass

    def digest(self, tag: str) -> str | None:
        with self._lock:
            self._request()
            return self._tags.get(tag)

    def tags(self) -> set[str]:
        with self._lock:
            # Like distribution: a full page carries a Link to the next one, even if empty.
            for _ in range(len(self._tags) // self._page_size + 1):
                self._request()
            return set(self._tags)

    def labels(self, reference: str) -> dict[str, str]:
        with self._lock:
            self._request()
            stored = self._lookup(reference)
            if stored is None:
                raise RegistryError(f"registry {self._host}: no manifest {reference}")
            if stored.arch is not None:
                self._request()  # the real adapter reads the config blob too
            return dict(stored.labels)

    def push_index(self, tag: str, manifests: Sequence[tuple[Arch, str]]) -> str:
        with self._lock:
            entries: list[IndexEntry] = []
            label_sets: list[dict[str, str]] = []
            for arch, digest in manifests:
                self._request()
                stored = self._manifests.get(digest)
                if stored is None:
                    raise RegistryError(f"registry {self._host}: no {arch} manifest {digest}")
                if stored.arch != arch:
                    raise RegistryError(
                        f"registry {self._host}: {digest} is an image for "
                        f"{stored.arch or 'several arches'}, not {arch}"
                    )
                self._request()
                entries.append(IndexEntry(arch, digest, stored.media_type, len(stored.body)))
                label_sets.append(stored.labels)
            annotations = common_labels(label_sets)
            body = render_index(entries, annotations)
            digest = sha256_digest(body)
            self._request()
            self._manifests[digest] = _Stored(OCI_INDEX, body, None, annotations)
            self._tags[tag] = digest
            return digest

    # -- internals ---------------------------------------------------------------------

    @property
    def _host(self) -> str:
        return self._repository.split("/", 1)[0]

    def _request(self) -> None:
        """Count one request, or fail as told (called with the lock held)."""
        if self._failure is not None:
            raise self._failure
        self.request_count += 1

    def _lookup(self, reference: str) -> _Stored | None:
        digest = self._tags.get(reference, reference)
        return self._manifests.get(digest)
