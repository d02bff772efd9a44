"""Names from outside never leave the repository: every registry URL releasebot builds from
a tag, digest or path it read (a tag listing, a referrers answer, an index, a header, an
upload ``Location``, a ``Link``) holds a name of the OCI grammar, over real HTTP against a
fake registry that sends what a real one never would.

Covers every adapter entry point that puts a name into a URL (``OrasRegistry``,
``OrasArtifacts``, ``OrasJanitor``, ``SignatureVerifier``): a hostile name is refused with one
clean ``RegistryError`` (or skipped, where a listing holds it) and NO request is sent with it.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import pytest

from releasebot.domain.shared.errors import RegistryError
from releasebot.domain.shared.versions import Arch
from releasebot.registry import OCI_INDEX, OCI_MANIFEST
from releasebot.registry.artifacts import OrasArtifacts
from releasebot.registry.janitor import OrasJanitor
from releasebot.registry.oras import OrasRegistry
from tests.support.feedserver import FeedServer, Reply

NAME = "nvidia/driver"
BASE = f"/v2/{NAME}/"
HEX = "ab" * 32
DIGEST = f"sha256:{HEX}"
HOSTILE = [
    "../../../other/repo/manifests/X",
    "x?digest=sha256:" + HEX,
    "x#y",
    "a/b",
    "..",
    "%2e%2e%2fother",
    "x y",
    "tag\r\nX-Injected: 1",
    "\x1b[31mred",
    "café",
    "",
    "sha256:" + HEX.upper(),
    "sha256:" + HEX + "/../../x",
]


@pytest.fixture
def fake() -> Iterator[FeedServer]:
    with FeedServer() as server:
        yield server


def registry(fake: FeedServer) -> OrasRegistry:
    return OrasRegistry(
        f"127.0.0.1:{fake.port}/{NAME}",
        insecure=True,
        retries=0,
        sleep=lambda _: None,
        max_backoff=timedelta(0),
    )


def clean(text: str) -> None:
    for control in ("\n", "\r", "\x1b"):
        assert control not in text, ascii(text)
    assert len(text) < 400


def entry_points(fake: FeedServer) -> dict[str, Callable[[str], Any]]:
    oras = registry(fake)
    artifacts = OrasArtifacts(oras)
    janitor = OrasJanitor(oras)
    return {
        "digest": oras.digest,
        "labels": oras.labels,
        "push_index": lambda name: oras.push_index(name, [(Arch.AMD64, DIGEST)]),
        "request": lambda name: oras.request("GET", f"manifests/{name}", {}),
        "request-blob": lambda name: oras.request("GET", f"blobs/{name}", {}),
        "request-path": lambda name: oras.request("GET", name, {}),
        "manifest": artifacts.manifest,
        "blob": artifacts.blob,
        "referrers": artifacts.referrers,
        "push_manifest": lambda name: artifacts.push_manifest(name, OCI_MANIFEST, b"{}"),
        "attachments": janitor.attachments,
        "delete": janitor.delete,
        "janitor-digest": janitor.digest,
    }


@pytest.mark.parametrize("name", HOSTILE)
@pytest.mark.parametrize(
    "entry",
    [
        "digest",
        "labels",
        "push_index",
        "request",
        "request-blob",
        "request-path",
        "manifest",
        "blob",
        "referrers",
        "push_manifest",
        "attachments",
        "delete",
        "janitor-digest",
    ],
)
def test_a_name_outside_the_grammar_is_refused_unsent(
    fake: FeedServer, entry: str, name: str
) -> None:
    with pytest.raises(RegistryError) as caught:
        entry_points(fake)[entry](name)
    clean(str(caught.value))
    assert fake.requests == []


def test_a_listing_keeps_only_grammar_tags_and_asks_nothing_outside(fake: FeedServer) -> None:
    listed = ["580.82.07-flatcar4081.2.0", *HOSTILE]
    body = json.dumps({"tags": listed}).encode()
    fake.route(f"{BASE}tags/list?n=1000", Reply(200, {"Content-Type": "application/json"}, body))
    oras = registry(fake)
    tags = oras.tags()
    assert tags == {"580.82.07-flatcar4081.2.0"}
    for tag in tags:
        oras.digest(tag)
    assert all(request.path.startswith(BASE) for request in fake.requests)
    assert not any(".." in request.path or "?" in request.path.split("tags/list")[0]
                   for request in fake.requests)  # fmt: skip


@pytest.mark.parametrize(
    "location",
    [
        "/v2/other/repo/blobs/uploads/u1",
        f"{BASE}../../other/repo/blobs/uploads/u1",
        f"{BASE}blobs/uploads/%2e%2e/%2e%2e/x",
        "/v2/nvidia/driverx/blobs/uploads/u1",
    ],
)
def test_an_upload_location_outside_the_repository_gets_no_credentials(
    fake: FeedServer, location: str
) -> None:
    fake.route(f"{BASE}blobs/uploads/", Reply(202, {"Location": location}))
    with pytest.raises(RegistryError, match="leaves the repository") as caught:
        OrasArtifacts(registry(fake)).push_blob(b"{}")
    clean(str(caught.value))
    assert all(request.method != "PUT" for request in fake.requests)


def test_a_tag_page_link_into_another_repository_is_not_followed(fake: FeedServer) -> None:
    link = '</v2/other/repo/tags/list?n=1000&last=a>; rel="next"'
    body = json.dumps({"tags": ["a"]}).encode()
    fake.route(f"{BASE}tags/list?n=1000", Reply(200, {"Link": link}, body))
    with pytest.raises(RegistryError, match="links elsewhere"):
        registry(fake).tags()
    assert [request.path for request in fake.requests] == [f"{BASE}tags/list?n=1000"]


def test_a_referrers_answer_naming_paths_is_refused_by_the_janitor(fake: FeedServer) -> None:
    index = {
        "schemaVersion": 2,
        "mediaType": OCI_INDEX,
        "manifests": [{"mediaType": OCI_MANIFEST, "digest": HOSTILE[0], "size": 2}],
    }
    fake.route(
        f"{BASE}referrers/{DIGEST}",
        Reply(200, {"Content-Type": OCI_INDEX}, json.dumps(index).encode()),
    )
    with pytest.raises(RegistryError, match="not a sha256 digest"):
        OrasJanitor(registry(fake)).attachments(DIGEST)
    assert all(request.path.startswith(BASE) and ".." not in request.path
               for request in fake.requests)  # fmt: skip


def test_a_repository_setting_outside_the_grammar_is_refused() -> None:
    for repository in ("127.0.0.1:5000/../other", "127.0.0.1:5000/Nvidia", "127.0.0.1:5000/a?b"):
        with pytest.raises(ValueError, match="OCI name grammar"):
            OrasRegistry(repository, insecure=True)
