"""``OrasRegistry`` against a REAL registry with TLS + htpasswd, and against fake upstreams.

Covers, on Debian's ``docker-registry`` (TLS with a test CA, htpasswd basic auth):
credentials from a Docker ``config.json`` (``auth``, ``username``/``password``, URL keys)
and from plain arguments; a wrong password or none is a ``RegistryAuthError`` naming the
registry and never the password; an untrusted certificate is a one-line ``RegistryError``
unless ``tls_verify=False``; a stopped registry is a ``RegistryUnavailableError`` after
exactly ``retries`` injected (never real) sleeps; an independent client (skopeo) resolves
the published index per arch.

Against ``FeedServer`` (a small real HTTP server): 503-then-200 is retried to success,
429's ``Retry-After`` is honoured up to the cap, a timeout is temporary, ``Link``
pagination is followed page by page on the same host only, a cookie the registry sets is
never sent back (Harbor asks a client that keeps cookies for CSRF tokens), and the
bearer-token flow
(401 challenge, token service with basic credentials, the token sent on the retry and
reused afterwards; 403 from the token service is an auth error, 503 a temporary one).
"""

from __future__ import annotations

import base64
import hashlib
import json
import shutil
import subprocess
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from releasebot.domain.shared.errors import (
    RegistryAuthError,
    RegistryError,
    RegistryUnavailableError,
)
from releasebot.domain.shared.versions import Arch
from releasebot.registry import DOCKER_MANIFEST, OCI_MANIFEST
from releasebot.registry.oras import OrasRegistry
from tests.support.feedserver import FeedServer, RecordedRequest, Reply
from tests.support.registryserver import RunningRegistry, free_port
from tests.support.tools import missing_tool

TAG = "580.95.05-flatcar4459.2.1"
DIGEST = "sha256:" + "ab" * 32


class Sleeps(list[timedelta]):
    """An injected ``sleep`` that records instead of sleeping."""

    def __call__(self, delay: timedelta) -> None:
        self.append(delay)


@pytest.fixture
def sleeps() -> Sleeps:
    return Sleeps()


def _registry(repository: str, sleeps: Sleeps, **kwargs: Any) -> OrasRegistry:
    kwargs.setdefault("timeout", timedelta(seconds=10))
    return OrasRegistry(repository, sleep=sleeps, **kwargs)


# -- the real registry: TLS + htpasswd --------------------------------------------------


@pytest.fixture
def pushed(tls_registry: RunningRegistry, registry_name: str) -> str:
    """An image pushed under ``TAG``; its digest."""
    return tls_registry.push_image(registry_name, TAG, labels={"releasebot.kernel": "6.12"})


@pytest.mark.parametrize("key", ["host", "https://host", "https://host/v1/"])
def test_docker_config_auth_entry_with_custom_ca(
    tls_registry: RunningRegistry,
    registry_name: str,
    pushed: str,
    sleeps: Sleeps,
    tmp_path: Path,
    key: str,
) -> None:
    config = tls_registry.write_docker_config(
        tmp_path / "config.json", key=key.replace("host", tls_registry.host)
    )
    registry = _registry(
        tls_registry.repository(registry_name),
        sleeps,
        ca_file=tls_registry.ca_file,
        docker_config=str(config),
    )
    assert registry.digest(TAG) == pushed
    assert registry.tags() == {TAG}
    assert registry.labels(TAG) == {"releasebot.kernel": "6.12"}
    # One 401 round trip, then basic auth is sent up front: 2 + 1 + 2 (manifest, blob).
    assert registry.request_count == 5
    assert sleeps == []


def test_docker_config_username_and_password_fields(
    tls_registry: RunningRegistry, registry_name: str, pushed: str, sleeps: Sleeps, tmp_path: Path
) -> None:
    config = tmp_path / "config.json"
    entry = {"username": tls_registry.username, "password": tls_registry.password}
    config.write_text(json.dumps({"auths": {tls_registry.host: entry}}))
    registry = _registry(
        tls_registry.repository(registry_name),
        sleeps,
        ca_file=tls_registry.ca_file,
        docker_config=str(config),
    )
    assert registry.digest(TAG) == pushed


