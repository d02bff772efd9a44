"""The wire formats: cosign's simple signing payload and tag names, DSSE's PAE (the spec's
own test vector), the referrers tag index, and the attestor on the in-memory registry with
and without the referrers API (what it pushes, and that tampering is caught)."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from releasebot.domain.shared.errors import SigningError, VerificationError
from releasebot.domain.shared.versions import Arch
from releasebot.domain.targets.attestation import ArchBuild, AttestationRequest
from releasebot.registry.memory_artifacts import MemoryArtifacts
from releasebot.signing import CYCLONEDX
from releasebot.signing import formats as oci
from releasebot.signing.attestor import RegistryAttestor
from releasebot.signing.documents import Builder
from releasebot.signing.keyfiles import KeyPair
from releasebot.signing.keys import generate_key
from tests.support.targets import make_target

DIGEST = "sha256:" + "ab" * 32


def test_simple_signing_payload_is_cosigns_bytes() -> None:
    payload = oci.simple_signing_payload("registry.example.com/nvidia/driver", DIGEST)
    assert payload == (
        b'{"critical":{"identity":{"docker-reference":"registry.example.com/nvidia/driver"},'
        b'"image":{"docker-manifest-digest":"' + DIGEST.encode() + b'"},'
        b'"type":"cosign container image signature"},"optional":null}'
    )
    assert oci.parse_simple_signing(payload) == ("registry.example.com/nvidia/driver", DIGEST)


@pytest.mark.parametrize(
    "payload", [b"", b"[]", b'{"critical":{}}', b'{"critical":{"type":"other","identity":{}}}']
)
def test_foreign_payloads_are_refused(payload: bytes) -> None:
    with pytest.raises(ValueError, match=r"signing|signature"):
        oci.parse_simple_signing(payload)


def test_tag_names_follow_cosign_and_the_referrers_tag_schema() -> None:
    assert oci.signature_tag(DIGEST) == "sha256-" + "ab" * 32 + ".sig"
    assert oci.attestation_tag(DIGEST) == "sha256-" + "ab" * 32 + ".att"
    assert oci.referrers_tag(DIGEST) == "sha256-" + "ab" * 32
    with pytest.raises(ValueError, match="sha256"):
        oci.signature_tag("sha512:00")


def test_pae_matches_the_dsse_specification_vector() -> None:
    assert oci.pae("http://example.com/HelloWorld", b"hello world") == (
        b"DSSEv1 29 http://example.com/HelloWorld 11 hello world"
    )
    envelope = oci.dsse_envelope("t", b"body", b"sig")
    assert oci.parse_dsse(envelope) == ("t", b"body", [b"sig"])


def test_referrers_index_keeps_foreign_entries_and_each_digest_once() -> None:
    foreign = {"mediaType": oci.OCI_MANIFEST, "digest": "sha256:" + "1" * 64, "size": 3}
    ours = {"mediaType": oci.OCI_MANIFEST, "digest": "sha256:" + "2" * 64, "size": 4}
    first = oci.merge_referrers(oci.merge_referrers(None, [foreign]), [ours])
    again = oci.merge_referrers(first, [ours])
    assert oci.index_manifests(again) == [foreign, ours]


def _request(artifacts: MemoryArtifacts) -> AttestationRequest:
    digest = artifacts.add_image("t", labels={"a": "b"})
    when = datetime(2026, 11, 30, tzinfo=UTC)
    build = ArchBuild(Arch.AMD64, digest, "rb-job", (("DRIVER_VERSION", "580.1.2"),), when, when)
    target = make_target("t", driver="580.1.2", kernel="6.12.1")
    return AttestationRequest(artifacts.repository, target, digest, (build,))


@pytest.mark.parametrize("api", [False, True], ids=["tag-fallback", "referrers-api"])
def test_attestor_on_memory_attaches_and_verifies(api: bool) -> None:
    artifacts = MemoryArtifacts(referrers_api=api)
    key = generate_key()
    signer = RegistryAttestor(
        artifacts, keys=lambda: KeyPair.of(key), builder=Builder("0.1.0", "k/kaniko:v1")
    )
    request = _request(artifacts)
    attached = signer.attest(request)
    assert attached.referrers_api is api
    assert (artifacts.manifest(oci.referrers_tag(request.digest)) is None) is api
    verified = signer.verify("t")
    assert verified.signed == (request.digest,)
    assert verified.fingerprint == key.public.fingerprint


def test_an_sbom_swapped_by_someone_else_is_caught() -> None:
    artifacts = MemoryArtifacts()
    key = generate_key()
    signer = RegistryAttestor(
        artifacts, keys=lambda: KeyPair.of(key), builder=Builder("0.1.0", "k/kaniko:v1")
    )
    request = _request(artifacts)
    signer.attest(request)
    tag = oci.referrers_tag(request.digest)
    listing = artifacts.manifest(tag)
    assert listing is not None
    entries = oci.index_manifests(listing.body)
    sbom_entry = next(e for e in entries if e["artifactType"] == CYCLONEDX)
    sbom_manifest = artifacts.manifest(sbom_entry["digest"])
    assert sbom_manifest is not None
    document = json.loads(
        artifacts.blob(oci.manifest_layers(sbom_manifest.body)[0]["digest"]) or b""
    )
    document["components"] = []  # hides what the image holds; hashes stay consistent
    forged = oci.canonical(document)
    artifacts.push_blob(forged)
    subject = json.loads(sbom_manifest.body)["subject"]
    body = oci.image_manifest(
        oci.empty_config(), [oci.descriptor(CYCLONEDX, forged)], subject=subject,
        artifact_type=CYCLONEDX,
    )  # fmt: skip
    artifacts.push_manifest(oci.sha256_digest(body), oci.OCI_MANIFEST, body)
    others = [e for e in entries if e["artifactType"] != CYCLONEDX]
    forged_entry = oci.descriptor(oci.OCI_MANIFEST, body, artifactType=CYCLONEDX)
    artifacts.push_manifest(tag, oci.OCI_INDEX, oci.merge_referrers(None, [*others, forged_entry]))

    with pytest.raises(VerificationError, match="no SBOM attested"):
        signer.verify("t")


def test_a_key_that_does_not_match_the_public_key_signs_nothing() -> None:
    artifacts = MemoryArtifacts()
    key, other = generate_key(), generate_key()
    signer = RegistryAttestor(
        artifacts,
        keys=lambda: KeyPair(other, key.public),
        builder=Builder("0.1.0", "k/kaniko:v1"),
    )
    request = _request(artifacts)
    with pytest.raises(SigningError, match="does not belong"):
        signer.attest(request)
    assert artifacts.manifest(oci.signature_tag(request.digest)) is None


@pytest.mark.parametrize(
    "digest",
    ["../../other/repo/manifests/x", "sha256:" + "a" * 64 + "?x=1", "sha256:" + "A" * 64, ""],
)
def test_descriptors_naming_no_digest_are_left_out_of_indexes_and_layers(digest: str) -> None:
    good = {"mediaType": "m", "digest": "sha256:" + "b" * 64, "size": 1}
    bad = {"mediaType": "m", "digest": digest, "size": 1}
    index = json.dumps({"manifests": [bad, good]}).encode()
    manifest = json.dumps({"layers": [good, bad]}).encode()
    assert oci.index_manifests(index) == [good]
    assert oci.manifest_layers(manifest) == [good]
