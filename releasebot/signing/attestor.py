"""``RegistryAttestor``: the ``Attestor`` port on an ``ArtifactRegistry``.

For a published tag with digest ``D`` it attaches, in the formats cosign and OCI 1.1 tools
read (``releasebot/signing/formats.py``):

1. a signature of ``D`` and, for an index, of every per-arch image: a layer in cosign's
   ``sha256-<hex>.sig`` image (other signatures there, e.g. by a previous key, are kept);
2. the SBOM (CycloneDX JSON) as a referrer of ``D`` with ``artifactType
   application/vnd.cyclonedx+json``;
3. the provenance (in-toto statement, SLSA v1) in a DSSE envelope signed with the key, as
   a referrer with ``artifactType application/vnd.in-toto+json``;
4. both as cosign attestations in ``sha256-<hex>.att`` (what ``cosign verify-attestation``
   and Kyverno's ``verifyImages.attestations`` read), the SBOM wrapped in an in-toto
   statement (predicate ``https://cyclonedx.org/bom``), so the SBOM is signed too;
5. where the registry has the referrers API, the signature again as a cosign OCI 1.1
   referrer; where it has not, the referrers tag ``sha256-<hex>`` indexes the SBOM and the
   provenance (the distribution spec's fallback), and a warning says so once.

Signatures are deterministic (RFC 6979), so attaching the same facts again pushes the same
bytes: ``attest`` is idempotent and a retry after a crash adds nothing.

``verify`` is ``SignatureVerifier``'s (``signing/verifier.py``): it trusts nothing it
attached and reads everything back from the registry.

Deliberately not here: deleting old attachments, keyless signing, Rekor.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable, Sequence
from typing import Any

from releasebot.domain.ports import ArtifactRegistry, MaterialSource
from releasebot.domain.shared.errors import SigningError, VerificationError
from releasebot.domain.targets.attestation import (
    Attestation,
    AttestationRequest,
    Material,
    Verification,
)
from releasebot.domain.targets.models import Target
from releasebot.signing import (
    CYCLONEDX,
    CYCLONEDX_PREDICATE,
    DSSE_ENVELOPE,
    EMPTY_JSON,
    IN_TOTO,
    PREDICATE_ANNOTATION,
    REFERRER_PREDICATE_ANNOTATION,
    SLSA_PROVENANCE,
)
from releasebot.signing import formats as oci
from releasebot.signing.documents import Builder, render_provenance, render_sbom
from releasebot.signing.keyfiles import KeyPair
from releasebot.signing.keys import SigningKey, VerifyingKey
from releasebot.signing.verifier import SignatureVerifier, layer_verifies, read_layers

log = logging.getLogger("releasebot.signing")


class RegistryAttestor:
    """Signs with ``keys()`` (called once per ``attest``: the pair in force now, which a
    key rotation changes), verifies with that pair's public key."""

    def __init__(
        self,
        artifacts: ArtifactRegistry,
        *,
        keys: Callable[[], KeyPair],
        builder: Builder,
        materials: MaterialSource | None = None,
    ) -> None:
        self._artifacts = artifacts
        self._keys = keys
        self._builder = builder
        self._materials = materials
        self._told_fallback = False
        self._lock = threading.Lock()
        self._attested_with: VerifyingKey | None = None

    def __repr__(self) -> str:
        return f"RegistryAttestor({self._artifacts.repository!r})"

    @property
    def fingerprint(self) -> str:
        return self._keys().fingerprint

    # -- attaching ---------------------------------------------------------------------

    def attest(self, request: AttestationRequest) -> Attestation:
        pair = self._keys()
        key, public = pair.signing, pair.public
        if key.public.fingerprint != public.fingerprint:
            raise SigningError(
                f"the signing key ({key.public.fingerprint}) does not belong to the "
                f"configured public key ({public.fingerprint})"
            )
        with self._lock:
            self._attested_with = public
        materials = self._collect_materials(request)
        subject = self._descriptor(request.digest)
        for digest in request.signed_digests:
            self._sign(digest, key)
        sbom = render_sbom(request, self._builder, materials)
        provenance = render_provenance(request, self._builder, materials)
        provenance_envelope = _envelope(key, provenance)
        sbom_statement = _statement(request, CYCLONEDX_PREDICATE, json.loads(sbom))
        sbom_envelope = _envelope(key, sbom_statement)
        referrers = [
            self._push_referrer(subject, CYCLONEDX, CYCLONEDX, sbom, {}),
            self._push_referrer(
                subject,
                IN_TOTO,
                DSSE_ENVELOPE,
                provenance_envelope,
                {REFERRER_PREDICATE_ANNOTATION: SLSA_PROVENANCE},
            ),
        ]
        self._attach_attestations(
            request.digest,
            [(provenance_envelope, SLSA_PROVENANCE), (sbom_envelope, CYCLONEDX_PREDICATE)],
        )
        api = all(indexed for _, indexed in referrers)
        if api:
            for digest in request.signed_digests:
                self._signature_referrer(digest)
        else:
            self._update_referrers_tag(request.digest, [entry for entry, _ in referrers])
        return Attestation(public.fingerprint, request.signed_digests, api)

    def _collect_materials(self, request: AttestationRequest) -> list[Material]:
        found: dict[str, Material] = {}
        for build in request.builds:
            if self._materials is not None and isinstance(request.target, Target):
                # A driver base's inputs are its build args (the runfile's pinned SHA-256).
                for material in self._materials.materials(request.target, build.arch):
                    found.setdefault(material.uri, material)
            pinned = dict(build.build_args).get("NVIDIA_RUNFILE_SHA256")
            if pinned:
                for uri, material in list(found.items()):
                    if (
                        uri.endswith(".run")
                        and not material.digests
                        and build.arch.nvidia_name in uri
                    ):
                        found[uri] = Material(uri, (("sha256", pinned.lower()),))
        return sorted(found.values(), key=lambda m: m.uri)

    def _descriptor(self, digest: str) -> dict[str, Any]:
        stored = self._artifacts.manifest(digest)
        if stored is None:
            raise SigningError(f"cannot sign {digest}: the registry has no such manifest")
        return {"mediaType": stored.media_type, "digest": stored.digest, "size": len(stored.body)}

    def _sign(self, digest: str, key: SigningKey) -> None:
        """Add our signature of ``digest`` to its ``.sig`` image (once)."""
        payload = oci.simple_signing_payload(self._artifacts.repository, digest)
        layer = oci.signature_layer(payload, key.sign(payload))
        tag = oci.signature_tag(digest)
        existing = self._layers(tag)
        if any(_same_layer(item, layer) for item in existing):
            return
        kept = [item for item in existing if not _is_ours(key.public, item, payload)]
        self._artifacts.push_blob(payload)
        self._push_image(tag, [*kept, layer])

    def _attach_attestations(self, digest: str, envelopes: Sequence[tuple[bytes, str]]) -> None:
        tag = oci.attestation_tag(digest)
        existing = self._layers(tag)
        layers = [oci.attestation_layer(envelope, kind) for envelope, kind in envelopes]
        if all(any(_same_layer(item, new) for item in existing) for new in layers):
            return
        replaced = {kind for _, kind in envelopes}
        kept = [
            item
            for item in existing
            if (item.get("annotations") or {}).get(PREDICATE_ANNOTATION) not in replaced
        ]
        for envelope, _ in envelopes:
            self._artifacts.push_blob(envelope)
        self._push_image(tag, [*kept, *layers])

    def _push_referrer(
        self,
        subject: dict[str, Any],
        artifact_type: str,
        layer_type: str,
        content: bytes,
        annotations: dict[str, str],
    ) -> tuple[dict[str, Any], bool]:
        """Push one referrer of ``subject``; its index entry and whether the registry
        indexed it itself (the referrers API)."""
        self._artifacts.push_blob(EMPTY_JSON)
        self._artifacts.push_blob(content)
        layer = oci.descriptor(layer_type, content)
        body = oci.image_manifest(
            oci.empty_config(),
            [layer],
            subject=subject,
            artifact_type=artifact_type,
            annotations=annotations or None,
        )
        digest = oci.sha256_digest(body)
        indexed = self._artifacts.push_manifest(digest, oci.OCI_MANIFEST, body)
        entry = oci.descriptor(oci.OCI_MANIFEST, body, artifactType=artifact_type)
        if annotations:
            entry["annotations"] = annotations
        return entry, indexed

    def _signature_referrer(self, digest: str) -> None:
        layers = self._layers(oci.signature_tag(digest))
        body = oci.signature_referrer(self._descriptor(digest), layers)
        self._artifacts.push_manifest(oci.sha256_digest(body), oci.OCI_MANIFEST, body)

    def _update_referrers_tag(self, digest: str, entries: Sequence[dict[str, Any]]) -> None:
        with self._lock:
            if not self._told_fallback:
                self._told_fallback = True
                log.warning(
                    "registry of %s has no OCI referrers API: SBOM and provenance are listed "
                    "under the referrers tag sha256-<digest> (and in cosign's .att tag)",
                    self._artifacts.repository,
                )
        tag = oci.referrers_tag(digest)
        existing = self._artifacts.manifest(tag)
        try:
            body = oci.merge_referrers(existing.body if existing else None, entries)
        except ValueError:  # something else holds the tag: start a clean index over it
            body = oci.merge_referrers(None, entries)
        if existing is None or existing.body != body:
            self._artifacts.push_manifest(tag, oci.OCI_INDEX, body)

    def _push_image(self, tag: str, layers: Sequence[dict[str, Any]]) -> None:
        config = oci.layers_config(layers)
        self._artifacts.push_blob(config)
        body = oci.image_manifest(oci.descriptor(oci.OCI_CONFIG, config), layers)
        self._artifacts.push_manifest(tag, oci.OCI_MANIFEST, body)

    def _layers(self, tag: str) -> list[dict[str, Any]]:
        return read_layers(self._artifacts, tag)

    # -- verifying ---------------------------------------------------------------------

    def verify(self, reference: str) -> Verification:
        """Checked against the pair in force now and, should a rotation have come between,
        the public key the last ``attest`` signed with (each publish attests, then verifies)."""
        current = self._keys().public
        with self._lock:
            recent = self._attested_with
        try:
            return SignatureVerifier(self._artifacts, current).verify(reference)
        except VerificationError:
            if recent is None or recent.fingerprint == current.fingerprint:
                raise
        return SignatureVerifier(self._artifacts, recent).verify(reference)


def _is_ours(public: VerifyingKey, layer: dict[str, Any], payload: bytes) -> bool:
    """An older layer with the same payload signed by this key (replaced, not doubled)."""
    return layer.get("digest") == oci.sha256_digest(payload) and layer_verifies(
        public, layer, payload
    )


def _envelope(key: SigningKey, statement: bytes) -> bytes:
    return oci.dsse_envelope(IN_TOTO, statement, key.sign(oci.pae(IN_TOTO, statement)))


def _statement(request: AttestationRequest, predicate_type: str, predicate: Any) -> bytes:
    return oci.canonical(
        {
            "_type": "https://in-toto.io/Statement/v1",
            "subject": [
                {
                    "name": f"{request.repository}:{request.tag}",
                    "digest": {"sha256": request.digest.removeprefix("sha256:")},
                }
            ],
            "predicateType": predicate_type,
            "predicate": predicate,
        }
    )


def _same_layer(a: dict[str, Any], b: dict[str, Any]) -> bool:
    return a.get("digest") == b.get("digest") and (a.get("annotations") or {}) == (
        b.get("annotations") or {}
    )
