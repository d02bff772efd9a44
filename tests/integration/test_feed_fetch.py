"""``HttpFeedFetcher`` against a real HTTP server on 127.0.0.1 (``tests/support/feedserver.py``).

Covers conditional requests (ETag, Last-Modified, 304), the body-hash fallback for servers
without validators, redirects (followed, counted, looping), 4xx, retried 5xx/429 with the
injected sleep, refused connections, timeouts, the overall deadline (a server that stalls
or trickles), HTML and truncated bodies, the size limit, ``file://`` feeds (and paths that
are not regular files), odd URLs and client settings turned into one-line errors, and that
no URL credentials leak into messages. Backoff sleeps are recorded, never slept.
"""

from __future__ import annotations

import hashlib
import os
import socket
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import httpx
import pytest

from releasebot.domain.ports import FetchedBody, Unchanged
from releasebot.domain.shared.errors import (
    FeedFormatError,
    FeedRejectedError,
    FeedUnavailableError,
    TemporaryError,
)
from releasebot.domain.targets.models import Validators
from releasebot.sources.fetch import HttpFeedFetcher, make_http_client
from releasebot.sources.flatcar import parse_flatcar_feed
from tests.support.feedserver import FeedServer, Reply

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
    assert conditional.headers["connection"] == "close"  # the deadline's watchdog needs it


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

    with pytest.raises(FeedRejectedError, match=r"too many redirects .* from http://127\.0\.0\.1"):
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


# -- the overall deadline ------------------------------------------------------------------
# httpx's timeout applies per read: a server sending a byte every so often never hits it.


@pytest.fixture
def patient_client() -> Iterator[httpx.Client]:
    """A client whose per-read timeout (30 s) never fires within these tests."""
    with make_http_client(timedelta(seconds=30), "releasebot-test") as patient:
        yield patient


def test_a_trickled_body_is_cut_off_at_the_deadline(
    server: FeedServer, patient_client: httpx.Client, sleeps: list[timedelta]
) -> None:
    # 0.05 s per byte: each read is quick, the whole body would take 20 s.
    server.route("/feed", Reply(200, {}, b"{" + b" " * 398 + b"}", trickle=0.05))
    fetcher = HttpFeedFetcher(patient_client, sleep=sleeps.append, deadline=timedelta(seconds=0.3))
    started = time.monotonic()

    with pytest.raises(FeedUnavailableError) as caught:
        fetcher.fetch("stable", server.url("/feed"), None)

    assert str(caught.value) == "feed stable: took longer than 0.3s"
    assert time.monotonic() - started < 2
    assert sleeps == []  # no time is left for a retry
    assert len(server.requests) == 1


def test_a_server_that_withholds_its_headers_is_cut_off_at_the_deadline(
    server: FeedServer, patient_client: httpx.Client, sleeps: list[timedelta]
) -> None:
    # While httpx waits for the status line none of the fetcher's code runs: the watchdog
    # must wake the read.
    server.route("/feed", Reply(200, {}, BODY, delay=10))
    fetcher = HttpFeedFetcher(patient_client, sleep=sleeps.append, deadline=timedelta(seconds=0.3))
    started = time.monotonic()

    with pytest.raises(FeedUnavailableError) as caught:
        fetcher.fetch("stable", server.url("/feed"), None)

    assert str(caught.value) == "feed stable: took longer than 0.3s"
    assert time.monotonic() - started < 2
    assert sleeps == []


def test_no_retry_is_waited_for_past_the_deadline(
    server: FeedServer, client: httpx.Client, sleeps: list[timedelta]
) -> None:
    server.route("/feed", Reply(503))
    fetcher = HttpFeedFetcher(
        client, retries=2, sleep=sleeps.append, deadline=timedelta(seconds=0.5)
    )

    with pytest.raises(FeedUnavailableError, match="server error 503"):
        fetcher.fetch("stable", server.url("/feed"), None)

    assert sleeps == []  # the 1 s backoff would outlast the 0.5 s deadline
    assert len(server.requests) == 1


def test_a_fast_answer_is_not_affected_by_the_deadline(
    server: FeedServer, client: httpx.Client
) -> None:
    server.route("/feed", FeedServer.static(BODY))
    fetcher = HttpFeedFetcher(client, deadline=timedelta(seconds=0.3))

    results = [fetcher.fetch("stable", server.url("/feed"), None) for _ in range(3)]

    assert all(isinstance(result, FetchedBody) for result in results)
    assert len(server.requests) == 3


def test_the_deadline_must_be_positive(client: httpx.Client) -> None:
    with pytest.raises(ValueError, match="deadline must be positive"):
        HttpFeedFetcher(client, deadline=timedelta(0))


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