def test_username_and_password_arguments_and_index(
    tls_registry: RunningRegistry, registry_name: str, pushed: str, sleeps: Sleeps
) -> None:
    arm64 = tls_registry.push_image(
        registry_name, f"{TAG}-arm64", arch="arm64", media_type=DOCKER_MANIFEST
    )
    registry = _registry(
        tls_registry.repository(registry_name),
        sleeps,
        ca_file=tls_registry.ca_file,
        username=tls_registry.username,
        password=tls_registry.password,
    )
    index = registry.push_index(f"{TAG}-multi", [(Arch.AMD64, pushed), (Arch.ARM64, arm64)])
    assert registry.digest(f"{TAG}-multi") == index
    assert registry.tags() == {TAG, f"{TAG}-arm64", f"{TAG}-multi"}


def test_wrong_password_is_an_auth_error_naming_the_registry(
    tls_registry: RunningRegistry, registry_name: str, pushed: str, sleeps: Sleeps
) -> None:
    wrong = "not-the-password-4711"
    registry = _registry(
        tls_registry.repository(registry_name),
        sleeps,
        ca_file=tls_registry.ca_file,
        username=tls_registry.username,
        password=wrong,
    )
    with pytest.raises(RegistryAuthError) as caught:
        registry.digest(TAG)
    message = str(caught.value)
    assert message.startswith(f"registry {tls_registry.host}: 401")
    assert "credentials" in message
    assert "\n" not in message
    basic = base64.b64encode(f"{tls_registry.username}:{wrong}".encode()).decode()
    for secret in (wrong, basic):
        assert secret not in message
        assert secret not in repr(registry)
    assert registry.request_count == 2  # challenge, one answer: no retries of a 401
    assert sleeps == []


def test_no_credentials_is_an_auth_error_saying_so(
    tls_registry: RunningRegistry, registry_name: str, sleeps: Sleeps, tmp_path: Path
) -> None:
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"auths": {"other.example": {"auth": "dTpw"}}}))
    registry = _registry(
        tls_registry.repository(registry_name),
        sleeps,
        ca_file=tls_registry.ca_file,
        docker_config=str(config),
    )
    with pytest.raises(RegistryAuthError, match="no credentials are configured"):
        registry.tags()


def test_untrusted_certificate_is_a_one_line_error(
    tls_registry: RunningRegistry, registry_name: str, sleeps: Sleeps
) -> None:
    registry = _registry(
        tls_registry.repository(registry_name),
        sleeps,
        username=tls_registry.username,
        password=tls_registry.password,
        retries=3,
    )
    with pytest.raises(RegistryError) as caught:
        registry.digest(TAG)
    message = str(caught.value)
    assert not isinstance(caught.value, RegistryUnavailableError)
    assert message.startswith(f"registry {tls_registry.host}: TLS handshake failed")
    assert "CERTIFICATE_VERIFY_FAILED" in message
    assert "CA file" in message
    assert "\n" not in message
    assert registry.request_count == 1  # a configuration problem: not retried
    assert sleeps == []


def test_tls_verify_off_accepts_the_certificate(
    tls_registry: RunningRegistry, registry_name: str, pushed: str, sleeps: Sleeps
) -> None:
    registry = _registry(
        tls_registry.repository(registry_name),
        sleeps,
        tls_verify=False,
        username=tls_registry.username,
        password=tls_registry.password,
    )
    assert registry.digest(TAG) == pushed


def test_plain_http_to_a_tls_registry_is_a_registry_error(
    tls_registry: RunningRegistry, registry_name: str, sleeps: Sleeps
) -> None:
    registry = _registry(tls_registry.repository(registry_name), sleeps, insecure=True)
    with pytest.raises(RegistryError, match="400"):
        registry.tags()


def test_stopped_registry_is_unavailable_after_bounded_retries(sleeps: Sleeps) -> None:
    port = free_port()  # nothing listens there any more: connection refused
    registry = _registry(
        f"127.0.0.1:{port}/nvidia/driver",
        sleeps,
        insecure=True,
        retries=3,
        backoff=timedelta(seconds=1),
        max_backoff=timedelta(seconds=3),
    )
    with pytest.raises(RegistryUnavailableError) as caught:
        registry.digest(TAG)
    assert str(caught.value) == (
        f"registry 127.0.0.1:{port}: unreachable: [Errno 111] Connection refused (after 4 attempts)"
    )
    assert sleeps == [timedelta(seconds=s) for s in (1, 2, 3)]  # doubled, capped
    assert registry.request_count == 4


