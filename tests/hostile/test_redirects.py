"""The redirect policy where it is followed: feeds (https to http refused before the request
is sent, over real TLS) and the artefact checks (redirects into link-local or private ranges
refused, redirects within the configured URL's own range followed).

The registry's redirects are in the registry corpus; the policy's rules one by one, with
an injected resolver (a public origin cannot be played on loopback), in
``tests/unit/test_edge_limits.py``.
"""

from __future__ import annotations

import ssl
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from releasebot.domain.shared.errors import FeedRejectedError, TemporaryError
from releasebot.domain.shared.versions import Arch
from releasebot.sources.artifacts import FLATCAR_FILES, HttpArtifactSource
from releasebot.sources.fetch import HttpFeedFetcher
from tests.hostile.conftest import assert_absent, assert_clean_line
from tests.support.feedserver import FeedServer, Reply
from tests.support.registryserver import make_tls_files
from tests.support.targets import make_target

SECRET_PAGE = b"root:x:0:0 internal page that must never be quoted"


@pytest.fixture
def tls(tmp_path_factory: pytest.TempPathFactory) -> Any:
    return make_tls_files(tmp_path_factory.mktemp("tls"))


def trusting(tls: Any) -> ssl.SSLContext:
    return ssl.create_default_context(cafile=tls.ca_file)


@pytest.fixture
def plain() -> Iterator[FeedServer]:
    with FeedServer() as server:
        server.route("/feed.json", Reply(200, {"Content-Type": "text/plain"}, SECRET_PAGE))
        yield server


def test_https_to_http_is_refused_before_the_request_is_sent(tls: Any, plain: FeedServer) -> None:
    with FeedServer(tls=(tls.cert_file, tls.key_file)) as secure:
        secure.route("/feed.json", Reply(301, {"Location": plain.url("/feed.json")}))
        with httpx.Client(
            verify=ssl.create_default_context(cafile=tls.ca_file), timeout=5
        ) as client:
            fetcher = HttpFeedFetcher(client, retries=0)
            with pytest.raises(FeedRejectedError) as caught:
                fetcher.fetch("stable", secure.url("/feed.json"), None)
        assert len(secure.requests) == 1
    assert plain.requests == []  # never asked: nothing of it can be quoted
    message = str(caught.value)
    assert_clean_line(message, r"refused a redirect from https to plain http \(127\.0\.0\.1\)")
    assert_absent(message, SECRET_PAGE.decode())


def test_https_to_https_on_the_same_range_is_followed(tls: Any) -> None:
    with FeedServer(tls=(tls.cert_file, tls.key_file)) as secure:
        secure.route("/old.json", Reply(302, {"Location": "/feed.json"}))
        secure.route("/feed.json", Reply(200, {"Content-Type": "application/json"}, b"{}"))
        with httpx.Client(
            verify=ssl.create_default_context(cafile=tls.ca_file), timeout=5
        ) as client:
            result = HttpFeedFetcher(client, retries=0).fetch("s", secure.url("/old.json"), None)
    assert result.requests == 2


def artefact_source(client: httpx.Client, upstream: FeedServer) -> HttpArtifactSource:
    return HttpArtifactSource(
        client, flatcar_base_url=upstream.url("/{channel}"), nvidia_base_url=upstream.url("/nv")
    )


@pytest.mark.parametrize(
    ("location", "problem"),
    [
        ("http://169.254.169.254/latest/meta-data/", "169.254.169.254 \\(a link-local address\\)"),
        ("http://10.0.0.7/NVIDIA.run", "10.0.0.7 \\(a private address\\)"),
        ("http://[fd12::1]/NVIDIA.run", "fd12::1 \\(a private address\\)"),
        ("file:///etc/passwd", "non-http\\(s\\) URL"),
    ],
)
def test_an_artefact_redirect_out_of_range_is_refused(
    location: str, problem: str, tmp_path: Path
) -> None:
    target = make_target()
    with FeedServer() as upstream, httpx.Client(timeout=5) as client:
        source = artefact_source(client, upstream)
        runfile = source.runfile_url(target, Arch.AMD64).removeprefix(upstream.url(""))
        upstream.route(runfile, Reply(302, {"Location": location}))
        with pytest.raises(TemporaryError) as caught:
            source.readiness(target, Arch.AMD64)
    assert_clean_line(str(caught.value), problem)


def test_an_artefact_redirect_within_loopback_is_followed() -> None:
    target = make_target()
    with FeedServer() as upstream, httpx.Client(timeout=5) as client:
        source = artefact_source(client, upstream)
        base = upstream.url("")
        for name in FLATCAR_FILES:
            for suffix in ("", ".DIGESTS", ".DIGESTS.asc"):
                path = source.flatcar_url(target, Arch.AMD64, name + suffix).removeprefix(base)
                upstream.route(path, Reply(200, {}, b"CONFIG_GCC_VERSION=140200\n"))
        runfile = source.runfile_url(target, Arch.AMD64).removeprefix(base)
        upstream.route(runfile, Reply(302, {"Location": "/mirror/NVIDIA.run"}))
        upstream.route("/mirror/NVIDIA.run", Reply(200, {}, b""))
        answer = source.readiness(target, Arch.AMD64)
    assert answer.ready, answer
