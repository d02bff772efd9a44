"""Signing inside the reconcile cycle: nothing is called published before it verifies.

Real: the registry, the SQLite store, feeds over HTTP, the fake Kubernetes API and the
Kaniko stand-in (``tests/e2e/test_reconcile.py``'s rig), the attestor over ``OrasArtifacts``
with a cosign-format key file, and Debian 13's skopeo checking the result.

Covers: a build published by the cycle carries a signature skopeo accepts, and its
``tag_published`` event names the key (what Slack shows); multi-arch: index and arches
signed; a broken key leaves the target failed (not published), with the reason recorded
and one ``build_failed`` event, and the next cycle tells nobody again; a registry that
cannot take the signature right now postpones the publish without telling anyone.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest

from releasebot.domain.shared.errors import RegistryUnavailableError
from releasebot.domain.shared.versions import Arch
from releasebot.domain.targets.decisions import Action
from releasebot.domain.targets.events import EventKind
from releasebot.domain.targets.models import TargetState
from releasebot.registry.artifacts import OrasArtifacts
from releasebot.signing import formats as oci
from releasebot.signing.attestor import RegistryAttestor
from releasebot.signing.documents import Builder
from releasebot.signing.keyfiles import KeyFiles
from releasebot.signing.keys import SigningKey, encrypt_key, generate_key
from tests.e2e.test_reconcile import Rig, _rig, feeds  # noqa: F401 - the feeds fixture
from tests.support.sigstore import find_skopeo

TAG = "580.178.04-flatcar4593.2.4"


@pytest.fixture
def key() -> SigningKey:
    return generate_key()


def signed_rig(
    request: pytest.FixtureRequest, arches: frozenset[Arch], key_file: Path
) -> Iterator[Rig]:
    for rig in _rig(request, arches):
        keys = KeyFiles(str(key_file), password=b"s3cret")
        rig.overrides["attestor"] = RegistryAttestor(
            OrasArtifacts(rig.registry),
            keys=keys.load,
            builder=Builder("0.1.0", "ghcr.io/osscontainertools/kaniko:v1.28.0"),
        )
        yield rig


@pytest.fixture
def key_file(tmp_path: Path, key: SigningKey) -> Path:
    path = tmp_path / "cosign.key"
    path.write_bytes(encrypt_key(key, b"s3cret"))
    return path


@pytest.fixture
def rig(request: pytest.FixtureRequest, key_file: Path) -> Iterator[Rig]:
    yield from signed_rig(request, frozenset({Arch.AMD64}), key_file)


@pytest.fixture
def multi_rig(request: pytest.FixtureRequest, key_file: Path) -> Iterator[Rig]:
    yield from signed_rig(request, frozenset({Arch.AMD64, Arch.ARM64}), key_file)


def _published_events(rig: Rig) -> list[dict[str, object]]:
    return [
        dict(stored.event.payload)
        for stored in rig.store.pending_events(rig.clock.now + timedelta(days=1), limit=500)
        if stored.event.kind is EventKind.TAG_PUBLISHED
    ]


def test_a_published_build_is_signed_and_the_event_names_the_key(
    rig: Rig, key: SigningKey, tmp_path: Path
) -> None:
    rig.cycle()
    rig.kaniko.build_all()
    rig.cycle()
    record = rig.target(TAG)
    assert record.state is TargetState.PUBLISHED
    assert record.digest is not None
    [event] = [e for e in _published_events(rig) if e["tag"] == TAG]
    assert event["signed_by"] == key.public.fingerprint

    skopeo = find_skopeo(tmp_path)
    repository = rig.registry.repository
    copied = skopeo.copy(f"{repository}:{TAG}", key.public.pem, repository=repository)
    assert copied.returncode == 0, copied.stderr


def test_multi_arch_publish_signs_the_index_and_every_arch(multi_rig: Rig) -> None:
    rig = multi_rig
    rig.cycle()
    rig.kaniko.build_all()
    rig.cycle()
    record = rig.target(TAG)
    assert record.state is TargetState.PUBLISHED
    artifacts = OrasArtifacts(rig.registry)
    per_arch = [rig.registry.digest(f"{TAG}-{arch}") for arch in ("amd64", "arm64")]
    for digest in [record.digest, *per_arch]:
        assert digest is not None
        assert artifacts.manifest(oci.signature_tag(digest)) is not None, digest


def test_a_broken_key_fails_the_target_once_and_never_publishes_it(
    rig: Rig, key_file: Path
) -> None:
    rig.cycle()
    rig.kaniko.build_all()
    key_file.write_text("-----BEGIN ENCRYPTED SIGSTORE PRIVATE KEY-----\nnope\n")
    rig.cycle()
    record = rig.target(TAG)
    assert record.state is TargetState.FAILED
    assert record.last_error is not None
    assert record.last_error.startswith("not signed, so not published: key ")
    assert not [e for e in _published_events(rig) if e["tag"] == TAG]
    failed = [
        s.event
        for s in rig.store.pending_events(rig.clock.now + timedelta(days=1), limit=500)
        if s.event.kind is EventKind.BUILD_FAILED and s.event.subject == TAG
    ]
    assert len(failed) == 1

    rig.clock.advance(timedelta(minutes=10))
    rig.cycle()  # the tag exists in the registry, but a failed target stays failed
    assert rig.target(TAG).state is TargetState.FAILED
    again = [
        s
        for s in rig.store.pending_events(rig.clock.now + timedelta(days=1), limit=500)
        if s.event.kind is EventKind.BUILD_FAILED and s.event.subject == TAG
    ]
    assert len(again) == 1  # told once


def test_a_registry_that_cannot_take_the_signature_now_postpones_quietly(rig: Rig) -> None:
    rig.cycle()
    rig.kaniko.build_all()
    attestor = rig.overrides["attestor"]
    assert isinstance(attestor, RegistryAttestor)
    real_attest = attestor.attest

    def down(*args: object, **kwargs: object) -> object:
        raise RegistryUnavailableError("registry 127.0.0.1: 503 Service Unavailable")

    attestor.attest = down  # type: ignore[method-assign]
    report = rig.cycle()
    assert rig.target(TAG).state is TargetState.BUILDING
    assert any("503" in error for error in report.errors)
    postponed = [d for d in report.decisions if d.action is Action.SIGNING_POSTPONED]
    assert TAG in [d.tag for d in postponed]
    assert not [e for e in _published_events(rig) if e["tag"] == TAG]

    attestor.attest = real_attest  # type: ignore[method-assign]
    rig.cycle()
    assert rig.target(TAG).state is TargetState.PUBLISHED
