"""``HttpFeedFetcher`` against a real HTTP server on 127.0.0.1 (``tests/feedserver.py``).

Covers conditional requests (ETag, Last-Modified, 304), the body-hash fallback for servers
without validators, redirects (followed, counted, looping), 4xx, retried 5xx/429 with the
injected sleep, refused connections, timeouts, HTML and truncated bodies, the size limit,
``file://`` feeds, and that no URL credentials leak into messages. Backoff sleeps are
recorded, never slept.
"""

from __future__ import annotations

import hashlib
import socket
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import httpx
import pytest

from releasebot.domain.errors import (
    FeedFormatError,
    FeedRejectedError,
    FeedUnavailableError,
    TemporaryError,
)
from releasebot.domain.models import Validators
from releasebot.domain.ports import FetchedBody, Unchanged
from releasebot.sources.fetch import HttpFeedFetcher, make_http_client
from releasebot.sources.flatcar import parse_flatcar_feed
from tests.feedserver import FeedServer, Reply

BODY = b'{"4593.2.5": {"channel": "stable"}}\n'
ETAG = '"5f1c-63a"'
LAST_MODIFIED = "Thu, 13 Aug 2026 15:50:00 GMT"


@pytest.fixture
def server() -> Iterator[FeedServer]:
    with FeedServer() as server:
        yield server


@pytest.fixture
def client() -> Iterator[httpx.Client]:
    with make_http_client(timedelta(seconds=5), "releasebot-test/1.0") as client:
        yield client


@pytest.fixture
def sleeps() -> list[timedelta]:
    return []


@pytest.fixture
def fetcher(client: httpx.Client, sleeps: list[timedelta]) -> HttpFeedFetcher:
    return HttpFeedFetcher(client, retries=2, sleep=sleeps.append)


def sha(body: bytes) -> str:
    return hashlib.sha256(body).hexdigest()


# -- conditional requests --------------------------------------------------------------------


def test_validators_are_sent_back_and_304_means_unchanged(
    server: FeedServer, fetcher: HttpFeedFetcher
) -> None:
    server.route("/feed", FeedServer.static(BODY, etag=ETAG, last_modified=LAST_MODIFIED))

    first = fetcher.fetch("stable", server.url("/feed"), None)
    second = fetcher.fetch("stable", server.url("/feed"), first.validators)

    assert isinstance(first, FetchedBody)
    assert first.body == BODY
    assert first.validators == Validators(ETAG, LAST_MODIFIED, sha(BODY))
    assert isinstance(second, Unchanged)
    assert second.validators == first.validators
    assert second.requests == 1
    initial, conditional = server.requests_to("/feed")
    assert "if-none-match" not in initial.headers
    assert "if-modified-since" not in initial.headers
    assert conditional.headers["if-none-match"] == ETAG
    assert conditional.headers["if-modified-since"] == LAST_MODIFIED
    assert conditional.headers["user-agent"] == "releasebot-test/1.0"


def test_a_304_with_a_new_etag_updates_it_and_keeps_the_rest(
    server: FeedServer, fetcher: HttpFeedFetcher
) -> None:
    server.route("/feed", Reply(304, {"ETag": '"v2"'}))
    old = Validators('"v1"', LAST_MODIFIED, sha(BODY))

    result = fetcher.fetch("stable", server.url("/feed"), old)

    assert result == Unchanged(Validators('"v2"', LAST_MODIFIED, sha(BODY)))


def test_without_validators_the_body_hash_detects_no_change(
    server: FeedServer, fetcher: HttpFeedFetcher
) -> None:
    server.route("/feed", Reply(200, {"Content-Type": "application/json"}, BODY))

    first = fetcher.fetch("stable", server.url("/feed"), None)
    second = fetcher.fetch("stable", server.url("/feed"), first.validators)
    server.route("/feed", Reply(200, {"Content-Type": "application/json"}, BODY + b" "))
    third = fetcher.fetch("stable", server.url("/feed"), second.validators)

    assert first.validators == Validators(None, None, sha(BODY))
    assert isinstance(second, Unchanged)
    assert second.validators == first.validators
    assert all(
        not request.headers.keys() & {"if-none-match", "if-modified-since"}
        for request in server.requests
    )
    assert isinstance(third, FetchedBody)
    assert third.validators.body_sha256 == sha(BODY + b" ")


# -- redirects ---------------------------------------------------------------------------------


def test_redirects_are_followed_and_every_hop_is_counted(
    server: FeedServer, fetcher: HttpFeedFetcher
) -> None:
    server.route("/old", FeedServer.redirect(server.url("/moved"), status=301))
    server.route("/moved", FeedServer.redirect("/feed", status=302))
    server.route("/feed", FeedServer.static(BODY))

    result = fetcher.fetch("stable", server.url("/old"), None)

    assert isinstance(result, FetchedBody)
    assert result.body == BODY
    assert result.requests == 3
    assert [request.path for request in server.requests] == ["/old", "/moved", "/feed"]


