"""``OrasJanitor``: the ``RegistryJanitor`` port (retention's deletes) on ``OrasRegistry``.

Why it exists: retention deletes the tags of Flatcar releases no node needs any more. The
OCI distribution API deletes a manifest by digest (``DELETE /v2/<name>/manifests/
<digest>``; a tag is resolved first with a ``HEAD`` carrying every manifest media type in
``Accept``, whose ``Docker-Content-Digest`` is the digest), which removes every tag on it.
A registry that does not allow deletes answers 405 or the error code ``UNSUPPORTED``
(distribution without ``storage.delete.enabled``): that is ``DeleteRefusedError``, one line
for the operator, and nothing else happens.

What a kept tag reaches (``reachable``) is computed before anything is deleted: its
manifest, an index's images, and for each of those, transitively, the cosign tags, the
referrers tag's index and what the referrers API lists. Retention never deletes any of it,
whatever a deleted tag's referrers answer says.

What belongs to a digest (``attachments``), as ``signing/`` writes it: cosign's
``sha256-<hex>.sig`` and ``.att`` tags, the referrers tag ``sha256-<hex>`` (an index of the
SBOM and provenance manifests, for registries without the referrers API) and what the OCI
1.1 referrers API lists, for the digest and for each image of its index. An index or
referrers answer that cannot be read is a ``RegistryError`` (retention then keeps the tag
and reports it), never an empty list that would leave attachments behind unnoticed. Everything goes
through ``OrasRegistry``'s request loop: the same credentials, TLS, timeouts and retries.
Deliberately not here: deciding what to delete (``domain.fleet.retention``), blobs (the
registry's garbage collection frees them).
"""

from __future__ import annotations

from collections.abc import Collection

from releasebot.domain.shared.errors import DeleteRefusedError, RegistryAuthError, RegistryError
from releasebot.domain.shared.references import is_sha256_digest
from releasebot.edge.json import JsonLimits, JsonRefusedError, decode_json
from releasebot.edge.text import one_line
from releasebot.registry import INDEX_TYPES, MANIFEST_TYPES, OCI_INDEX
from releasebot.registry.oras import OrasRegistry, RegistryAnswer

MAX_LISTED = 256
"""Manifests read from one index or referrers answer: releasebot attaches a handful."""
MAX_REACHED = 1024
"""Manifests one tag may reach (its images, signatures, attestations, referrers, and
theirs): an image releasebot signed reaches about ten. More is a registry answering in
circles or a repository nobody should prune blindly: a ``RegistryError``, so nothing is
deleted."""
_ACCEPT = ", ".join(MANIFEST_TYPES)
_ERROR_LIMITS = JsonLimits(max_bytes=64 * 1024)
"""An error body is a few hundred bytes; more is not read as one."""