def test_index_is_understood_by_an_independent_client(
    plain_registry: RunningRegistry, registry_name: str, sleeps: Sleeps
) -> None:
    skopeo = shutil.which("skopeo")
    if skopeo is None:
        missing_tool("skopeo not installed (apt-get install skopeo)")
    amd64 = plain_registry.push_image(registry_name, "a", arch="amd64", labels={"k": "amd"})
    arm64 = plain_registry.push_image(registry_name, "b", arch="arm64", labels={"k": "arm"})
    registry = _registry(plain_registry.repository(registry_name), sleeps, insecure=True)
    index = registry.push_index(TAG, [(Arch.AMD64, amd64), (Arch.ARM64, arm64)])
    reference = f"docker://{plain_registry.repository(registry_name)}:{TAG}"
    for arch, label in (("amd64", "amd"), ("arm64", "arm")):
        shown = subprocess.run(
            [skopeo, "inspect", "--tls-verify=false", "--override-arch", arch, reference],
            capture_output=True,
            check=True,
            timeout=60,
        )
        inspected = json.loads(shown.stdout)
        assert inspected["Digest"] == index
        assert inspected["Architecture"] == arch
        assert inspected["Labels"] == {"k": label}


# -- docker config problems --------------------------------------------------------------


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        ("not json", "is not JSON"),
        ('{"auths": {"r.example": {"auth": "c2VjcmV0LW5vLWNvbG9u"}}}', "not base64 of user"),
        ('{"auths": {"r.example": {"identitytoken": "secret-token"}}}', "identitytoken"),
    ],
)
def test_unusable_docker_config_names_the_problem_not_the_secret(
    tmp_path: Path, content: str, expected: str
) -> None:
    config = tmp_path / "config.json"
    config.write_text(content)
    with pytest.raises(RegistryAuthError, match=expected) as caught:
        OrasRegistry("r.example/nvidia/driver", docker_config=str(config))
    assert str(caught.value).startswith("registry r.example: ")
    assert "secret" not in str(caught.value)


def test_missing_docker_config_names_the_file(tmp_path: Path) -> None:
    missing = tmp_path / "nope" / "config.json"
    with pytest.raises(RegistryAuthError, match=f"cannot read docker config {missing}"):
        OrasRegistry("r.example/nvidia/driver", docker_config=str(missing))


# -- fake upstreams: retries, timeouts, pagination, bearer tokens ------------------------


class RegistryFake(FeedServer):
    """``FeedServer`` answering HEAD too: the adapter HEADs manifests, FeedServer is GET-only.

    HEAD is routed like GET, recorded with its method, and answered without a body.
    """

    def start(self) -> RegistryFake:
        super().start()
        assert self._server is not None
        base: Any = self._server.RequestHandlerClass
        fake = self

        class Handler(base):  # type: ignore[misc,valid-type]
            def do_HEAD(self) -> None:
                headers = {name.lower(): value for name, value in self.headers.items()}
                reply = fake._answer(RecordedRequest("HEAD", self.path, headers))
                self.send_response(reply.status)
                for name, value in reply.headers.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(reply.body)))
                self.end_headers()

        self._server.RequestHandlerClass = Handler
        return self


@pytest.fixture
def fake() -> Iterator[RegistryFake]:
    with RegistryFake() as server:
        yield server


def _fake_registry(fake: RegistryFake, sleeps: Sleeps, **kwargs: Any) -> OrasRegistry:
    kwargs.setdefault("retries", 2)
    return _registry(f"127.0.0.1:{fake.port}/nvidia/driver", sleeps, insecure=True, **kwargs)


def _tag_page(*tags: str, link: str | None = None) -> Reply:
    headers = {"Content-Type": "application/json"}
    if link is not None:
        headers["Link"] = f'<{link}>; rel="next"'
    return Reply(200, headers, json.dumps({"name": "nvidia/driver", "tags": list(tags)}).encode())


MANIFEST_PATH = f"/v2/nvidia/driver/manifests/{TAG}"
FIRST_PAGE = "/v2/nvidia/driver/tags/list?n=1000"


def test_503_then_200_is_retried_to_success(fake: RegistryFake, sleeps: Sleeps) -> None:
    fake.route(FIRST_PAGE, FeedServer.sequence(Reply(503), Reply(502), _tag_page("a", "b")))
    registry = _fake_registry(fake, sleeps)
    assert registry.tags() == {"a", "b"}
    assert registry.request_count == 3
    assert sleeps == [timedelta(seconds=1), timedelta(seconds=2)]


