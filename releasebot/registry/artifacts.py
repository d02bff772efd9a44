"""``OrasArtifacts``: the ``ArtifactRegistry`` port on ``OrasRegistry``'s request loop.

Why it exists: signatures, SBOMs and provenance are blobs and manifests releasebot itself
pushes next to an image, and reads back to verify. This adapter speaks those parts of the
distribution API (blob HEAD/upload/GET, manifest PUT/GET, the OCI 1.1 referrers API) with
the same credentials, TLS settings, timeouts and bounded retries as ``OrasRegistry``, and
translates every answer into the domain's errors.

Details that matter: a blob upload is one POST and one monolithic PUT (the ``Location`` must
stay on the registry's host, or credentials would follow it elsewhere); a blob read is
checked against its digest; a manifest PUT reports whether the registry set ``OCI-Subject``
(it indexed the ``subject``, OCI 1.1); a referrers query answering 404 means "no referrers
API" (distribution 2.8), since a registry that has one answers an empty index instead.

Deliberately not here: chunked uploads (attachments are kilobytes), cross-repository
mounts, deleting.
"""

from __future__ import annotations

from urllib.parse import urljoin

from releasebot.domain.ports import StoredManifest
from releasebot.domain.shared.errors import RegistryAuthError, RegistryError
from releasebot.domain.shared.references import is_sha256_digest
from releasebot.edge.text import one_line
from releasebot.registry import INDEX_TYPES, MANIFEST_TYPES, OCI_INDEX, OCI_MANIFEST, sha256_digest
from releasebot.registry.oras import OrasRegistry, RegistryAnswer

MAX_ATTACHMENT_BYTES = 4 * 1024 * 1024
"""Largest blob pushed or read here (the adapter's own read limit): an SBOM or a DSSE
envelope is a few kilobytes."""
_ACCEPT = ", ".join(MANIFEST_TYPES)


class OrasArtifacts:
    """``ArtifactRegistry`` for the repository ``registry`` reads."""

    def __init__(self, registry: OrasRegistry) -> None:
        self._registry = registry
        self._host = registry.repository.split("/", 1)[0]

    def __repr__(self) -> str:
        return f"OrasArtifacts({self._registry.repository!r})"

    @property
    def repository(self) -> str:
        return self._registry.repository

    @property
    def request_count(self) -> int:
        return self._registry.request_count

    def manifest(self, reference: str) -> StoredManifest | None:
        answer = self._registry.request("GET", f"manifests/{reference}", {"Accept": _ACCEPT})
        if answer.status == 404:
            return None
        self._expect(answer, f"manifest {reference}")
        media_type = answer.headers.get("Content-Type", "").split(";")[0].strip()
        if media_type not in MANIFEST_TYPES:
            media_type = OCI_INDEX if b'"manifests"' in answer.body else OCI_MANIFEST
        digest = sha256_digest(answer.body)
        if is_sha256_digest(reference) and digest != reference:
            raise RegistryError(f"registry {self._host}: manifest {reference} is corrupt")
        return StoredManifest(media_type, answer.body, digest)

    def blob(self, digest: str) -> bytes | None:
        if not is_sha256_digest(digest):
            raise RegistryError(f"registry {self._host}: not a blob digest: {one_line(digest)!r}")
        answer = self._registry.request("GET", f"blobs/{digest}", {})
        if answer.status == 404:
            return None
        self._expect(answer, f"blob {digest}")
        if sha256_digest(answer.body) != digest:
            raise RegistryError(f"registry {self._host}: blob {digest} is corrupt")
        return answer.body

    def push_blob(self, data: bytes) -> str:
        if len(data) > MAX_ATTACHMENT_BYTES:
            raise RegistryError(f"registry {self._host}: attachment over {MAX_ATTACHMENT_BYTES} B")
        digest = sha256_digest(data)
        head = self._registry.request("HEAD", f"blobs/{digest}", {})
        if head.status == 200:
            return digest
        started = self._registry.request("POST", "blobs/uploads/", {"Content-Length": "0"})
        self._expect(started, "blob upload")
        location = started.headers.get("Location")
        if not location:
            raise RegistryError(f"registry {self._host}: blob upload without a Location")
        absolute = urljoin(f"{self._base_url()}/", location)
        separator = "&" if "?" in absolute else "?"
        done = self._registry.request(
            "PUT",
            f"{absolute}{separator}digest={digest}",
            {"Content-Type": "application/octet-stream"},
            data,
        )
        self._expect(done, f"blob {digest}")
        return digest

    def push_manifest(self, reference: str, media_type: str, body: bytes) -> bool:
        if media_type not in (OCI_MANIFEST, *INDEX_TYPES):
            raise ValueError(f"not a manifest media type releasebot pushes: {media_type}")
        answer = self._registry.request(
            "PUT", f"manifests/{reference}", {"Content-Type": media_type}, body
        )
        self._expect(answer, f"manifest {reference}")
        answered = answer.headers.get("Docker-Content-Digest")
        if answered is not None and answered != sha256_digest(body):
            raise RegistryError(
                f"registry {self._host}: stored {reference} as {one_line(answered)}, "
                "not the bytes sent"
            )
        return bool(answer.headers.get("OCI-Subject"))

    def referrers(self, digest: str) -> bytes | None:
        if not is_sha256_digest(digest):
            raise RegistryError(f"registry {self._host}: not a digest: {one_line(digest)!r}")
        answer = self._registry.request("GET", f"referrers/{digest}", {"Accept": OCI_INDEX})
        if answer.status in (404, 405):
            return None
        self._expect(answer, f"referrers of {digest}")
        return answer.body

    def _base_url(self) -> str:
        # The same base ``OrasRegistry`` sends to: scheme and host of its repository URL.
        return self._registry.base_url

    def _expect(self, answer: RegistryAnswer, what: str) -> None:
        if 200 <= answer.status < 300:
            return
        reason = one_line(answer.reason)
        if answer.status in (401, 403):
            raise RegistryAuthError(
                f"registry {self._host}: {what}: {answer.status} {reason} — the "
                "account needs push rights on the repository to attach signatures"
            )
        raise RegistryError(f"registry {self._host}: {what}: {answer.status} {reason}")