class OrasJanitor:
    """``RegistryJanitor`` for the repository ``registry`` reads."""

    def __init__(self, registry: OrasRegistry) -> None:
        self._registry = registry
        self._host = registry.repository.split("/", 1)[0]

    def __repr__(self) -> str:
        return f"OrasJanitor({self._registry.repository!r})"

    @property
    def repository(self) -> str:
        return self._registry.repository

    def tags(self) -> set[str]:
        return self._registry.tags()

    def digest(self, tag: str) -> str | None:
        return self._registry.digest(tag)

    def attachments(self, digest: str) -> tuple[str, ...]:
        self._check(digest)
        found: list[str] = []
        for subject in (digest, *self._listed(digest)):
            hex_part = subject.split(":", 1)[1]
            for tag in (f"sha256-{hex_part}.sig", f"sha256-{hex_part}.att"):
                attached = self._registry.digest(tag)
                if attached is not None:
                    found.append(attached)
            index = self._registry.digest(f"sha256-{hex_part}")
            if index is not None:
                found += [index, *self._listed(index)]
            found += self._referrers(subject)
        unique = dict.fromkeys(d for d in found if d != digest)
        return tuple(unique)

    def reachable(self, digests: Collection[str]) -> dict[str, frozenset[str]]:
        """For each digest, every manifest it reaches, itself included: an index's images
        and, for every manifest reached, its ``.sig``/``.att`` tags, its referrers tag (and
        what that lists) and its OCI 1.1 referrers, transitively. Each manifest is asked
        about once per call. Anything unreadable, or more than ``MAX_REACHED`` manifests
        from one digest, is a ``RegistryError``: the caller cannot know what is safe."""
        edges: dict[str, tuple[str, ...]] = {}
        reached: dict[str, frozenset[str]] = {}
        for digest in sorted(set(digests)):
            self._check(digest)
            seen = {digest}
            queue = [digest]
            while queue:
                node = queue.pop()
                if node not in edges:
                    edges[node] = self._edges(node)
                for found in edges[node]:
                    if found in seen:
                        continue
                    if len(seen) >= MAX_REACHED:
                        raise RegistryError(
                            f"registry {self._host}: {digest} reaches over {MAX_REACHED} manifests"
                        )
                    seen.add(found)
                    queue.append(found)
            reached[digest] = frozenset(seen)
        return reached

    def delete(self, digest: str) -> bool:
        self._check(digest)
        try:
            answer = self._registry.request("DELETE", f"manifests/{digest}", {"Accept": _ACCEPT})
        except RegistryAuthError as error:  # pull and push may work, delete not
            raise RegistryAuthError(
                f"{error}; deleting needs the delete permission on the repository"
            ) from error
        if answer.status in (200, 202, 204):
            return True
        code = _error_code(answer)
        if answer.status == 405 or code == "UNSUPPORTED":
            raise DeleteRefusedError(
                f"registry {self._host} refuses deletes ({answer.status} {one_line(answer.reason)}"
                f"{' ' + code if code else ''}): allow deletes in the registry (distribution: "
                "storage.delete.enabled) or turn retention off"
            )
        if answer.status == 404:
            return False
        raise RegistryError(
            f"registry {self._host}: delete {digest}: {answer.status} {one_line(answer.reason)}"
        )

    # -- reading what belongs to a digest ------------------------------------------------

    def _edges(self, digest: str) -> tuple[str, ...]:
        """What ``digest`` points at or has attached, one step."""
        hex_part = digest.split(":", 1)[1]
        found = list(self._listed(digest))
        for tag in (f"sha256-{hex_part}.sig", f"sha256-{hex_part}.att", f"sha256-{hex_part}"):
            attached = self._registry.digest(tag)
            if attached is not None:
                found.append(attached)
        found += self._referrers(digest)
        return tuple(dict.fromkeys(found))

    def _listed(self, digest: str) -> list[str]:
        """The manifests an index lists; none for an image (or a manifest gone)."""
        answer = self._registry.request("GET", f"manifests/{digest}", {"Accept": _ACCEPT})
        if answer.status == 404:
            return []
        self._expect(answer, f"manifest {digest}")
        media_type = answer.headers.get("Content-Type", "").split(";")[0].strip()
        what = f"manifest {digest}"
        document = self._document(answer.body, what)
        if media_type not in INDEX_TYPES and "manifests" not in document:
            return []
        return self._digests(document, what)

    def _referrers(self, digest: str) -> list[str]:
        answer = self._registry.request("GET", f"referrers/{digest}", {"Accept": OCI_INDEX})
        if answer.status in (400, 404, 405):  # no referrers API (distribution 2.8)
            return []
        self._expect(answer, f"referrers of {digest}")
        what = f"referrers of {digest}"
        return self._digests(self._document(answer.body, what), what)

    def _document(self, body: bytes, what: str) -> dict[str, object]:
        """``body`` decoded by the edge's bounded reader: a body nested too deep, with an
        integer too long or larger than the limit is a ``RegistryError``, never Python's."""
        try:
            document = decode_json(body)
        except JsonRefusedError as error:
            raise RegistryError(
                f"registry {self._host}: {what} is not JSON: {error.problem}"
            ) from error
        if not isinstance(document, dict):
            raise RegistryError(f"registry {self._host}: {what} is not a JSON object")
        return document

    def _digests(self, document: dict[str, object], what: str) -> list[str]:
        """The digests an index lists (at most ``MAX_LISTED``). An index that cannot be
        read is a ``RegistryError``, never an empty list: what it lists would otherwise
        stay behind unnoticed, so the caller keeps the tag and reports the error."""
        manifests = document.get("manifests", [])
        if not isinstance(manifests, list):
            raise RegistryError(f"registry {self._host}: {what}: manifests is not a list")
        found = []
        for entry in manifests[:MAX_LISTED]:
            digest = entry.get("digest") if isinstance(entry, dict) else None
            if not (isinstance(digest, str) and is_sha256_digest(digest)):
                raise RegistryError(
                    f"registry {self._host}: {what}: lists {one_line(digest)!r}, "
                    "not a sha256 digest"
                )
            found.append(digest)
        return found

    def _check(self, digest: str) -> None:
        if not is_sha256_digest(digest):
            raise RegistryError(f"registry {self._host}: not a digest: {one_line(digest)!r}")

    def _expect(self, answer: RegistryAnswer, what: str) -> None:
        if 200 <= answer.status < 300:
            return
        if answer.status in (401, 403):
            raise RegistryAuthError(
                f"registry {self._host}: {what}: {answer.status} {one_line(answer.reason)} — "
                "check the credentials"
            )
        raise RegistryError(
            f"registry {self._host}: {what}: {answer.status} {one_line(answer.reason)}"
        )


def _error_code(answer: RegistryAnswer) -> str:
    try:
        code = decode_json(answer.body, _ERROR_LIMITS)["errors"][0]["code"]  # type: ignore[index]
    except (JsonRefusedError, TypeError, KeyError, IndexError):
        return ""
    return one_line(code) if isinstance(code, str) else ""