def test_503_forever_is_unavailable_after_retries(fake: RegistryFake, sleeps: Sleeps) -> None:
    fake.route(MANIFEST_PATH, Reply(503))
    registry = _fake_registry(fake, sleeps)
    with pytest.raises(RegistryUnavailableError, match=r"503 Service Unavailable \(after 3"):
        registry.digest(TAG)
    assert len(fake.requests_to(MANIFEST_PATH)) == 3
    assert len(sleeps) == 2


def test_429_retry_after_is_honoured_up_to_the_cap(fake: RegistryFake, sleeps: Sleeps) -> None:
    fake.route(
        MANIFEST_PATH,
        FeedServer.sequence(
            Reply(429, {"Retry-After": "4"}),
            Reply(429, {"Retry-After": "3600"}),
            Reply(200, {"Docker-Content-Digest": DIGEST}),
        ),
    )
    registry = _fake_registry(fake, sleeps, max_backoff=timedelta(seconds=10))
    assert registry.digest(TAG) == DIGEST
    assert sleeps == [timedelta(seconds=4), timedelta(seconds=10)]


def test_timeout_is_temporary(fake: RegistryFake, sleeps: Sleeps) -> None:
    fake.route(FIRST_PAGE, Reply(200, delay=5.0))
    registry = _fake_registry(fake, sleeps, retries=0, timeout=timedelta(seconds=0.2))
    with pytest.raises(RegistryUnavailableError, match=r"timed out after 0\.2s"):
        registry.tags()


def test_manifest_head_sends_every_media_type_and_404_is_none(
    fake: RegistryFake, sleeps: Sleeps
) -> None:
    registry = _fake_registry(fake, sleeps)
    assert registry.digest(TAG) is None
    (request,) = fake.requests_to(MANIFEST_PATH)
    assert request.method == "HEAD"
    accepted = {part.strip() for part in request.headers["accept"].split(",")}
    assert accepted == {
        OCI_MANIFEST,
        DOCKER_MANIFEST,
        "application/vnd.oci.image.index.v1+json",
        "application/vnd.docker.distribution.manifest.list.v2+json",
    }
    assert sleeps == []


def test_digest_without_the_header_hashes_the_manifest(fake: RegistryFake, sleeps: Sleeps) -> None:
    body = b'{"schemaVersion":2,"mediaType":"%s","config":{},"layers":[]}' % OCI_MANIFEST.encode()
    fake.route(MANIFEST_PATH, Reply(200, {"Content-Type": OCI_MANIFEST}, body))
    registry = _fake_registry(fake, sleeps)
    assert registry.digest(TAG) == "sha256:" + hashlib.sha256(body).hexdigest()
    assert [r.method for r in fake.requests_to(MANIFEST_PATH)] == ["HEAD", "GET"]


def test_tags_follow_link_pages(fake: RegistryFake, sleeps: Sleeps) -> None:
    second = "/v2/nvidia/driver/tags/list?last=c&n=3"
    third = "/v2/nvidia/driver/tags/list?last=f&n=3"
    fake.route(FIRST_PAGE.replace("1000", "3"), _tag_page("a", "b", "c", link=second))
    fake.route(second, _tag_page("d", "e", "f", link=fake.url(third)))  # absolute link too
    fake.route(third, _tag_page("g"))
    registry = _fake_registry(fake, sleeps, page_size=3)
    assert registry.tags() == set("abcdefg")
    assert registry.request_count == 3


def test_tags_refuse_a_link_to_another_host(fake: RegistryFake, sleeps: Sleeps) -> None:
    fake.route(FIRST_PAGE, _tag_page("a", link="http://elsewhere.invalid/v2/x/tags/list?n=1"))
    registry = _fake_registry(fake, sleeps)
    with pytest.raises(RegistryError, match="another host"):
        registry.tags()


