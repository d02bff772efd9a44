"""Signing: cosign-format signatures, a CycloneDX SBOM and in-toto/SLSA provenance.

Why it exists: clusters that admit only signed images (Kyverno, the Sigstore policy
controller, Ratify, CRI-O/Podman through containers/image) check what cosign writes. This
package writes the same formats itself, from the facts releasebot already has:

- ``keys``: the key pair (cosign's encrypted PEM: scrypt + NaCl secretbox over PKCS #8;
  or a plain PKCS #8 / SEC 1 PEM), ECDSA P-256 with SHA-256, the key's fingerprint;
- ``formats``: the "simple signing" payload, DSSE envelopes, and the OCI manifests that
  carry them (cosign's ``sha256-<hex>.sig`` / ``.att`` tags, OCI 1.1 referrers and the
  referrers tag ``sha256-<hex>`` for registries without the referrers API);
- ``documents``: the SBOM (cyclonedx-python-lib) and the provenance statement
  (in-toto-attestation, SLSA provenance v1);
- ``attestor``: ``RegistryAttestor``, the ``Attestor`` port over an ``ArtifactRegistry``.

Deliberately not here: keyless signing (Fulcio certificates, Rekor entries). It needs a
Sigstore instance the cluster can reach and is not offered; signatures made here carry no
transparency-log bundle, so verifiers must be told to skip the log (``--insecure-ignore-tlog``
for cosign, ``rekor.ignoreTlog`` / ``ctlog`` settings in policies; see docs/operations.md).
"""

from __future__ import annotations

SIMPLE_SIGNING = "application/vnd.dev.cosign.simplesigning.v1+json"
"""Media type of a cosign signature layer: the payload the signature is over."""
SIGNATURE_ANNOTATION = "dev.cosignproject.cosign/signature"
"""Layer annotation holding the base64 ASN.1 DER ECDSA signature of the payload."""
SIGNATURE_TYPE = "cosign container image signature"
COSIGN_SIGNATURE_ARTIFACT = "application/vnd.dev.cosign.artifact.sig.v1+json"
"""``artifactType`` of a cosign signature pushed as an OCI 1.1 referrer."""
DSSE_ENVELOPE = "application/vnd.dsse.envelope.v1+json"
IN_TOTO = "application/vnd.in-toto+json"
"""DSSE ``payloadType`` of an in-toto statement; ``artifactType`` of its referrer."""
PREDICATE_ANNOTATION = "predicateType"
"""cosign's layer annotation naming an attestation's predicate type."""
REFERRER_PREDICATE_ANNOTATION = "in-toto.io/predicate-type"
CYCLONEDX = "application/vnd.cyclonedx+json"
SLSA_PROVENANCE = "https://slsa.dev/provenance/v1"
CYCLONEDX_PREDICATE = "https://cyclonedx.org/bom"
OCI_EMPTY = "application/vnd.oci.empty.v1+json"
EMPTY_JSON = b"{}"
