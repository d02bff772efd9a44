"""Retention against a REAL registry (Debian's docker-registry) and a real SQLite store.

The janitor (``registry/janitor.py``) on its own: a tag's manifest is deleted by digest
and the tag is gone, a second delete answers "already gone"; what signing attached to a
digest (cosign ``.sig``/``.att`` tags, the referrers tag and its SBOM/provenance
manifests, written by the real ``RegistryAttestor``) is found for an image and for each
image of an index; a registry with deletes disabled refuses with ``DeleteRefusedError``.

The use case (``service/retention.py``) end to end, on a seeded store and a simulated
fleet: a dry run deletes nothing; ``apply`` deletes exactly the release nothing needs (and
its signature), keeps what a node runs, what a node will reboot into, what a feed lists
and the current target, records the deletion and tells it once; an unsure fleet and a
registry refusing deletes delete nothing and record nothing; a delete whose answer was lost
(its retry answers "already gone") still deletes the attachments and is recorded and told;
an attachment whose digest a kept tag points at is never deleted, nor anything a kept tag
reaches (its signature, attestation, referrers) when a deleted tag's referrers answer
lists it: the kept image still verifies.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from releasebot.domain.fleet.nodes import NFD_VERSION_ID
from releasebot.domain.shared.errors import DeleteRefusedError
from releasebot.domain.shared.versions import Arch
from releasebot.domain.targets.events import EventKind
from releasebot.fleet.memory import MemoryFleetSource
from releasebot.registry import OCI_MANIFEST
from releasebot.registry.artifacts import OrasArtifacts
from releasebot.registry.janitor import OrasJanitor
from releasebot.registry.oras import OrasRegistry
from releasebot.service.retention import RetentionService
from releasebot.signing.keys import generate_key
from releasebot.signing.verifier import SignatureVerifier
from releasebot.store import migrate
from releasebot.store.engine import make_engine
from releasebot.store.sql import SqlStateStore
from tests.contract.test_store_contract import SEEN, URL, flatcar
from tests.integration.test_signing_registry import attestor, request_for
from tests.support.fleetnodes import gpu_node
from tests.support.lossyproxy import run_lossy_proxy
from tests.support.referrersproxy import run_referrers_proxy
from tests.support.registryserver import RunningRegistry
from tests.support.targets import make_target

NOW = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)
GONE = "580.105.08-flatcar4230.2.4"
"""Left the stable feed 90 days ago; nothing runs it: the one tag retention deletes."""
RUNNING = "580.105.08-flatcar4230.2.5"
PENDING = "580.105.08-flatcar4230.2.6"
LISTED = "580.105.08-flatcar4593.2.4"
TARGET = "580.178.04-flatcar4593.2.5"
ALL = (GONE, RUNNING, PENDING, LISTED, TARGET)


def janitor_for(registry: RunningRegistry, name: str) -> tuple[OrasRegistry, OrasJanitor]:
    oras = OrasRegistry(registry.repository(name), insecure=True, retries=0)
    return oras, OrasJanitor(oras)


@pytest.fixture
def janitor(plain_registry: RunningRegistry, registry_name: str) -> Iterator[OrasJanitor]:
    oras, janitor = janitor_for(plain_registry, registry_name)
    yield janitor
    oras.close()


def test_a_delete_by_digest_removes_the_tag(
    plain_registry: RunningRegistry, registry_name: str, janitor: OrasJanitor
) -> None:
    digest = plain_registry.push_image(registry_name, GONE)
    other = plain_registry.push_image(registry_name, TARGET)
    assert janitor.digest(GONE) == digest
    assert janitor.delete(digest) is True
    assert janitor.digest(GONE) is None
    assert janitor.tags() == {TARGET}
    assert janitor.digest(TARGET) == other
    assert janitor.delete(digest) is False  # already gone: an answer, not an error


def test_what_signing_attached_is_found_for_an_image_and_an_index(
    plain_registry: RunningRegistry, registry_name: str, janitor: OrasJanitor
) -> None:
    oras = OrasRegistry(plain_registry.repository(registry_name), insecure=True, retries=0)
    artifacts = OrasArtifacts(oras)
    key = generate_key()
    amd64 = plain_registry.push_image(registry_name, f"{GONE}-amd64", arch="amd64")
    arm64 = plain_registry.push_image(registry_name, f"{GONE}-arm64", arch="arm64")
    index = oras.push_index(GONE, [(Arch.AMD64, amd64), (Arch.ARM64, arm64)])
    assert janitor.attachments(index) == ()
    request = request_for(artifacts.repository, index, {Arch.AMD64: amd64, Arch.ARM64: arm64})
    attestor(artifacts, key).attest(request)
    attached = set(janitor.attachments(index))
    signature_tags = {
        f"sha256-{digest.split(':')[1]}{suffix}"
        for digest in (index, amd64, arm64)
        for suffix in (".sig", ".att", "")
    }
    tagged = {janitor.digest(tag) for tag in signature_tags} - {None}
    assert tagged <= attached  # every signature, attestation and referrers tag
    assert len(attached) > len(tagged)  # and the SBOM/provenance manifests they index
    assert not {index, amd64, arm64} & attached
    for digest in attached:
        assert janitor.delete(digest) is True
    assert {tag for tag in janitor.tags() if tag.startswith("sha256-")} == set()
    assert janitor.attachments(index) == ()
    oras.close()


def test_a_registry_with_deletes_disabled_refuses_them(
    nodelete_registry: RunningRegistry, registry_name: str
) -> None:
    oras, janitor = janitor_for(nodelete_registry, registry_name)
    digest = nodelete_registry.push_image(registry_name, GONE)
    with pytest.raises(DeleteRefusedError) as refused:
        janitor.delete(digest)
    message = str(refused.value)
    assert "refuses deletes" in message
    assert "storage.delete.enabled" in message
    assert "\n" not in message
    assert janitor.digest(GONE) == digest
    oras.close()


# -- the use case, end to end ------------------------------------------------------------


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SqlStateStore]:
    engine = make_engine(f"sqlite:///{tmp_path / 'state.db'}")
    migrate.upgrade(engine)
    store = SqlStateStore(engine)
    long_ago = NOW - timedelta(days=120)
    old = [flatcar(v) for v in ("4230.2.4", "4230.2.5", "4230.2.6")]
    store.record_flatcar_feed("stable", URL, [*old, flatcar("4593.2.4")], SEEN, long_ago)
    dropped = NOW - timedelta(days=90)
    store.record_flatcar_feed("stable", URL, [flatcar("4593.2.4")], SEEN, dropped)
    store.sync_targets([make_target(driver="580.178.04", flatcar="4593.2.5")], NOW)
    yield store
    engine.dispose()


def fleet(*, unsure: bool = False) -> MemoryFleetSource:
    nodes = [gpu_node("gpu-0", "4230.2.5"), gpu_node("gpu-1", "4593.2.5", pending="4230.2.6")]
    if unsure:
        odd = gpu_node("gpu-odd", "4593.2.5")
        odd["metadata"]["labels"][NFD_VERSION_ID] = "not-a-version"
        odd["status"]["nodeInfo"]["osImage"] = "Flatcar Container Linux"
        nodes.append(odd)
    return MemoryFleetSource(nodes)


def service(
    store: SqlStateStore, janitor: OrasJanitor, source: MemoryFleetSource | None
) -> RetentionService:
    return RetentionService(store=store, janitor=janitor, fleet=source, clock=lambda: NOW)


def push_all(registry: RunningRegistry, name: str) -> dict[str, str]:
    return {tag: registry.push_image(name, tag) for tag in ALL}


def test_a_dry_run_deletes_nothing_and_apply_deletes_only_what_nothing_needs(
    plain_registry: RunningRegistry,
    registry_name: str,
    janitor: OrasJanitor,
    store: SqlStateStore,
) -> None:
    digests = push_all(plain_registry, registry_name)
    oras = OrasRegistry(plain_registry.repository(registry_name), insecure=True, retries=0)
    artifacts = OrasArtifacts(oras)
    gone = digests[GONE]
    attestor(artifacts, generate_key()).attest(
        request_for(artifacts.repository, gone, {Arch.AMD64: gone})
    )
    signature = f"sha256-{gone.split(':')[1]}.sig"
    before = janitor.tags()
    assert signature in before

    dry = service(store, janitor, fleet()).run(apply=False)
    assert [(d.tag, d.digest) for d in dry.plan.delete] == [(GONE, gone)]
    assert janitor.tags() == before
    assert store.deletions() == []
    assert store.pending_events(NOW) == []

    report = service(store, janitor, fleet()).run(apply=True)
    assert not report.failed
    assert janitor.tags() == before - {GONE, signature} - {
        t for t in before if t.startswith(f"sha256-{gone.split(':')[1]}")
    }
    for tag in (RUNNING, PENDING, LISTED, TARGET):
        assert janitor.digest(tag) == digests[tag]
    reasons = {kept.tag: kept.reason for kept in report.plan.keep}
    assert reasons[RUNNING] == "GPU node gpu-0 runs it"
    assert reasons[PENDING] == "GPU node gpu-1 will reboot into it"
    assert reasons[LISTED] == "the stable feed lists it"
    assert reasons[TARGET] == f"a current target ({TARGET})"
    (recorded,) = store.deletions()
    assert (recorded.tag, recorded.digest, recorded.flatcar_version) == (GONE, gone, "4230.2.4")
    assert recorded.attachments >= 2  # its signature and attestation (and their index)
    (event,) = store.pending_events(NOW)
    assert event.event.kind is EventKind.TAG_DELETED
    assert event.event.payload["repository"] == janitor.repository

    again = service(store, janitor, fleet()).run(apply=True)
    assert again.plan.delete == ()
    assert len(store.deletions()) == 1
    assert len(store.pending_events(NOW)) == 1  # told once
    oras.close()


@pytest.mark.parametrize("source", ["unsure", "none"])
def test_an_unsure_fleet_deletes_nothing(
    source: str,
    plain_registry: RunningRegistry,
    registry_name: str,
    janitor: OrasJanitor,
    store: SqlStateStore,
) -> None:
    push_all(plain_registry, registry_name)
    report = service(store, janitor, fleet(unsure=True) if source == "unsure" else None).run(
        apply=True
    )
    assert report.plan.held is not None
    assert report.failed
    assert report.plan.delete == ()
    assert janitor.tags() == set(ALL)
    assert store.deletions() == []
    assert store.pending_events(NOW) == []


def test_a_registry_refusing_deletes_changes_nothing(
    nodelete_registry: RunningRegistry, registry_name: str, store: SqlStateStore
) -> None:
    oras, janitor = janitor_for(nodelete_registry, registry_name)
    push_all(nodelete_registry, registry_name)
    report = service(store, janitor, fleet()).run(apply=True)
    assert report.refused is not None
    assert "refuses deletes" in report.refused
    assert report.failed
    assert report.deleted == []
    assert janitor.tags() == set(ALL)
    assert store.deletions() == []
    assert store.pending_events(NOW) == []
    oras.close()


def test_a_delete_whose_answer_was_lost_is_still_recorded_with_its_attachments(
    plain_registry: RunningRegistry, registry_name: str, store: SqlStateStore
) -> None:
    digests = push_all(plain_registry, registry_name)
    gone = digests[GONE]
    direct = OrasRegistry(plain_registry.repository(registry_name), insecure=True, retries=0)
    artifacts = OrasArtifacts(direct)
    attestor(artifacts, generate_key()).attest(
        request_for(artifacts.repository, gone, {Arch.AMD64: gone})
    )
    hex_part = gone.split(":")[1]
    with run_lossy_proxy(plain_registry.base_url, lose=gone) as proxy:
        oras = OrasRegistry(
            proxy.repository(registry_name), insecure=True, retries=1, sleep=lambda _: None
        )
        report = service(store, OrasJanitor(oras), fleet()).run(apply=True)
        oras.close()
    assert proxy.lost == [f"/v2/{registry_name}/manifests/{gone}"]
    assert not report.failed, report.errors
    _, janitor = janitor_for(plain_registry, registry_name)
    left = janitor.tags()
    assert GONE not in left
    assert not {t for t in left if t.startswith(f"sha256-{hex_part}")}  # attachments too
    (recorded,) = store.deletions()
    assert (recorded.tag, recorded.digest) == (GONE, gone)
    assert recorded.attachments >= 2
    assert "already gone" in recorded.reason
    (event,) = store.pending_events(NOW)
    assert event.event.kind is EventKind.TAG_DELETED
    direct.close()


def test_an_attachment_that_is_a_kept_tags_manifest_is_never_deleted(
    plain_registry: RunningRegistry,
    registry_name: str,
    janitor: OrasJanitor,
    store: SqlStateStore,
) -> None:
    import httpx

    digests = push_all(plain_registry, registry_name)
    gone = digests[GONE]
    # A signature tag of the deleted release that points at a kept release's manifest
    # (a hand-made tag, a broken signer): deleting it would delete the kept tag.
    manifests = f"{plain_registry.base_url}/v2/{registry_name}/manifests"
    kept = httpx.get(f"{manifests}/{RUNNING}", headers={"Accept": OCI_MANIFEST})
    signature = f"sha256-{gone.split(':')[1]}.sig"
    put = httpx.put(
        f"{manifests}/{signature}", content=kept.content, headers={"Content-Type": OCI_MANIFEST}
    )
    assert put.status_code == 201
    report = service(store, janitor, fleet()).run(apply=True)
    assert [d.tag for d in report.deleted] == [GONE]
    assert janitor.digest(RUNNING) == digests[RUNNING]
    assert any(digests[RUNNING] in error and "kept" in error for error in report.errors)


def test_what_an_index_reaches_is_its_images_and_everything_attached(
    plain_registry: RunningRegistry, registry_name: str, janitor: OrasJanitor
) -> None:
    oras = OrasRegistry(plain_registry.repository(registry_name), insecure=True, retries=0)
    artifacts = OrasArtifacts(oras)
    amd64 = plain_registry.push_image(registry_name, f"{GONE}-amd64", arch="amd64")
    arm64 = plain_registry.push_image(registry_name, f"{GONE}-arm64", arch="arm64")
    index = oras.push_index(GONE, [(Arch.AMD64, amd64), (Arch.ARM64, arm64)])
    assert janitor.reachable({index}) == {index: frozenset({index, amd64, arm64})}
    request = request_for(artifacts.repository, index, {Arch.AMD64: amd64, Arch.ARM64: arm64})
    attestor(artifacts, generate_key()).attest(request)
    reached = janitor.reachable({index, amd64})
    assert reached[index] >= {index, amd64, arm64, *janitor.attachments(index)}
    assert reached[amd64] >= {amd64, janitor.digest(f"sha256-{amd64.split(':')[1]}.sig")}
    assert arm64 not in reached[amd64]
    oras.close()


@pytest.mark.parametrize("listed", ["signature", "attestation", "referrer", "all"])
def test_a_referrers_answer_listing_what_a_kept_tag_reaches_deletes_none_of_it(
    listed: str, plain_registry: RunningRegistry, registry_name: str, store: SqlStateStore
) -> None:
    """The deleted tag's referrers answer (a registry's bug, or somebody's referrer
    pointing the wrong way) lists the kept tag's signature, attestation or SBOM: retention
    deletes the deleted tag and its own attachments, and the kept image still verifies."""
    digests = push_all(plain_registry, registry_name)
    gone, running = digests[GONE], digests[RUNNING]
    key = generate_key()
    with run_referrers_proxy(plain_registry.base_url) as proxy:
        oras = OrasRegistry(proxy.repository(registry_name), insecure=True, retries=0)
        artifacts = OrasArtifacts(oras)
        janitor = OrasJanitor(oras)
        for digest in (gone, running):
            attestor(artifacts, key).attest(
                request_for(artifacts.repository, digest, {Arch.AMD64: digest})
            )
        hex_part = running.split(":")[1]
        kept = {
            "signature": {janitor.digest(f"sha256-{hex_part}.sig")},
            "attestation": {janitor.digest(f"sha256-{hex_part}.att")},
            "referrer": {entry["digest"] for entry in proxy.referrers[running]},
        }
        kept["all"] = set().union(*kept.values())
        aimed = {str(digest) for digest in kept[listed]}
        assert aimed
        assert None not in aimed
        with proxy.lock:
            proxy.referrers[gone] = [
                *proxy.referrers[gone],
                *({"mediaType": OCI_MANIFEST, "digest": d, "size": 1} for d in sorted(aimed)),
            ]
        report = service(store, janitor, fleet()).run(apply=True)
        assert [d.tag for d in report.deleted] == [GONE]
        assert janitor.digest(GONE) is None
        for digest in aimed:
            assert artifacts.manifest(digest) is not None, digest
            assert any(
                digest in error and "a kept tag reaches it" in error for error in report.errors
            )
        assert digests[RUNNING] in report.plan.protected
        verified = SignatureVerifier(artifacts, key.public).verify(RUNNING)
        assert verified.digest == running
        assert not {t for t in janitor.tags() if t.startswith(f"sha256-{gone.split(':')[1]}")}
        oras.close()
