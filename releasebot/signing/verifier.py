"""``SignatureVerifier``: checks what is attached to a tag, trusting nothing but the key.

It reads everything back from the registry (never from what was just pushed) and accepts a
tag only when: every manifest (the tag's, and for an index each arch's) has a cosign
signature layer whose payload names that digest and this repository and whose signature
the PUBLIC key verifies; a provenance referrer holds a DSSE envelope the key signed, with
an in-toto statement about the digest whose SLSA v1 predicate parses with
in-toto-attestation; an SBOM referrer parses with cyclonedx-python-lib, describes the digest,
and equals the SBOM the key signed in cosign's ``.att`` attestation.

Hostile answers are bounded (``MAX_LAYERS``, ``MAX_REFERRERS``); a layer or referrer that
does not parse is skipped, and only "nothing valid found" is an error.
"""

from __future__ import annotations

import base64
import binascii
import logging
from collections.abc import Sequence
from typing import Any

from releasebot.domain.ports import ArtifactRegistry, StoredManifest
from releasebot.domain.shared.errors import VerificationError
from releasebot.domain.targets.attestation import Verification
from releasebot.signing import (
    CYCLONEDX,
    CYCLONEDX_PREDICATE,
    IN_TOTO,
    PREDICATE_ANNOTATION,
    SIGNATURE_ANNOTATION,
    SIMPLE_SIGNING,
    SLSA_PROVENANCE,
)
from releasebot.signing import formats as oci
from releasebot.signing.keys import VerifyingKey

log = logging.getLogger("releasebot.signing")

MAX_LAYERS = 64
"""Signature or attestation layers looked at per manifest: a registry cannot make a
verification walk thousands of blobs."""
MAX_REFERRERS = 64
INDEX_TYPES = ("application/vnd.oci.image.index.v1+json",
               "application/vnd.docker.distribution.manifest.list.v2+json")  # fmt: skip


def read_layers(artifacts: ArtifactRegistry, tag: str) -> list[dict[str, Any]]:
    """The layers of the image under ``tag`` (e.g. ``.sig``); empty if none or unreadable."""
    stored = artifacts.manifest(tag)
    if stored is None:
        return []
    try:
        return oci.manifest_layers(stored.body)[:MAX_LAYERS]
    except ValueError:
        return []  # not a manifest anyone can use: a valid one replaces it


def layer_verifies(public: VerifyingKey, layer: dict[str, Any], payload: bytes) -> bool:
    """Whether the layer's signature annotation is ``public``'s signature of ``payload``."""
    encoded = (layer.get("annotations") or {}).get(SIGNATURE_ANNOTATION)
    if not isinstance(encoded, str) or not encoded:
        return False
    try:
        signature = base64.b64decode(encoded, validate=True)
    except (ValueError, binascii.Error):
        return False
    return public.verify(signature, payload)


