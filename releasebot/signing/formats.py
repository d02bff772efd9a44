"""The wire formats of signatures and attestations, as cosign and OCI 1.1 define them. Pure.

- The "simple signing" payload cosign signs for an image: ``critical.identity.
  docker-reference`` (the repository, no tag, as cosign writes it), ``critical.image.
  docker-manifest-digest`` and ``critical.type``; the signature is over these exact bytes.
- cosign's tag scheme: the signatures of ``sha256:<hex>`` live in the image manifest tagged
  ``sha256-<hex>.sig``, one layer per signature (media type ``…simplesigning.v1+json``, the
  payload as the blob, the signature in the ``dev.cosignproject.cosign/signature``
  annotation); attestations in ``sha256-<hex>.att``, one DSSE envelope per layer.
- DSSE: ``PAE(type, body) = "DSSEv1" SP len(type) SP type SP len(body) SP body``, the
  signature is over the PAE; the envelope carries the body base64-encoded.
- OCI 1.1 referrers: a manifest with ``subject`` and ``artifactType``. Registries without the
  referrers API get the referrers tag ``sha256-<hex>``: an image index the client keeps,
  listing each referrer's descriptor (distribution spec, "referrers tag schema").

Every document is rendered with sorted keys and no spaces, so the same facts give the same
bytes and the same digest. Parsers take hostile bytes and raise ``ValueError`` with a short
reason. No I/O, no keys.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
from collections.abc import Mapping, Sequence
from typing import Any

from releasebot.domain.shared.references import is_digest, is_sha256_digest
from releasebot.edge.json import JsonRefusedError, decode_json
from releasebot.edge.text import one_line
from releasebot.signing import (
    COSIGN_SIGNATURE_ARTIFACT,
    DSSE_ENVELOPE,
    EMPTY_JSON,
    OCI_EMPTY,
    PREDICATE_ANNOTATION,
    SIGNATURE_ANNOTATION,
    SIGNATURE_TYPE,
    SIMPLE_SIGNING,
)

OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
OCI_INDEX = "application/vnd.oci.image.index.v1+json"
OCI_CONFIG = "application/vnd.oci.image.config.v1+json"
_ZERO_TIME = "0001-01-01T00:00:00Z"

Document = dict[str, Any]


def sha256_digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def canonical(document: Mapping[str, Any]) -> bytes:
    return json.dumps(document, sort_keys=True, separators=(",", ":")).encode()


def _hex(digest: str) -> str:
    if not is_sha256_digest(digest):
        raise ValueError(f"not a sha256 digest: {one_line(digest, 80)!r}")
    return digest.removeprefix("sha256:")


def signature_tag(digest: str) -> str:
    return f"sha256-{_hex(digest)}.sig"


def attestation_tag(digest: str) -> str:
    return f"sha256-{_hex(digest)}.att"


def referrers_tag(digest: str) -> str:
    return f"sha256-{_hex(digest)}"


def descriptor(media_type: str, body: bytes, **extra: Any) -> Document:
    return {"mediaType": media_type, "digest": sha256_digest(body), "size": len(body), **extra}


# -- the simple signing payload --------------------------------------------------------


def simple_signing_payload(repository: str, digest: str) -> bytes:
    """The bytes cosign signs for image ``repository@digest`` (its key order, as Go writes)."""
    _hex(digest)
    critical = {
        "identity": {"docker-reference": repository},
        "image": {"docker-manifest-digest": digest},
        "type": SIGNATURE_TYPE,
    }
    return json.dumps({"critical": critical, "optional": None}, separators=(",", ":")).encode()


def parse_simple_signing(payload: bytes) -> tuple[str, str]:
    """``(docker-reference, docker-manifest-digest)`` of a payload; ``ValueError`` if it is
    not a cosign container image signature payload."""
    try:
        critical = decode_json(payload)["critical"]  # type: ignore[index]
        kind = critical["type"]
        reference = critical["identity"]["docker-reference"]
        digest = critical["image"]["docker-manifest-digest"]
    except (JsonRefusedError, ValueError, KeyError, TypeError) as error:
        raise ValueError("not a simple signing payload") from error
    if kind != SIGNATURE_TYPE or not isinstance(reference, str) or not isinstance(digest, str):
        raise ValueError("not a cosign container image signature")
    return reference, digest


# -- manifests that carry signatures and attestations ---------------------------------


def signature_layer(payload: bytes, signature: bytes) -> Document:
    annotations = {SIGNATURE_ANNOTATION: base64.b64encode(signature).decode("ascii")}
    return descriptor(SIMPLE_SIGNING, payload, annotations=annotations)


def attestation_layer(envelope: bytes, predicate_type: str) -> Document:
    # cosign writes an empty signature annotation on attestation layers: the signature is
    # inside the envelope. Verifiers look the layer up by its predicateType annotation.
    annotations = {SIGNATURE_ANNOTATION: "", PREDICATE_ANNOTATION: predicate_type}
    return descriptor(DSSE_ENVELOPE, envelope, annotations=annotations)


def layers_config(layers: Sequence[Mapping[str, Any]]) -> bytes:
    """The image config cosign gives its signature and attestation images."""
    return canonical(
        {
            "architecture": "",
            "config": {},
            "created": _ZERO_TIME,
            "history": [{"created": _ZERO_TIME}],
            "os": "",
            "rootfs": {"diff_ids": [layer["digest"] for layer in layers], "type": "layers"},
        }
    )


def image_manifest(
    config: Mapping[str, Any],
    layers: Sequence[Mapping[str, Any]],
    *,
    subject: Mapping[str, Any] | None = None,
    artifact_type: str | None = None,
    annotations: Mapping[str, str] | None = None,
) -> bytes:
    document: Document = {
        "schemaVersion": 2,
        "mediaType": OCI_MANIFEST,
        "config": dict(config),
        "layers": [dict(layer) for layer in layers],
    }
    if artifact_type:
        document["artifactType"] = artifact_type
    if subject is not None:
        document["subject"] = dict(subject)
    if annotations:
        document["annotations"] = dict(annotations)
    return canonical(document)


def empty_config() -> Document:
    return descriptor(OCI_EMPTY, EMPTY_JSON)


def signature_referrer(subject: Mapping[str, Any], layers: Sequence[Mapping[str, Any]]) -> bytes:
    """cosign's OCI 1.1 form of a signature: the same layers, with ``subject``."""
    return image_manifest(
        empty_config(), layers, subject=subject, artifact_type=COSIGN_SIGNATURE_ARTIFACT
    )


