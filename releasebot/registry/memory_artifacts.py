"""``MemoryArtifacts``: the in-memory ``ArtifactRegistry`` for unit tests and benchmarks.

It behaves like ``OrasArtifacts`` on a real registry: manifests are kept as the exact bytes
pushed (the digest is their sha256), blobs are checked, ``request_count`` counts the HTTP
requests the real adapter would send for the same calls, and ``referrers_api`` chooses
between a registry with the OCI 1.1 referrers API (subjects indexed, ``OCI-Subject`` set)
and one without (distribution 2.8: ``referrers`` says ``None``).

``add_image`` stands in for a Kaniko push. Not here: auth, retries, networking.
"""

from __future__ import annotations

import json
import threading

from releasebot.domain.ports import StoredManifest
from releasebot.domain.shared.errors import RegistryError
from releasebot.registry import OCI_INDEX, OCI_MANIFEST, sha256_digest


class MemoryArtifacts:
    """``ArtifactRegistry`` kept in dicts; thread-safe."""

    def __init__(
        self, repository: str = "registry.invalid/nvidia/driver", *, referrers_api: bool = False
    ) -> None:
        self._repository = repository
        self._referrers_api = referrers_api
        self._blobs: dict[str, bytes] = {}
        self._manifests: dict[str, tuple[str, bytes]] = {}
        self._tags: dict[str, str] = {}
        self._lock = threading.Lock()
        self.request_count = 0

    def __repr__(self) -> str:
        return f"MemoryArtifacts({self._repository!r}, manifests={len(self._manifests)})"

    @property
    def repository(self) -> str:
        return self._repository

    # -- what the tests push: images, an index, a tampered blob ------------------------

    def add_image(
        self, tag: str, *, arch: str = "amd64", labels: dict[str, str] | None = None
    ) -> str:
        """A tiny image manifest under ``tag`` (as a build would push it); its digest."""
        config = json.dumps(
            {"architecture": arch, "os": "linux", "config": {"Labels": labels or {}}}
        ).encode()
        self.push_blob(config)
        body = json.dumps(
            {
                "schemaVersion": 2,
                "mediaType": OCI_MANIFEST,
                "config": {
                    "mediaType": "application/vnd.oci.image.config.v1+json",
                    "digest": sha256_digest(config),
                    "size": len(config),
                },
                "layers": [],
            }
        ).encode()
        self.push_manifest(tag, OCI_MANIFEST, body)
        return sha256_digest(body)

    def add_index(self, tag: str, children: dict[str, str]) -> str:
        """An OCI index under ``tag`` over ``{arch: digest}``; its digest."""
        manifests = []
        for arch, digest in sorted(children.items()):
            stored = self.manifest(digest)
            assert stored is not None, digest
            manifests.append(
                {
                    "mediaType": OCI_MANIFEST,
                    "digest": digest,
                    "size": len(stored.body),
                    "platform": {"architecture": arch, "os": "linux"},
                }
            )
        body = json.dumps({"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": manifests})
        self.push_manifest(tag, OCI_INDEX, body.encode())
        return sha256_digest(body.encode())

    def replace_blob(self, digest: str, data: bytes) -> None:
        """Tamper: serve ``data`` for ``digest`` (the real adapter would notice a mismatch)."""
        with self._lock:
            self._blobs[digest] = data

    # -- the ArtifactRegistry port -----------------------------------------------------

    def manifest(self, reference: str) -> StoredManifest | None:
        with self._lock:
            self.request_count += 1
            digest = self._tags.get(reference, reference)
            found = self._manifests.get(digest)
            return None if found is None else StoredManifest(found[0], found[1], digest)

    def blob(self, digest: str) -> bytes | None:
        with self._lock:
            self.request_count += 1
            data = self._blobs.get(digest)
        if data is not None and sha256_digest(data) != digest:
            raise RegistryError(f"registry memory: blob {digest} is corrupt")
        return data

    def push_blob(self, data: bytes) -> str:
        digest = sha256_digest(data)
        with self._lock:
            self.request_count += 1  # the HEAD
            if digest not in self._blobs:
                self.request_count += 2  # POST + PUT
                self._blobs[digest] = data
        return digest

    def push_manifest(self, reference: str, media_type: str, body: bytes) -> bool:
        digest = sha256_digest(body)
        if reference.startswith("sha256:") and reference != digest:
            raise RegistryError(f"registry memory: {reference} is not the digest of the body")
        with self._lock:
            self.request_count += 1
            self._manifests[digest] = (media_type, body)
            if not reference.startswith("sha256:"):
                self._tags[reference] = digest
        return self._referrers_api and b'"subject"' in body

    def referrers(self, digest: str) -> bytes | None:
        with self._lock:
            self.request_count += 1
            if not self._referrers_api:
                return None
            entries = []
            for found, (media_type, body) in sorted(self._manifests.items()):
                document = json.loads(body)
                subject = document.get("subject")
                if isinstance(subject, dict) and subject.get("digest") == digest:
                    entry = {"mediaType": media_type, "digest": found, "size": len(body)}
                    if document.get("artifactType"):
                        entry["artifactType"] = document["artifactType"]
                    if document.get("annotations"):
                        entry["annotations"] = document["annotations"]
                    entries.append(entry)
        index = {"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": entries}
        return json.dumps(index).encode()