def test_unknown_repository_is_empty_but_an_html_404_is_an_error(
    fake: RegistryFake, sleeps: Sleeps
) -> None:
    unknown = {"errors": [{"code": "NAME_UNKNOWN", "message": "repository name not known"}]}
    fake.route(FIRST_PAGE, Reply(404, {}, json.dumps(unknown).encode()))
    assert _fake_registry(fake, sleeps).tags() == set()
    fake.route(FIRST_PAGE, Reply(404, {"Content-Type": "text/html"}, b"<html>nope</html>"))
    with pytest.raises(RegistryError, match="tag list: 404"):
        _fake_registry(fake, sleeps).tags()


BASIC = "Basic " + base64.b64encode(b"bot:s3cret").decode()
TOKEN_PATH = "/token?service=x&scope=repository%3Anvidia%2Fdriver%3Apull"


def _bearer_fake(fake: RegistryFake, token_reply: Reply | None = None) -> None:
    challenge = (
        f'Bearer realm="{fake.url("/token")}",service="x",scope="repository:nvidia/driver:pull"'
    )

    def manifest(request: RecordedRequest) -> Reply:
        if request.headers.get("authorization") == "Bearer tok-123":
            return Reply(200, {"Docker-Content-Digest": DIGEST})
        return Reply(401, {"WWW-Authenticate": challenge})

    def token(request: RecordedRequest) -> Reply:
        if token_reply is not None:
            return token_reply
        if request.headers.get("authorization") != BASIC:
            return Reply(401, {"WWW-Authenticate": 'Basic realm="token"'})
        return Reply(200, {"Content-Type": "application/json"}, b'{"token": "tok-123"}')

    fake.route(MANIFEST_PATH, manifest)
    fake.route(TOKEN_PATH, token)


def test_bearer_token_flow(fake: RegistryFake, sleeps: Sleeps) -> None:
    _bearer_fake(fake)
    registry = _fake_registry(fake, sleeps, username="bot", password="s3cret")

    assert registry.digest(TAG) == DIGEST
    assert [r.headers.get("authorization") for r in fake.requests_to(TOKEN_PATH)] == [BASIC]
    heads = fake.requests_to(MANIFEST_PATH)
    assert [r.headers.get("authorization") for r in heads] == [None, "Bearer tok-123"]
    assert registry.request_count == 3

    assert registry.digest(TAG) == DIGEST  # the token is reused: one request more
    assert registry.request_count == 4
    assert "s3cret" not in repr(registry)


def test_wrong_password_at_the_token_service_is_an_auth_error(
    fake: RegistryFake, sleeps: Sleeps
) -> None:
    _bearer_fake(fake)
    registry = _fake_registry(fake, sleeps, username="bot", password="wrong-pw")
    with pytest.raises(RegistryAuthError, match=r"token service .* answered 401") as caught:
        registry.digest(TAG)
    assert "wrong-pw" not in str(caught.value)


def test_403_from_the_token_service_is_an_auth_error(fake: RegistryFake, sleeps: Sleeps) -> None:
    _bearer_fake(fake, Reply(403, {}, b'{"details": "no pull rights"}'))
    registry = _fake_registry(fake, sleeps, username="bot", password="s3cret")
    with pytest.raises(RegistryAuthError) as caught:
        registry.digest(TAG)
    assert str(caught.value) == (
        f"registry 127.0.0.1:{fake.port}: token service 127.0.0.1:{fake.port} answered "
        "403 Forbidden — check the docker config / credentials"
    )
    assert sleeps == []


def test_token_service_down_is_temporary(fake: RegistryFake, sleeps: Sleeps) -> None:
    _bearer_fake(fake, Reply(503))
    registry = _fake_registry(fake, sleeps, username="bot", password="s3cret", retries=1)
    with pytest.raises(RegistryUnavailableError, match=r"503 .*after 2 attempts"):
        registry.digest(TAG)
    assert len(sleeps) == 1


def test_a_cookie_the_registry_sets_is_never_sent_back(fake: RegistryFake, sleeps: Sleeps) -> None:
    cookie = {"Set-Cookie": "sid=browser; Path=/", "Content-Type": "application/json"}
    page = json.dumps({"name": "nvidia/driver", "tags": ["a"]}).encode()
    fake.route(FIRST_PAGE, lambda _request: Reply(200, cookie, page))
    registry = _fake_registry(fake, sleeps)
    assert registry.tags() == {"a"}
    assert registry.tags() == {"a"}
    asked = fake.requests_to(FIRST_PAGE)
    assert len(asked) == 2
    assert [request.headers.get("cookie") for request in asked] == [None, None]
