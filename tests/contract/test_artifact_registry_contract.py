"""The ``ArtifactRegistry`` contract, on ``MemoryArtifacts`` (with and without the referrers
API) and on ``OrasArtifacts`` against the REAL registry (distribution 2.8: no referrers
API) and the same registry behind ``tests/referrersproxy.py`` (with the API, over HTTP).

Covers: blobs round-trip and a missing one is ``None``; pushing a blob twice is harmless;
manifests come back by tag and by digest with their exact bytes; a manifest with a
``subject`` is reported indexed exactly when the registry has the referrers API, and the
referrers query then lists it with its ``artifactType`` (else answers ``None``).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from releasebot.domain.ports import ArtifactRegistry
from releasebot.registry.artifacts import OrasArtifacts
from releasebot.registry.memory_artifacts import MemoryArtifacts
from releasebot.registry.oras import OrasRegistry
from releasebot.signing import CYCLONEDX, EMPTY_JSON
from releasebot.signing import formats as oci
from tests.support.referrersproxy import run_referrers_proxy


@dataclass(frozen=True)
class Backend:
    artifacts: ArtifactRegistry
    referrers_api: bool


@pytest.fixture(params=["memory", "memory-api", "real", "real-api"])
def backend(request: pytest.FixtureRequest) -> Iterator[Backend]:
    kind: str = request.param
    if kind.startswith("memory"):
        yield Backend(MemoryArtifacts(referrers_api=kind.endswith("api")), kind.endswith("api"))
        return
    running = request.getfixturevalue("plain_registry")
    name = request.getfixturevalue("registry_name")
    if kind == "real":
        registry = OrasRegistry(running.repository(name), insecure=True, retries=0)
        yield Backend(OrasArtifacts(registry), False)
        registry.close()
        return
    with run_referrers_proxy(running.base_url) as proxy:
        registry = OrasRegistry(proxy.repository(name), insecure=True, retries=0)
        yield Backend(OrasArtifacts(registry), True)
        registry.close()


def _image(artifacts: ArtifactRegistry, tag: str) -> str:
    config = json.dumps({"architecture": "amd64", "os": "linux", "tag": tag}).encode()
    artifacts.push_blob(config)
    body = oci.image_manifest(oci.descriptor(oci.OCI_CONFIG, config), [])
    artifacts.push_manifest(tag, oci.OCI_MANIFEST, body)
    return oci.sha256_digest(body)


def test_blobs_round_trip_and_a_missing_one_is_none(backend: Backend) -> None:
    artifacts = backend.artifacts
    data = b'{"sbom": true}'
    digest = artifacts.push_blob(data)
    assert digest == oci.sha256_digest(data)
    assert artifacts.push_blob(data) == digest
    assert artifacts.blob(digest) == data
    assert artifacts.blob("sha256:" + "0" * 64) is None


def test_manifests_come_back_by_tag_and_by_digest(backend: Backend) -> None:
    artifacts = backend.artifacts
    digest = _image(artifacts, "t")
    by_tag, by_digest = artifacts.manifest("t"), artifacts.manifest(digest)
    assert by_tag is not None
    assert by_digest is not None
    assert by_tag == by_digest
    assert (by_tag.digest, by_tag.media_type) == (digest, oci.OCI_MANIFEST)
    assert artifacts.manifest("absent") is None


def test_a_referrer_is_indexed_exactly_when_the_registry_has_the_api(backend: Backend) -> None:
    artifacts = backend.artifacts
    subject_digest = _image(artifacts, "t")
    subject = artifacts.manifest(subject_digest)
    assert subject is not None
    artifacts.push_blob(EMPTY_JSON)
    sbom = b'{"bomFormat": "CycloneDX"}'
    artifacts.push_blob(sbom)
    body = oci.image_manifest(
        oci.empty_config(),
        [oci.descriptor(CYCLONEDX, sbom)],
        subject={
            "mediaType": subject.media_type,
            "digest": subject.digest,
            "size": len(subject.body),
        },
        artifact_type=CYCLONEDX,
    )
    indexed = artifacts.push_manifest(oci.sha256_digest(body), oci.OCI_MANIFEST, body)
    assert indexed is backend.referrers_api
    listed = artifacts.referrers(subject_digest)
    if not backend.referrers_api:
        assert listed is None
        return
    assert listed is not None
    [entry] = oci.index_manifests(listed)
    assert entry["digest"] == oci.sha256_digest(body)
    assert entry["artifactType"] == CYCLONEDX