def manifest_layers(body: bytes) -> list[Document]:
    """The layer descriptors of an image manifest; ``ValueError`` if it is none. A layer
    whose digest is outside the OCI grammar is left out: it would become a blob URL."""
    document = parse_object(body, "manifest")
    layers = document.get("layers")
    if not isinstance(layers, list) or not all(_is_descriptor(layer) for layer in layers):
        raise ValueError("manifest has no valid layers")
    return [layer for layer in layers if is_digest(layer["digest"])]


def index_manifests(body: bytes) -> list[Document]:
    """The descriptors an image index lists; ``ValueError`` if it is none. An entry whose
    digest is outside the OCI grammar (``../x``, ``x?y``) is left out: a referrers answer or
    index is the registry's text, and each digest becomes a manifest URL."""
    document = parse_object(body, "index")
    manifests = document.get("manifests")
    if not isinstance(manifests, list) or not all(_is_descriptor(item) for item in manifests):
        raise ValueError("index has no valid manifests list")
    return [item for item in manifests if is_digest(item["digest"])]


def merge_referrers(existing: bytes | None, added: Sequence[Mapping[str, Any]]) -> bytes:
    """The referrers tag's index with ``added`` in it (an entry of the same digest is kept
    once; the others, possibly from other tools, stay)."""
    manifests = index_manifests(existing) if existing is not None else []
    digests = {str(item["digest"]) for item in added}
    kept = [item for item in manifests if item["digest"] not in digests]
    return canonical(
        {
            "schemaVersion": 2,
            "mediaType": OCI_INDEX,
            "manifests": kept + [dict(item) for item in added],
        }
    )


# -- DSSE --------------------------------------------------------------------------------


def pae(payload_type: str, payload: bytes) -> bytes:
    kind = payload_type.encode()
    return b"DSSEv1 %d %b %d %b" % (len(kind), kind, len(payload), payload)


def dsse_envelope(payload_type: str, payload: bytes, signature: bytes) -> bytes:
    return canonical(
        {
            "payload": base64.b64encode(payload).decode("ascii"),
            "payloadType": payload_type,
            "signatures": [{"keyid": "", "sig": base64.b64encode(signature).decode("ascii")}],
        }
    )


def parse_dsse(envelope: bytes) -> tuple[str, bytes, list[bytes]]:
    """``(payloadType, payload, signatures)`` of an envelope; ``ValueError`` if malformed."""
    document = parse_object(envelope, "DSSE envelope")
    try:
        payload_type = document["payloadType"]
        payload = base64.b64decode(document["payload"], validate=True)
        signatures = [base64.b64decode(s["sig"], validate=True) for s in document["signatures"]]
    except (KeyError, TypeError, binascii.Error) as error:
        raise ValueError("malformed DSSE envelope") from error
    if not isinstance(payload_type, str) or not signatures:
        raise ValueError("DSSE envelope without a payload type or a signature")
    return payload_type, payload, signatures


def parse_object(body: bytes, what: str) -> Document:
    try:
        document = decode_json(body)  # what the registry holds is anybody's: bounded
    except JsonRefusedError as error:
        raise ValueError(f"{what} is not JSON: {error.problem}") from error
    if not isinstance(document, dict):
        raise ValueError(f"{what} is not a JSON object")
    return document


def _is_descriptor(value: object) -> bool:
    return (
        isinstance(value, dict)
        and isinstance(value.get("mediaType"), str)
        and isinstance(value.get("digest"), str)
        and isinstance(value.get("size"), int)
    )
