"""The ``Registry`` contract, run against ``MemoryRegistry`` and ``OrasRegistry`` on a REAL
registry (Debian's ``docker-registry`` on plain HTTP, started by the suite).

Covers: a missing tag or repository is an answer, not an error; OCI and Docker v2 manifests
give the digest they were pushed with; every tag is listed in O(pages) requests; labels
come back from the image config (by tag and by digest); a two-arch index is published,
found by a HEAD on its tag, carries the labels both images share, is idempotent, and
refuses digests that are missing or built for another arch.

Paging: distribution 2.8 ignores ``n`` on ``tags/list`` (it pages only from 3.0 on), so the
real backend answers in one page; ``MemoryRegistry`` pages as the spec says. Following
``Link`` headers page by page is tested against a fake upstream in
``tests/integration/test_registry_oras.py``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from datetime import timedelta

import pytest

from releasebot.domain.shared.errors import RegistryError
from releasebot.domain.shared.versions import Arch
from releasebot.registry import DOCKER_MANIFEST, OCI_MANIFEST
from releasebot.registry.memory import MemoryRegistry
from releasebot.registry.oras import OrasRegistry

PAGE_SIZE = 3

Push = Callable[[str, Arch, Mapping[str, str], str], str]
"""Arrange an image: (tag, arch, labels, media type) -> digest."""


@dataclass(frozen=True)
class Backend:
    registry: MemoryRegistry | OrasRegistry
    push: Push
    paginates: bool
    """False for distribution 2.8, which answers ``tags/list`` in one page."""

    def expected_pages(self, tag_count: int) -> int:
        if not self.paginates:
            return 1
        return tag_count // PAGE_SIZE + 1  # a full page links to the next, even if empty


def _no_sleep(_delay: timedelta) -> None:
    raise AssertionError("the contract suite never needs a retry")


@pytest.fixture(params=["memory", "real"])
def backend(request: pytest.FixtureRequest) -> Iterator[Backend]:
    if request.param == "memory":
        memory = MemoryRegistry("registry.invalid/nvidia/driver", page_size=PAGE_SIZE)

        def push_memory(tag: str, arch: Arch, labels: Mapping[str, str], media_type: str) -> str:
            return memory.add_image(tag, arch=arch, labels=labels, media_type=media_type)

        yield Backend(memory, push_memory, paginates=True)
        return
    running = request.getfixturevalue("plain_registry")
    name = request.getfixturevalue("registry_name")
    real = OrasRegistry(
        running.repository(name),
        insecure=True,
        timeout=timedelta(seconds=10),
        retries=0,
        sleep=_no_sleep,
        page_size=PAGE_SIZE,
    )

    def push_real(tag: str, arch: Arch, labels: Mapping[str, str], media_type: str) -> str:
        return str(running.push_image(name, tag, arch=arch, labels=labels, media_type=media_type))

    yield Backend(real, push_real, paginates=False)


def test_missing_repository_has_no_tags_and_no_digest(backend: Backend) -> None:
    assert backend.registry.tags() == set()
    assert backend.registry.digest("580.95.05-flatcar4459.2.1") is None


def test_missing_tag_in_existing_repository_is_none(backend: Backend) -> None:
    backend.push("present", Arch.AMD64, {}, OCI_MANIFEST)
    assert backend.registry.digest("absent") is None
    assert backend.registry.digest("present") is not None


@pytest.mark.parametrize("media_type", [OCI_MANIFEST, DOCKER_MANIFEST])
def test_pushed_manifest_gives_its_digest(backend: Backend, media_type: str) -> None:
    pushed = backend.push("580.95.05-flatcar4459.2.1", Arch.AMD64, {}, media_type)
    assert pushed.startswith("sha256:")
    assert backend.registry.digest("580.95.05-flatcar4459.2.1") == pushed


def test_every_tag_listed_in_one_request_per_page(backend: Backend) -> None:
    tags = {f"580.95.05-flatcar4459.2.{n}" for n in range(7)}
    for tag in tags:
        backend.push(tag, Arch.AMD64, {}, OCI_MANIFEST)
    before = backend.registry.request_count
    assert backend.registry.tags() == tags
    requests = backend.registry.request_count - before
    assert requests == backend.expected_pages(len(tags))
    assert requests <= math.ceil(len(tags) / PAGE_SIZE) + 1


def test_labels_read_back_by_tag_and_by_digest(backend: Backend) -> None:
    labels = {
        "releasebot.driver-version": "580.95.05",
        "releasebot.flatcar-version": "4459.2.1",
        "releasebot.kernel-version": "6.12.102",
    }
    digest = backend.push("580.95.05-flatcar4459.2.1", Arch.AMD64, labels, OCI_MANIFEST)
    assert backend.registry.labels("580.95.05-flatcar4459.2.1") == labels
    assert backend.registry.labels(digest) == labels


def test_image_without_labels_has_empty_labels(backend: Backend) -> None:
    backend.push("plain", Arch.AMD64, {}, DOCKER_MANIFEST)
    assert backend.registry.labels("plain") == {}


def test_labels_of_missing_reference_is_an_error(backend: Backend) -> None:
    backend.push("present", Arch.AMD64, {}, OCI_MANIFEST)
    with pytest.raises(RegistryError, match="absent"):
        backend.registry.labels("absent")


def test_push_index_over_two_arches(backend: Backend) -> None:
    shared = {"releasebot.driver-version": "580.95.05", "releasebot.flatcar-version": "4459.2.1"}
    amd64 = backend.push("t-amd64", Arch.AMD64, {**shared, "arch": "amd64"}, OCI_MANIFEST)
    arm64 = backend.push("t-arm64", Arch.ARM64, {**shared, "arch": "arm64"}, DOCKER_MANIFEST)

    index = backend.registry.push_index("t", [(Arch.ARM64, arm64), (Arch.AMD64, amd64)])

    assert index.startswith("sha256:")
    assert index not in (amd64, arm64)
    assert backend.registry.digest("t") == index
    assert backend.registry.labels("t") == shared  # what both arches agree on
    assert backend.registry.labels(index) == shared
    # The per-arch tags are untouched, and publishing again is a no-op (same bytes).
    assert backend.registry.digest("t-amd64") == amd64
    assert backend.registry.push_index("t", [(Arch.AMD64, amd64), (Arch.ARM64, arm64)]) == index


def test_push_index_refuses_a_missing_manifest(backend: Backend) -> None:
    amd64 = backend.push("t-amd64", Arch.AMD64, {}, OCI_MANIFEST)
    missing = "sha256:" + "0" * 64
    with pytest.raises(RegistryError, match="arm64"):
        backend.registry.push_index("t", [(Arch.AMD64, amd64), (Arch.ARM64, missing)])
    assert backend.registry.digest("t") is None


def test_push_index_refuses_an_image_of_another_arch(backend: Backend) -> None:
    amd64 = backend.push("t-amd64", Arch.AMD64, {}, OCI_MANIFEST)
    also_amd64 = backend.push("t-other", Arch.AMD64, {"other": "yes"}, OCI_MANIFEST)
    with pytest.raises(RegistryError, match="not arm64"):
        backend.registry.push_index("t", [(Arch.AMD64, amd64), (Arch.ARM64, also_amd64)])
    assert backend.registry.digest("t") is None