def test_redirects_are_followed_on_a_client_built_without_it(
    server: FeedServer, sleeps: list[timedelta]
) -> None:
    server.route("/old", FeedServer.redirect("/feed", status=308))
    server.route("/feed", FeedServer.static(BODY))

    with httpx.Client(timeout=5) as plain:
        result = HttpFeedFetcher(plain, sleep=sleeps.append).fetch("s", server.url("/old"), None)

    assert isinstance(result, FetchedBody)
    assert result.requests == 2


def test_a_redirect_loop_is_a_clear_permanent_error(
    server: FeedServer, fetcher: HttpFeedFetcher, sleeps: list[timedelta]
) -> None:
    server.route("/a", FeedServer.redirect("/b"))
    server.route("/b", FeedServer.redirect("/a"))

    with pytest.raises(FeedRejectedError, match=r"too many redirects from http://127\.0\.0\.1"):
        fetcher.fetch("stable", server.url("/a"), None)

    assert sleeps == []
    assert len(server.requests) == 6  # the first request and make_http_client's 5 hops


# -- HTTP errors and retries -----------------------------------------------------------------


def test_404_is_rejected_without_retrying(
    server: FeedServer, fetcher: HttpFeedFetcher, sleeps: list[timedelta]
) -> None:
    with pytest.raises(FeedRejectedError) as caught:
        fetcher.fetch("stable", server.url("/nowhere.json"), None)

    assert str(caught.value) == "feed stable: HTTP 404 Not Found — check the feed URL"
    assert sleeps == []
    assert len(server.requests) == 1


def test_a_500_then_200_is_retried_to_success(
    server: FeedServer, fetcher: HttpFeedFetcher, sleeps: list[timedelta]
) -> None:
    server.route("/feed", FeedServer.sequence(Reply(500), Reply(200, {}, BODY)))

    result = fetcher.fetch("stable", server.url("/feed"), None)

    assert isinstance(result, FetchedBody)
    assert result.requests == 2
    assert sleeps == [timedelta(seconds=1)]


def test_a_503_that_persists_gives_up_after_bounded_retries(
    server: FeedServer, fetcher: HttpFeedFetcher, sleeps: list[timedelta]
) -> None:
    server.route("/feed", Reply(503, {"Content-Type": "text/html"}, b"<h1>down</h1>" * 1000))

    with pytest.raises(FeedUnavailableError) as caught:
        fetcher.fetch("stable", server.url("/feed"), None)

    assert str(caught.value) == (
        "feed stable: server error 503 Service Unavailable (after 3 attempts)"
    )
    assert isinstance(caught.value, TemporaryError)
    assert len(server.requests) == 3
    assert sleeps == [timedelta(seconds=1), timedelta(seconds=2)]


def test_a_short_retry_after_is_honoured(
    server: FeedServer, fetcher: HttpFeedFetcher, sleeps: list[timedelta]
) -> None:
    server.route(
        "/feed", FeedServer.sequence(Reply(429, {"Retry-After": "3"}), Reply(200, {}, BODY))
    )

    result = fetcher.fetch("stable", server.url("/feed"), None)

    assert isinstance(result, FetchedBody)
    assert sleeps == [timedelta(seconds=3)]


@pytest.mark.parametrize(
    ("retry_after", "expected"),
    [("3600", timedelta(hours=1)), ("99999999999999999999", timedelta(days=1))],
)
def test_a_long_retry_after_is_handed_to_the_service_instead_of_slept(
    server: FeedServer,
    fetcher: HttpFeedFetcher,
    sleeps: list[timedelta],
    retry_after: str,
    expected: timedelta,
) -> None:
    server.route("/feed", Reply(429, {"Retry-After": retry_after}))

    with pytest.raises(FeedUnavailableError, match=r"rate limited \(HTTP 429\)") as caught:
        fetcher.fetch("stable", server.url("/feed"), None)

    assert caught.value.retry_after == expected
    assert sleeps == []
    assert len(server.requests) == 1


def test_a_retry_after_date_in_the_past_means_retry_now(
    server: FeedServer, fetcher: HttpFeedFetcher, sleeps: list[timedelta]
) -> None:
    past = Reply(503, {"Retry-After": "Wed, 21 Oct 2015 07:28:00 GMT"})
    server.route("/feed", FeedServer.sequence(past, Reply(200, {}, BODY)))

    result = fetcher.fetch("stable", server.url("/feed"), None)

    assert isinstance(result, FetchedBody)
    assert sleeps == [timedelta(0)]