@pytest.mark.timeout(10)  # a regression would block on the FIFO: fail, do not hang
@pytest.mark.parametrize("kind", ["directory", "character device", "FIFO", "socket"])
def test_a_file_url_to_anything_but_a_regular_file_is_rejected(
    tmp_path: Path, fetcher: HttpFeedFetcher, kind: str
) -> None:
    # /dev/zero and /dev/null report size 0, so a size check alone never stops the read.
    target = tmp_path / "releases-stable.json"
    listener = None
    if kind == "directory":
        target.mkdir()
    elif kind == "character device":
        target = Path("/dev/null")
    elif kind == "FIFO":
        os.mkfifo(target)
    else:
        listener = socket.socket(socket.AF_UNIX)
        listener.bind(str(target))
    try:
        with pytest.raises(FeedRejectedError) as caught:
            fetcher.fetch("stable", target.as_uri(), None)
    finally:
        if listener is not None:
            listener.close()

    assert str(caught.value) == (
        f"feed stable: {target} is not a regular file (a {kind}): a file URL must name a feed file"
    )


def test_a_file_that_reads_longer_than_its_size_is_cut_at_the_limit(
    client: httpx.Client,
) -> None:
    # Files in /proc are regular files of size 0 with content: only the read bound holds.
    status = Path("/proc/self/status")
    if not status.is_file() or status.stat().st_size != 0:
        pytest.skip("needs Linux /proc")
    fetcher = HttpFeedFetcher(client, max_bytes=100)

    with pytest.raises(FeedFormatError, match="/proc/self/status is over 100 bytes"):
        fetcher.fetch("stable", status.as_uri(), None)


def test_a_file_over_the_limit_is_refused(tmp_path: Path, client: httpx.Client) -> None:
    feed = tmp_path / "releases-stable.json"
    feed.write_bytes(b"[" + b"0," * 1000 + b"0]")

    with pytest.raises(FeedFormatError, match=r"releases-stable\.json is over 1024 bytes"):
        HttpFeedFetcher(client, max_bytes=1024).fetch("stable", feed.as_uri(), None)


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        pytest.param("/tmp/feed%00.json", "invalid file path /tmp/feed\\x00.json:", id="nul"),
        pytest.param("/" + "a" * 5000, "invalid file path /aaaa", id="name-too-long"),
    ],
)
def test_a_bad_file_path_is_a_one_line_rejection(
    fetcher: HttpFeedFetcher, path: str, expected: str
) -> None:
    with pytest.raises(FeedRejectedError) as caught:
        fetcher.fetch("stable", f"file://{path}", None)

    message = str(caught.value)
    assert expected in message
    assert message.isprintable()
    assert len(message) < 300


def test_an_unsupported_scheme_is_rejected(fetcher: HttpFeedFetcher) -> None:
    with pytest.raises(FeedRejectedError, match="unsupported URL scheme 'ftp'"):
        fetcher.fetch("stable", "ftp://mirror.example/releases.json", None)


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        pytest.param("http://[::1/feed.json", "invalid URL (a URL that does not parse)", id="ipv6"),
        pytest.param("http://a..b/feed.json", "cannot send a request to http://a..b/", id="idna"),
        pytest.param("http://xn--a.com/feed.json", "cannot send a request to", id="punycode"),
        pytest.param("http://" + "a" * 300 + ".test/", "cannot send a request to", id="label"),
        pytest.param("http://ex\u0000ample.test/", "invalid URL http://ex\\x00ample", id="nul"),
    ],
)
def test_an_odd_url_is_a_one_line_rejection(
    fetcher: HttpFeedFetcher, sleeps: list[timedelta], url: str, expected: str
) -> None:
    with pytest.raises(FeedRejectedError) as caught:
        fetcher.fetch("stable", url, None)

    message = str(caught.value)
    assert expected in message
    assert message.isprintable()
    assert len(message) < 450  # the URL and the third-party text are trimmed to 200 each
    assert sleeps == []


@pytest.mark.parametrize("user_agent", ["releasebot/1.0 (café)", "releasebot\r\nX-Evil: 1", ""])
def test_make_http_client_refuses_a_user_agent_that_is_not_printable_ascii(
    user_agent: str,
) -> None:
    if not user_agent:  # the empty string is printable ASCII: allowed
        make_http_client(timedelta(seconds=1), user_agent).close()
        return
    with pytest.raises(ValueError, match="user agent must be printable ASCII") as caught:
        make_http_client(timedelta(seconds=1), user_agent)

    assert "\n" not in str(caught.value)


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        pytest.param(b"not a certificate\n", "no certificate or crl found", id="not-pem"),
        pytest.param(b"", "no certificate or crl found", id="empty"),
        pytest.param(None, "No such file or directory", id="missing"),
    ],
)
def test_make_http_client_explains_a_bad_ca_bundle_in_one_line(
    tmp_path: Path, content: bytes | None, expected: str
) -> None:
    bundle = tmp_path / "mirror-ca.pem"
    if content is not None:
        bundle.write_bytes(content)

    with pytest.raises(ValueError, match="cannot load CA bundle") as caught:
        make_http_client(timedelta(seconds=1), "releasebot-test", verify=str(bundle))

    message = str(caught.value)
    assert message.startswith(f"cannot load CA bundle '{bundle}': ")
    assert expected in message
    assert "\n" not in message


def test_retries_are_bounded(client: httpx.Client) -> None:
    with pytest.raises(ValueError, match="retries must be between 0 and 10"):
        HttpFeedFetcher(client, retries=50)
