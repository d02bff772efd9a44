"""cosign 2.5 accepts every shape of signature releasebot attaches, in the real registry.

The key pair is made by cosign (``generate-key-pair``) and read by releasebot's
``KeyFiles``; releasebot's ``RegistryAttestor`` signs over the real registry on loopback;
cosign then checks (keyed, no transparency log):

- a single-arch image by tag and by digest: ``cosign verify`` (the ``sha256-<hex>.sig``
  tag), ``verify-attestation --type cyclonedx`` and ``--type slsaprovenance1``;
- a multi-arch index and each of its arches by digest;
- on a registry with the OCI 1.1 referrers API (the referrers proxy over the same real
  registry), ``cosign verify --experimental-oci11`` with the ``.sig`` tag deleted, so the
  signature referrer releasebot pushes there is what cosign reads;
- and refuses all of it with another key, so the checks can fail.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from releasebot.domain.shared.versions import Arch
from releasebot.registry.artifacts import OrasArtifacts
from releasebot.registry.oras import OrasRegistry
from releasebot.signing import formats as oci
from releasebot.signing.attestor import RegistryAttestor
from releasebot.signing.documents import Builder
from releasebot.signing.keyfiles import KeyFiles
from tests.integration.test_signing_registry import TAG, FixedMaterials, request_for
from tests.support.cosign import Cosign, find_cosign
from tests.support.referrersproxy import run_referrers_proxy
from tests.support.registryserver import RunningRegistry

PASSWORD = "cosign-made pair"


@pytest.fixture
def cosign(tmp_path: Path) -> Cosign:
    return find_cosign(tmp_path / "cosign-work")


@pytest.fixture
def pair(cosign: Cosign, tmp_path: Path) -> tuple[KeyFiles, Path]:
    key, public = cosign.generate_key_pair(tmp_path / "keys", PASSWORD)
    (tmp_path / "keys" / "cosign.password").write_text(PASSWORD)
    files = KeyFiles(
        str(key),
        password_path=str(tmp_path / "keys" / "cosign.password"),
        public_path=str(public),
    )
    return files, public


@pytest.fixture
def other_public(cosign: Cosign, tmp_path: Path) -> Path:
    return cosign.generate_key_pair(tmp_path / "other", "another pair")[1]


def make_attestor(artifacts: OrasArtifacts, files: KeyFiles) -> RegistryAttestor:
    return RegistryAttestor(
        artifacts,
        keys=files.load,
        builder=Builder("0.1.0", "ghcr.io/osscontainertools/kaniko:v1.28.0@sha256:" + "1" * 64),
        materials=FixedMaterials(),
    )


@pytest.fixture
def artifacts(plain_registry: RunningRegistry, registry_name: str) -> Iterator[OrasArtifacts]:
    registry = OrasRegistry(plain_registry.repository(registry_name), insecure=True, retries=0)
    yield OrasArtifacts(registry)
    registry.close()


def refusals(cosign: Cosign, reference: str, public: Path, *, attestations: bool) -> list[str]:
    """What cosign refused (empty: everything verified)."""
    checks = {"verify": cosign.verify(reference, public)}
    if attestations:
        checks["cyclonedx"] = cosign.verify_attestation(reference, public, "cyclonedx")
        checks["slsaprovenance1"] = cosign.verify_attestation(reference, public, "slsaprovenance1")
    return [f"{name}: {done.stderr[-600:]}" for name, done in checks.items() if done.returncode]


@pytest.mark.timeout(180)
def test_cosign_verifies_a_single_arch_image_by_tag_and_digest(
    cosign: Cosign,
    pair: tuple[KeyFiles, Path],
    other_public: Path,
    plain_registry: RunningRegistry,
    registry_name: str,
    artifacts: OrasArtifacts,
) -> None:
    files, public = pair
    digest = plain_registry.push_image(registry_name, TAG)
    make_attestor(artifacts, files).attest(
        request_for(artifacts.repository, digest, {Arch.AMD64: digest})
    )
    repository = artifacts.repository
    assert refusals(cosign, f"{repository}:{TAG}", public, attestations=True) == []
    assert refusals(cosign, f"{repository}@{digest}", public, attestations=False) == []
    assert len(refusals(cosign, f"{repository}:{TAG}", other_public, attestations=True)) == 3


@pytest.mark.timeout(180)
def test_cosign_verifies_a_multi_arch_index_and_each_arch(
    cosign: Cosign,
    pair: tuple[KeyFiles, Path],
    plain_registry: RunningRegistry,
    registry_name: str,
    artifacts: OrasArtifacts,
) -> None:
    files, public = pair
    amd64 = plain_registry.push_image(registry_name, f"{TAG}-amd64", arch="amd64")
    arm64 = plain_registry.push_image(registry_name, f"{TAG}-arm64", arch="arm64")
    registry = OrasRegistry(artifacts.repository, insecure=True, retries=0)
    index = registry.push_index(TAG, [(Arch.AMD64, amd64), (Arch.ARM64, arm64)])
    registry.close()
    make_attestor(artifacts, files).attest(
        request_for(artifacts.repository, index, {Arch.AMD64: amd64, Arch.ARM64: arm64})
    )
    repository = artifacts.repository
    assert refusals(cosign, f"{repository}:{TAG}", public, attestations=True) == []
    for digest in (amd64, arm64):
        assert refusals(cosign, f"{repository}@{digest}", public, attestations=False) == []


@pytest.mark.timeout(180)
def test_cosign_reads_the_oci11_signature_referrer(
    cosign: Cosign,
    pair: tuple[KeyFiles, Path],
    other_public: Path,
    plain_registry: RunningRegistry,
    registry_name: str,
) -> None:
    files, public = pair
    with run_referrers_proxy(plain_registry.base_url) as proxy:
        registry = OrasRegistry(proxy.repository(registry_name), insecure=True, retries=0)
        artifacts = OrasArtifacts(registry)
        digest = plain_registry.push_image(registry_name, TAG)
        attested = make_attestor(artifacts, files).attest(
            request_for(artifacts.repository, digest, {Arch.AMD64: digest})
        )
        assert attested.referrers_api
        reference = f"{artifacts.repository}:{TAG}"
        signature_referrers = [
            entry
            for entry in oci.index_manifests(artifacts.referrers(digest) or b"{}")
            if entry["artifactType"] == "application/vnd.dev.cosign.artifact.sig.v1+json"
        ]
        assert len(signature_referrers) == 1
        # Take the .sig tag away, so only the referrer can carry the signature.
        sig = artifacts.manifest(oci.signature_tag(digest))
        assert sig is not None
        deleted = httpx.delete(
            f"{plain_registry.base_url}/v2/{registry_name}/manifests/{sig.digest}", timeout=10
        )
        assert deleted.status_code == 202, deleted.text
        assert cosign.verify(reference, public).returncode != 0  # the tag is gone
        verified = cosign.verify(reference, public, "--experimental-oci11")
        assert verified.returncode == 0, verified.stderr[-1500:]
        refused = cosign.verify(reference, other_public, "--experimental-oci11")
        assert refused.returncode != 0
        registry.close()