class SignatureVerifier:
    """Checks a tag's attachments in ``artifacts`` against ``public``."""

    def __init__(self, artifacts: ArtifactRegistry, public: VerifyingKey) -> None:
        self._artifacts = artifacts
        self._public = public

    @property
    def fingerprint(self) -> str:
        return self._public.fingerprint

    def verify(self, reference: str) -> Verification:
        top = self._artifacts.manifest(reference)
        if top is None:
            raise VerificationError(f"{self._artifacts.repository}:{reference}: no such tag")
        digests = [top.digest, *self._children(top)]
        for digest in digests:
            self._check_signature(digest)
        listing = self._listing(top.digest)
        materials = self._check_provenance(top.digest, listing)
        components = self._check_sbom(top.digest, listing)
        return Verification(top.digest, self.fingerprint, tuple(digests), components, materials)

    def _children(self, stored: StoredManifest) -> list[str]:
        if stored.media_type not in INDEX_TYPES:
            return []
        try:
            return [str(item["digest"]) for item in oci.index_manifests(stored.body)]
        except ValueError as error:
            raise VerificationError(f"{stored.digest}: {error}") from None

    def _check_signature(self, digest: str) -> None:
        for layer in read_layers(self._artifacts, oci.signature_tag(digest)):
            if layer.get("mediaType") != SIMPLE_SIGNING:
                continue
            payload = self._artifacts.blob(str(layer["digest"]))
            if payload is None:
                continue
            try:
                reference, signed = oci.parse_simple_signing(payload)
            except ValueError:
                continue
            if (
                signed == digest
                and reference == self._artifacts.repository
                and layer_verifies(self._public, layer, payload)
            ):
                return
        raise VerificationError(
            f"{self._artifacts.repository}@{digest}: no valid signature by {self.fingerprint}"
        )

    def _listing(self, digest: str) -> list[dict[str, Any]]:
        """The referrers of ``digest``: the referrers API's answer, else the referrers tag."""
        body = self._artifacts.referrers(digest)
        if body is None:
            stored = self._artifacts.manifest(oci.referrers_tag(digest))
            body = stored.body if stored is not None else None
        if body is None:
            return []
        try:
            return oci.index_manifests(body)[:MAX_REFERRERS]
        except ValueError as error:
            raise VerificationError(f"referrers of {digest}: {error}") from None

    def _referrer_contents(
        self, listing: Sequence[dict[str, Any]], artifact_type: str
    ) -> list[bytes]:
        found = []
        for entry in listing:
            if entry.get("artifactType") != artifact_type:
                continue
            stored = self._artifacts.manifest(str(entry["digest"]))
            if stored is None:
                continue
            try:
                layers = oci.manifest_layers(stored.body)
            except ValueError:
                continue
            blob = self._artifacts.blob(str(layers[0]["digest"])) if layers else None
            if blob is not None:
                found.append(blob)
        return found

    def _check_provenance(self, digest: str, listing: Sequence[dict[str, Any]]) -> int:
        for envelope in self._referrer_contents(listing, IN_TOTO):
            statement = self._open_envelope(envelope, digest, SLSA_PROVENANCE)
            if statement is None:
                continue
            try:
                from google.protobuf import json_format
                from in_toto_attestation.predicates.provenance.v1 import provenance_pb2

                parsed = json_format.ParseDict(statement["predicate"], provenance_pb2.Provenance())
            except (json_format.ParseError, KeyError, TypeError):
                continue
            return len(parsed.build_definition.resolved_dependencies)
        raise VerificationError(f"{digest}: no provenance signed by {self.fingerprint}")

    def _check_sbom(self, digest: str, listing: Sequence[dict[str, Any]]) -> int:
        signed = self._signed_predicates(digest, CYCLONEDX_PREDICATE)
        for blob in self._referrer_contents(listing, CYCLONEDX):
            try:
                document = oci.parse_object(blob, "SBOM")
            except ValueError:
                continue
            if document not in signed:
                continue  # an SBOM the key never vouched for
            from cyclonedx.model.bom import Bom

            try:
                bom = Bom.from_json(document)  # type: ignore[attr-defined]
            except Exception as error:  # noqa: BLE001 - the library raises many kinds
                log.debug("SBOM of %s does not parse: %s", digest, type(error).__name__)
                continue
            component = bom.metadata.component
            if component is not None and str(component.bom_ref) == digest:
                return len(bom.components)
        raise VerificationError(f"{digest}: no SBOM attested by {self.fingerprint}")

    def _signed_predicates(self, digest: str, predicate_type: str) -> list[Any]:
        """Predicates of ``predicate_type`` in ``.att`` whose envelope the key signed."""
        found = []
        for layer in read_layers(self._artifacts, oci.attestation_tag(digest)):
            annotations = layer.get("annotations") or {}
            if annotations.get(PREDICATE_ANNOTATION) != predicate_type:
                continue
            envelope = self._artifacts.blob(str(layer["digest"]))
            statement = (
                None if envelope is None else self._open_envelope(envelope, digest, predicate_type)
            )
            if statement is not None:
                found.append(statement.get("predicate"))
        return found

    def _open_envelope(
        self, envelope: bytes, digest: str, predicate_type: str
    ) -> dict[str, Any] | None:
        """The statement in a DSSE envelope the key signed, about ``digest``; else None."""
        try:
            payload_type, payload, signatures = oci.parse_dsse(envelope)
            statement = oci.parse_object(payload, "statement")
        except ValueError:
            return None
        if payload_type != IN_TOTO or statement.get("predicateType") != predicate_type:
            return None
        signed = oci.pae(payload_type, payload)
        if not any(self._public.verify(sig, signed) for sig in signatures[:MAX_LAYERS]):
            return None
        subjects = statement.get("subject")
        hexes = (
            {s.get("digest", {}).get("sha256") for s in subjects if isinstance(s, dict)}
            if isinstance(subjects, list)
            else set()
        )
        return statement if digest.removeprefix("sha256:") in hexes else None