def test_a_refused_connection_is_unavailable_and_keeps_credentials_out(
    fetcher: HttpFeedFetcher, sleeps: list[timedelta]
) -> None:
    with socket.socket() as probe:  # a port that was free a moment ago: nothing listens
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    url = f"http://mirror:s3cret@127.0.0.1:{port}/releases-stable.json?token=abc123"

    with pytest.raises(FeedUnavailableError) as caught:
        fetcher.fetch("stable", url, None)

    message = str(caught.value)
    assert message.startswith(f"feed stable: unreachable: http://127.0.0.1:{port}/releases-stable")
    assert "s3cret" not in message
    assert "abc123" not in message
    assert isinstance(caught.value.__cause__, httpx.ConnectError)
    assert len(sleeps) == 2


def test_a_slow_server_times_out(server: FeedServer) -> None:
    server.route("/feed", Reply(200, {}, BODY, delay=10))
    with make_http_client(timedelta(seconds=0.2), "releasebot-test") as quick:
        fetcher = HttpFeedFetcher(quick, retries=0)
        started = time.monotonic()

        with pytest.raises(FeedUnavailableError) as caught:
            fetcher.fetch("stable", server.url("/feed"), None)

    assert str(caught.value) == "feed stable: timed out after 0.2s"
    assert isinstance(caught.value.__cause__, httpx.TimeoutException)
    assert time.monotonic() - started < 2


# -- bodies --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("headers", "body"),
    [
        pytest.param({"Content-Type": "text/html; charset=utf-8"}, b"Sign in", id="content-type"),
        pytest.param({"Content-Type": "application/json"}, b"\n<!DOCTYPE html>", id="body"),
    ],
)
def test_an_html_answer_is_a_format_error(
    server: FeedServer, fetcher: HttpFeedFetcher, headers: dict[str, str], body: bytes
) -> None:
    server.route("/feed", Reply(200, headers, body))

    with pytest.raises(FeedFormatError, match="returned HTML, not JSON"):
        fetcher.fetch("stable", server.url("/feed"), None)


def test_a_body_cut_short_of_its_length_is_a_dropped_connection(
    server: FeedServer, fetcher: HttpFeedFetcher
) -> None:
    server.route("/feed", Reply(200, {}, BODY[:10], content_length=len(BODY)))

    with pytest.raises(FeedUnavailableError, match="connection failed") as caught:
        fetcher.fetch("stable", server.url("/feed"), None)

    assert "after 3 attempts" in str(caught.value)


def test_a_truncated_document_is_fetched_then_rejected_by_the_parser(
    server: FeedServer, fetcher: HttpFeedFetcher
) -> None:
    server.route("/feed", FeedServer.static(BODY[:20]))

    result = fetcher.fetch("stable", server.url("/feed"), None)

    assert isinstance(result, FetchedBody)
    with pytest.raises(FeedFormatError, match="truncated or invalid JSON at line 1"):
        parse_flatcar_feed("stable", result.body)


def test_a_body_over_the_limit_is_refused(server: FeedServer, client: httpx.Client) -> None:
    server.route("/feed", FeedServer.static(b"[" + b"0," * 1000 + b"0]"))
    fetcher = HttpFeedFetcher(client, max_bytes=1024, sleep=lambda _: None)

    with pytest.raises(FeedFormatError, match="over 1024"):
        fetcher.fetch("stable", server.url("/feed"), None)


# -- other URLs ------------------------------------------------------------------------------


def test_a_file_url_is_read_and_hashed(tmp_path: Path, fetcher: HttpFeedFetcher) -> None:
    feed = tmp_path / "mirror dir" / "releases-stable.json"
    feed.parent.mkdir()
    feed.write_bytes(BODY)
    url = feed.as_uri()

    first = fetcher.fetch("stable", url, None)
    second = fetcher.fetch("stable", url, first.validators)

    assert first == FetchedBody(BODY, Validators(body_sha256=sha(BODY)), requests=0)
    assert second == Unchanged(Validators(body_sha256=sha(BODY)), requests=0)


def test_a_missing_file_is_rejected(tmp_path: Path, fetcher: HttpFeedFetcher) -> None:
    missing = tmp_path / "releases-stable.json"

    with pytest.raises(FeedRejectedError, match=f"file not found: {missing}"):
        fetcher.fetch("stable", missing.as_uri(), None)


def test_an_unsupported_scheme_is_rejected(fetcher: HttpFeedFetcher) -> None:
    with pytest.raises(FeedRejectedError, match="unsupported URL scheme 'ftp'"):
        fetcher.fetch("stable", "ftp://mirror.example/releases.json", None)


def test_retries_are_bounded(client: httpx.Client) -> None:
    with pytest.raises(ValueError, match="retries must be between 0 and 10"):
        HttpFeedFetcher(client, retries=50)
