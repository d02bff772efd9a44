"""Signatures, SBOM and provenance on a REAL registry, checked by an independent verifier.

Real: Debian's docker-registry (distribution 2.8, no referrers API: the tag fallback), the
``OrasArtifacts`` adapter over HTTP, and Debian 13's skopeo with a ``sigstoreSigned``
policy on the public key and ``use-sigstore-attachments: true``
(``tests/support/sigstore.py``). The referrers-API path runs against the same registry
behind ``tests/support/referrersproxy.py``, a proxy over real HTTP that adds the OCI 1.1
referrers API (2.8 has none).

Covers: skopeo accepts a signed image by tag and by digest and refuses it once someone
re-pushes the tag; the SBOM and provenance are listed (referrers tag, or the referrers
API) and parse with cyclonedx-python-lib and in-toto-attestation; ``releasebot verify``
says ok (exit 0) and fails (exit 1, one line) after the signature is tampered with, or
with another key; a multi-arch index and each per-arch image are signed and verify.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from cyclonedx.model.bom import Bom
from google.protobuf import json_format
from in_toto_attestation.predicates.provenance.v1 import provenance_pb2
from in_toto_attestation.v1 import statement_pb2

from releasebot.cli import main
from releasebot.domain.shared.errors import VerificationError
from releasebot.domain.shared.versions import Arch
from releasebot.domain.targets.attestation import ArchBuild, AttestationRequest, Material
from releasebot.domain.targets.models import Target
from releasebot.registry.artifacts import OrasArtifacts
from releasebot.registry.oras import OrasRegistry
from releasebot.signing import CYCLONEDX, IN_TOTO, SIGNATURE_ANNOTATION
from releasebot.signing import formats as oci
from releasebot.signing.attestor import RegistryAttestor
from releasebot.signing.documents import Builder
from releasebot.signing.keyfiles import KeyPair
from releasebot.signing.keys import SigningKey, encrypt_key, generate_key
from tests.support.referrersproxy import run_referrers_proxy
from tests.support.registryserver import RunningRegistry
from tests.support.sigstore import Skopeo, find_skopeo
from tests.support.targets import make_target

TAG = "580.178.04-flatcar4593.2.5"
STARTED = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
MATERIALS = (
    Material(
        "https://stable.release.flatcar-linux.net/amd64-usr/4593.2.5/flatcar-container.tar.gz",
        (("sha512", "ab" * 64),),
    ),
    Material(
        "https://us.download.nvidia.com/tesla/580.178.04/NVIDIA-Linux-x86_64-580.178.04.run", ()
    ),
)


class FixedMaterials:
    def materials(self, target: Target, arch: Arch) -> tuple[Material, ...]:
        return MATERIALS


@pytest.fixture
def key() -> SigningKey:
    return generate_key()


@pytest.fixture
def skopeo(tmp_path: Path) -> Skopeo:
    work = tmp_path / "skopeo"
    work.mkdir()
    return find_skopeo(work)


@pytest.fixture
def artifacts(plain_registry: RunningRegistry, registry_name: str) -> Iterator[OrasArtifacts]:
    registry = OrasRegistry(plain_registry.repository(registry_name), insecure=True, retries=0)
    yield OrasArtifacts(registry)
    registry.close()


def attestor(artifacts: OrasArtifacts, key: SigningKey) -> RegistryAttestor:
    return RegistryAttestor(
        artifacts,
        keys=lambda: KeyPair.of(key),
        builder=Builder("0.1.0", "ghcr.io/osscontainertools/kaniko:v1.28.0@sha256:" + "1" * 64),
        materials=FixedMaterials(),
    )


def request_for(repository: str, digest: str, arches: dict[Arch, str]) -> AttestationRequest:
    return AttestationRequest(
        repository=repository,
        target=make_target(TAG, arches=tuple(arches)),
        digest=digest,
        builds=tuple(
            ArchBuild(
                arch,
                arch_digest,
                f"rb-job-{arch.value}",
                (("DRIVER_VERSION", "580.178.04"), ("RECIPE_REVISION", "r1")),
                STARTED,
                STARTED + timedelta(minutes=20),
            )
            for arch, arch_digest in arches.items()
        ),
    )


def push_signed(
    registry: RunningRegistry, name: str, artifacts: OrasArtifacts, key: SigningKey
) -> str:
    digest = registry.push_image(name, TAG, labels={"releasebot.driver-version": "580.178.04"})
    attestor(artifacts, key).attest(request_for(artifacts.repository, digest, {Arch.AMD64: digest}))
    return digest


def test_skopeo_accepts_the_signed_image_and_refuses_it_once_repushed(
    plain_registry: RunningRegistry,
    registry_name: str,
    artifacts: OrasArtifacts,
    key: SigningKey,
    skopeo: Skopeo,
) -> None:
    repository = artifacts.repository
    unsigned = skopeo.copy(f"{repository}:{TAG}", key.public.pem, repository=repository)
    assert unsigned.returncode != 0  # nothing there yet: the policy cannot be met

    digest = push_signed(plain_registry, registry_name, artifacts, key)

    by_tag = skopeo.copy(f"{repository}:{TAG}", key.public.pem, repository=repository)
    assert by_tag.returncode == 0, by_tag.stderr
    by_digest = skopeo.copy(f"{repository}@{digest}", key.public.pem, repository=repository)
    assert by_digest.returncode == 0, by_digest.stderr
    other = generate_key().public.pem
    foreign = skopeo.copy(f"{repository}:{TAG}", other, repository=repository)
    assert foreign.returncode != 0
    assert "signature" in foreign.stderr.lower()

    # Someone else pushes another image under the tag: its digest has no signature.
    plain_registry.push_image(registry_name, TAG, labels={"releasebot.driver-version": "evil"})
    repushed = skopeo.copy(f"{repository}:{TAG}", key.public.pem, repository=repository)
    assert repushed.returncode != 0
    assert "signature" in repushed.stderr.lower()


def test_sbom_and_provenance_are_listed_by_the_referrers_tag_and_parse(
    plain_registry: RunningRegistry, registry_name: str, artifacts: OrasArtifacts, key: SigningKey
) -> None:
    digest = push_signed(plain_registry, registry_name, artifacts, key)
    assert artifacts.referrers(digest) is None  # distribution 2.8: no referrers API
    listing = artifacts.manifest(oci.referrers_tag(digest))
    assert listing is not None
    entries = {entry["artifactType"]: entry for entry in oci.index_manifests(listing.body)}
    assert set(entries) == {CYCLONEDX, IN_TOTO}
    sbom, envelope = (
        _first_layer(artifacts, entries[kind]["digest"]) for kind in (CYCLONEDX, IN_TOTO)
    )

    bom = Bom.from_json(json.loads(sbom))  # type: ignore[attr-defined]
    assert str(bom.metadata.component.bom_ref) == digest
    names = {component.name for component in bom.components}
    assert {"nvidia-datacenter-driver", "flatcar-container-linux", "linux-kernel"} <= names

    payload_type, payload, _ = oci.parse_dsse(envelope)
    assert payload_type == IN_TOTO
    statement = json_format.Parse(payload, statement_pb2.Statement())
    assert statement.subject[0].digest["sha256"] == digest.removeprefix("sha256:")
    provenance = json_format.ParseDict(
        json_format.MessageToDict(statement.predicate), provenance_pb2.Provenance()
    )
    uris = [dep.uri for dep in provenance.build_definition.resolved_dependencies]
    assert uris == sorted(m.uri for m in MATERIALS)
    assert provenance.run_details.builder.version["releasebot"] == "0.1.0"

    verification = attestor(artifacts, key).verify(TAG)
    assert verification.materials == len(MATERIALS)


def test_referrers_api_lists_sbom_provenance_and_the_signature(
    plain_registry: RunningRegistry, registry_name: str, key: SigningKey
) -> None:
    with run_referrers_proxy(plain_registry.base_url) as proxy:
        registry = OrasRegistry(proxy.repository(registry_name), insecure=True, retries=0)
        artifacts = OrasArtifacts(registry)
        digest = plain_registry.push_image(registry_name, TAG)
        attested = attestor(artifacts, key).attest(
            request_for(artifacts.repository, digest, {Arch.AMD64: digest})
        )
        assert attested.referrers_api
        listed = artifacts.referrers(digest)
        assert listed is not None
        kinds = sorted(entry["artifactType"] for entry in oci.index_manifests(listed))
        assert kinds == sorted(
            [CYCLONEDX, IN_TOTO, "application/vnd.dev.cosign.artifact.sig.v1+json"]
        )
        assert artifacts.manifest(oci.referrers_tag(digest)) is None  # no fallback needed
        assert attestor(artifacts, key).verify(TAG).signed == (digest,)
        assert proxy.referrers[digest]  # the proxy, not a fallback, answered
        registry.close()


def test_multi_arch_index_and_every_arch_are_signed_and_verify(
    plain_registry: RunningRegistry,
    registry_name: str,
    artifacts: OrasArtifacts,
    key: SigningKey,
    skopeo: Skopeo,
) -> None:
    amd64 = plain_registry.push_image(registry_name, f"{TAG}-amd64", arch="amd64")
    arm64 = plain_registry.push_image(registry_name, f"{TAG}-arm64", arch="arm64")
    registry = OrasRegistry(artifacts.repository, insecure=True, retries=0)
    index = registry.push_index(TAG, [(Arch.AMD64, amd64), (Arch.ARM64, arm64)])
    registry.close()
    signer = attestor(artifacts, key)
    signer.attest(request_for(artifacts.repository, index, {Arch.AMD64: amd64, Arch.ARM64: arm64}))

    verification = signer.verify(TAG)
    assert verification.signed == (index, amd64, arm64)
    repository = artifacts.repository
    whole = skopeo.copy(
        f"{repository}:{TAG}", key.public.pem, repository=repository, all_images=True
    )
    assert whole.returncode == 0, whole.stderr
    for digest in (amd64, arm64):
        one = skopeo.copy(f"{repository}@{digest}", key.public.pem, repository=repository)
        assert one.returncode == 0, one.stderr


def test_attesting_twice_changes_nothing(
    plain_registry: RunningRegistry, registry_name: str, artifacts: OrasArtifacts, key: SigningKey
) -> None:
    digest = push_signed(plain_registry, registry_name, artifacts, key)
    before = {
        tag: artifacts.manifest(tag)
        for tag in (
            oci.signature_tag(digest),
            oci.attestation_tag(digest),
            oci.referrers_tag(digest),
        )
    }
    attestor(artifacts, key).attest(request_for(artifacts.repository, digest, {Arch.AMD64: digest}))
    after = {tag: artifacts.manifest(tag) for tag in before}
    assert after == before
    signatures = before[oci.signature_tag(digest)]
    assert signatures is not None
    assert len(oci.manifest_layers(signatures.body)) == 1


@pytest.fixture
def verify_config(tmp_path: Path, artifacts: OrasArtifacts, key: SigningKey) -> Path:
    (tmp_path / "cosign.pub").write_bytes(key.public.pem)
    config = tmp_path / "releasebot.toml"
    config.write_text(
        f'[registry]\nrepository = "{artifacts.repository}"\ninsecure = true\nretries = 0\n'
        f'[signing]\npublic_key_file = "{tmp_path / "cosign.pub"}"\n'
    )
    return config


def test_releasebot_verify_passes_then_fails_on_a_tampered_signature(
    plain_registry: RunningRegistry,
    registry_name: str,
    artifacts: OrasArtifacts,
    key: SigningKey,
    verify_config: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    digest = push_signed(plain_registry, registry_name, artifacts, key)
    assert main(["verify", TAG, "--config", str(verify_config)]) == 0
    out = capsys.readouterr().out
    assert out.count("\n") == 1
    assert out.startswith(f"verified {artifacts.repository}:{TAG}@{digest}: signed by ")
    assert key.public.fingerprint in out

    # Flip one bit of the signature in the .sig manifest and push it back.
    tag = oci.signature_tag(digest)
    stored = artifacts.manifest(tag)
    assert stored is not None
    document = json.loads(stored.body)
    annotations = document["layers"][0]["annotations"]
    raw = bytearray(base64.b64decode(annotations[SIGNATURE_ANNOTATION]))
    raw[-1] ^= 1
    annotations[SIGNATURE_ANNOTATION] = base64.b64encode(bytes(raw)).decode()
    artifacts.push_manifest(tag, oci.OCI_MANIFEST, json.dumps(document).encode())

    assert main(["verify", TAG, "--config", str(verify_config)]) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.count("\n") == 1
    assert captured.err.startswith(f"releasebot: NOT verified {artifacts.repository}:{TAG}: ")
    assert "no valid signature" in captured.err
    with pytest.raises(VerificationError):
        attestor(artifacts, key).verify(TAG)


def test_verify_with_the_private_key_file_and_another_key_fails(
    plain_registry: RunningRegistry,
    registry_name: str,
    artifacts: OrasArtifacts,
    key: SigningKey,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    push_signed(plain_registry, registry_name, artifacts, key)
    other = tmp_path / "other.key"
    other.write_bytes(encrypt_key(generate_key(), b"pw"))
    (tmp_path / "password").write_text("pw\n")
    config = tmp_path / "other.toml"
    config.write_text(
        f'[registry]\nrepository = "{artifacts.repository}"\ninsecure = true\n'
        f'[signing]\nkey_file = "{other}"\npassword_file = "{tmp_path / "password"}"\n'
    )
    assert main(["verify", TAG, "--config", str(config)]) == 1
    assert "no valid signature by sha256:" in capsys.readouterr().err


def test_verify_of_a_missing_tag_fails_in_one_line(
    verify_config: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["verify", "absent", "--config", str(verify_config)]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "no such tag" in err


def _first_layer(artifacts: OrasArtifacts, digest: str) -> bytes:
    stored = artifacts.manifest(digest)
    assert stored is not None
    layer = oci.manifest_layers(stored.body)[0]
    blob = artifacts.blob(str(layer["digest"]))
    assert blob is not None
    return blob
