"""The janitor (``registry/janitor.py``) against a registry that answers badly, over real
HTTP: every answer is one line in the domain's error tree, bounded and printable.

Covers: 401/403 on a delete names the missing delete right; 405 without a body and an
``UNSUPPORTED`` code on another status are both a refusal; an odd status quotes no body
and no control characters; 404 is "already gone"; a 5xx is retried then unavailable; a
referrers answer or error body that is not JSON (nested too deep, an integer too long) is
one ``RegistryError``, and so is one that is not an index or lists what is no digest (never
an empty list); one listing far too many manifests gives a bounded list; a digest that is
not one is refused unsent.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from releasebot.domain.shared.errors import (
    DeleteRefusedError,
    RegistryAuthError,
    RegistryError,
    RegistryUnavailableError,
)
from releasebot.registry.janitor import MAX_LISTED, OrasJanitor
from releasebot.registry.oras import OrasRegistry
from tests.support.feedserver import FeedServer, Reply

DIGEST = "sha256:" + "a" * 64
NAME = "nvidia/driver"


class DeletingFake(FeedServer):
    """``FeedServer`` answering DELETE too, routed like GET."""

    def start(self) -> DeletingFake:
        super().start()
        assert self._server is not None
        base: Any = self._server.RequestHandlerClass

        class Handler(base):  # type: ignore[misc,valid-type]
            def do_DELETE(self) -> None:
                self._reply("DELETE")

        self._server.RequestHandlerClass = Handler
        return self


@pytest.fixture
def fake() -> Iterator[DeletingFake]:
    with DeletingFake() as server:
        yield server


def janitor(fake: DeletingFake, retries: int = 0) -> OrasJanitor:
    registry = OrasRegistry(
        f"127.0.0.1:{fake.port}/{NAME}", insecure=True, retries=retries, sleep=lambda _: None
    )
    return OrasJanitor(registry)


def manifest_path(reference: str) -> str:
    return f"/v2/{NAME}/manifests/{reference}"


def error_body(code: str, message: str) -> bytes:
    return json.dumps({"errors": [{"code": code, "message": message}]}).encode()


def one_line(text: str) -> None:
    assert "\n" not in text
    assert "\x1b" not in text
    assert len(text) < 600


@pytest.mark.parametrize("status", [401, 403])
def test_no_delete_right_is_an_auth_error_naming_it(fake: DeletingFake, status: int) -> None:
    fake.route(manifest_path(DIGEST), Reply(status, {"WWW-Authenticate": 'Basic realm="r"'}))
    with pytest.raises(RegistryAuthError) as caught:
        janitor(fake).delete(DIGEST)
    one_line(str(caught.value))
    assert str(caught.value).endswith("deleting needs the delete permission on the repository")


@pytest.mark.parametrize(
    "reply",
    [
        Reply(405),
        Reply(400, {"Content-Type": "application/json"}, error_body("UNSUPPORTED", "no")),
    ],
)
def test_a_registry_refusing_deletes_is_a_refusal(fake: DeletingFake, reply: Reply) -> None:
    fake.route(manifest_path(DIGEST), reply)
    with pytest.raises(DeleteRefusedError) as caught:
        janitor(fake).delete(DIGEST)
    one_line(str(caught.value))
    assert "refuses deletes" in str(caught.value)


def test_an_odd_answer_quotes_no_body_and_no_control_characters(fake: DeletingFake) -> None:
    body = b"\x1b[31m" + b"x" * 100_000
    fake.route(manifest_path(DIGEST), Reply(418, {"Content-Type": "text/plain"}, body))
    with pytest.raises(RegistryError) as caught:
        janitor(fake).delete(DIGEST)
    one_line(str(caught.value))
    assert "xxxx" not in str(caught.value)


def test_already_gone_is_an_answer(fake: DeletingFake) -> None:
    fake.route(manifest_path(DIGEST), Reply(404, {}, error_body("MANIFEST_UNKNOWN", "gone")))
    assert janitor(fake).delete(DIGEST) is False


def test_a_registry_down_is_retried_then_unavailable(fake: DeletingFake) -> None:
    fake.route(manifest_path(DIGEST), Reply(503))
    with pytest.raises(RegistryUnavailableError):
        janitor(fake, retries=2).delete(DIGEST)
    assert len([r for r in fake.requests if r.method == "DELETE"]) == 3


@pytest.mark.parametrize(
    "body",
    [
        b"<html>not json</html>",
        b"[" * 100_000,
        b'{"manifests": [], "size": ' + b"9" * 5_000 + b"}",
    ],
    ids=["not-json", "deep", "long-integer"],
)
def test_an_unreadable_referrers_answer_is_one_registry_error(
    fake: DeletingFake, body: bytes
) -> None:
    fake.route(f"/v2/{NAME}/referrers/{DIGEST}", Reply(200, {}, body))
    with pytest.raises(RegistryError) as caught:
        janitor(fake).attachments(DIGEST)
    one_line(str(caught.value))
    assert "is not JSON" in str(caught.value)


@pytest.mark.parametrize(
    "body", [b"[" * 100_000, b'{"errors": [{"code": ' + b"1" * 5_000 + b"}]}"], ids=["deep", "long"]
)
def test_an_unreadable_error_body_on_delete_is_one_registry_error(
    fake: DeletingFake, body: bytes
) -> None:
    fake.route(manifest_path(DIGEST), Reply(400, {"Content-Type": "application/json"}, body))
    with pytest.raises(RegistryError) as caught:
        janitor(fake).delete(DIGEST)
    one_line(str(caught.value))


@pytest.mark.parametrize(
    "body",
    [
        b'"a string"',
        b'{"manifests": "nope"}',
        json.dumps({"manifests": [{"digest": "sha256:short"}]}).encode(),
        json.dumps({"manifests": [{"digest": 5}]}).encode(),
        json.dumps({"manifests": ["x"]}).encode(),
    ],
)
def test_an_unreadable_referrers_index_is_an_error_not_an_empty_list(
    fake: DeletingFake, body: bytes
) -> None:
    fake.route(f"/v2/{NAME}/referrers/{DIGEST}", Reply(200, {}, body))
    with pytest.raises(RegistryError) as caught:
        janitor(fake).attachments(DIGEST)
    one_line(str(caught.value))
    assert f"referrers of {DIGEST}" in str(caught.value)


def test_an_unreadable_index_of_the_subject_is_an_error(fake: DeletingFake) -> None:
    index = "application/vnd.oci.image.index.v1+json"
    fake.route(manifest_path(DIGEST), Reply(200, {"Content-Type": index}, b'{"manifests": 7}'))
    with pytest.raises(RegistryError) as caught:
        janitor(fake).attachments(DIGEST)
    assert f"manifest {DIGEST}: manifests is not a list" in str(caught.value)


def test_no_referrers_lists_nothing(fake: DeletingFake) -> None:
    fake.route(f"/v2/{NAME}/referrers/{DIGEST}", Reply(200, {}, b'{"manifests": []}'))
    assert janitor(fake).attachments(DIGEST) == ()


def test_a_huge_referrers_answer_is_bounded(fake: DeletingFake) -> None:
    many = [{"digest": f"sha256:{n:064x}"} for n in range(MAX_LISTED * 4)]
    body = json.dumps({"manifests": many}).encode()
    fake.route(f"/v2/{NAME}/referrers/{DIGEST}", Reply(200, {}, body))
    found = janitor(fake).attachments(DIGEST)
    assert len(found) == MAX_LISTED


def test_a_digest_that_is_not_one_is_refused_unsent(fake: DeletingFake) -> None:
    with pytest.raises(RegistryError):
        janitor(fake).delete("sha256:../../tags")
    assert fake.requests == []
