"""Read a feed URL over HTTP(S) or from a local file: the real ``FeedFetcher`` adapter.

Why it exists: feeds are polled often and change rarely, upstreams redirect and
fail in the usual ways, and air-gapped users mirror them to disk. This adapter sends
conditional requests when validators were seen, falls back to the body hash when a server
sends none, retries a few transient failures of ONE poll (the shared bounded policy of
``edge.retry``, with an injected ``sleep``), bounds each fetch by an overall deadline
(httpx's timeouts are per read, so a server trickling bytes would otherwise hold a poll
forever), and turns every transport problem into the domain's error tree with a one-line
message. No ``httpx`` exception, nor
any other non-releasebot exception of the transport or the file system, escapes it.

Deliberately not here: parsing (``sources/flatcar.py``, ``sources/nvidia.py``), retries
across poll cycles (the service decides from the error's class), remembering validators
(the store), and settings (the caller passes a ready ``httpx.Client`` and plain values).
"""

from __future__ import annotations

import hashlib
import ssl
import time
from collections.abc import Callable
from contextlib import nullcontext
from datetime import timedelta
from pathlib import Path
from urllib.parse import SplitResult, unquote, urlsplit

import httpx

from releasebot.domain.ports import FetchedBody, FetchResult, Unchanged
from releasebot.domain.shared.errors import (
    FeedFormatError,
    FeedRejectedError,
    FeedUnavailableError,
)
from releasebot.domain.targets.models import Validators
from releasebot.edge.parse import ValueRefusedError, parse_content_length
from releasebot.edge.redirects import REDIRECT_CODES, RedirectPolicy, RedirectRefusedError
from releasebot.edge.retry import (
    RetryPolicy,
    Sleep,
    TransientFailure,
    call_with_retries,
    parse_retry_after,
    real_sleep,
)
from releasebot.edge.stop import Halt, Stopped
from releasebot.edge.text import one_line
from releasebot.sources._file import read_regular_file
from releasebot.sources._json import looks_like_html
from releasebot.sources._watchdog import Watchdog

DEFAULT_MAX_BYTES = 64 * 1024 * 1024
"""Largest body accepted. The biggest real feed (beta) is ~1.1 MB; 64 MiB leaves decades of
growth while stopping a runaway or decompression-bomb response from filling memory."""


MAX_REDIRECTS = 5
"""Redirect hops ``make_http_client`` follows (the fetcher follows its own, by
``edge.redirects``, at most as many): old Flatcar hosts redirect once or twice."""

DEFAULT_DEADLINE = timedelta(minutes=2)
"""Longest one ``fetch`` may take, retries included. The biggest feed (~1.1 MB) arrives in
seconds even on a slow link; two minutes bounds a poll held open by a trickling server."""


def make_http_client(
    timeout: timedelta, user_agent: str, verify: bool | str = True
) -> httpx.Client:
    """An ``httpx.Client`` fit for polling feeds.

    ``verify`` is ``True`` (system CAs), ``False`` (no TLS check: test mirrors only) or the
    path of a CA bundle for a private mirror.

    Raises ``ValueError`` with a one-line message (the config layer reports it against the
    setting) for a user agent that is not printable ASCII (HTTP headers are ASCII: httpx
    would fail every request with ``UnicodeEncodeError``) or a CA bundle it cannot load.
    """
    if not (user_agent.isascii() and user_agent.isprintable()):
        raise ValueError(f"user agent must be printable ASCII, got {one_line(repr(user_agent))}")
    # httpx 0.28 deprecates a path in ``verify``; an SSL context is the supported spelling.
    tls: bool | ssl.SSLContext = verify if isinstance(verify, bool) else _ca_context(verify)
    return httpx.Client(
        timeout=httpx.Timeout(timeout.total_seconds()),
        headers={"User-Agent": user_agent, "Accept": "application/json"},
        verify=tls,
        follow_redirects=True,
        max_redirects=MAX_REDIRECTS,
    )


def _ca_context(cafile: str) -> ssl.SSLContext:
    try:
        return ssl.create_default_context(cafile=cafile)
    except ssl.SSLError as exc:
        # e.g. "[X509: NO_CERTIFICATE_OR_CRL_FOUND] no certificate or crl found (_ssl.c:4154)"
        raise ValueError(
            f"cannot load CA bundle {one_line(repr(cafile))}: {one_line(exc)} "
            "(is it PEM certificates?)"
        ) from exc
    except OSError as exc:
        raise ValueError(
            f"cannot load CA bundle {one_line(repr(cafile))}: {exc.strerror or one_line(exc)}"
        ) from exc


class HttpFeedFetcher:
    """``FeedFetcher`` on an injected ``httpx.Client`` (``file://`` URLs are read from disk)."""

    def __init__(
        self,
        client: httpx.Client,
        *,
        max_bytes: int = DEFAULT_MAX_BYTES,
        retries: int = RetryPolicy.retries,
        sleep: Sleep = real_sleep,
        backoff: timedelta = RetryPolicy.backoff,
        max_backoff: timedelta = RetryPolicy.max_backoff,
        deadline: timedelta = DEFAULT_DEADLINE,
        redirects: Callable[[str], RedirectPolicy] = RedirectPolicy,
        halt: Halt | None = None,
    ) -> None:
        """``retries`` extra attempts follow a transient failure, after ``backoff`` doubled
        per attempt up to ``max_backoff`` (a Retry-After up to ``max_backoff`` wins).
        ``redirects`` makes the redirect policy of one configured URL (tests pass one with
        their own resolver).
        ``deadline`` bounds one ``fetch`` as a whole, retries and their waits included.
        ``halt``: the process's shutdown; once set, a fetch raises ``Stopped`` (a request
        in flight has its connection shut down, a retry pause ends; give ``halt.sleep``
        as ``sleep``), and nothing about the feed is reported."""
        if deadline <= timedelta(0):
            raise ValueError(f"deadline must be positive, got {deadline}")
        self._client = client
        self._max_bytes = max_bytes
        self._policy = RetryPolicy(retries=retries, backoff=backoff, max_backoff=max_backoff)
        self._sleep = sleep
        self._deadline = deadline
        self._redirects = redirects
        self._halt = halt

    def fetch(self, feed: str, url: str, validators: Validators | None) -> FetchResult:
        old = validators or Validators()
        parts = _split(url)
        if parts is None:
            raise FeedRejectedError(feed, f"invalid URL {_safe(url)}")
        scheme = parts.scheme.lower()
        if scheme == "file":
            return self._read_file(feed, parts, old)
        if scheme not in ("http", "https"):
            raise FeedRejectedError(
                feed, f"unsupported URL scheme {one_line(repr(scheme))} in {_safe(url)}"
            )
        if self._halt is not None:
            self._halt.check()
        ends = time.monotonic() + self._deadline.total_seconds()
        # One connection per request, closed after it (HTTP/1.1 "Connection: close"): feeds
        # are polled minutes apart, so keep-alive saves nothing, and the deadline's watchdog
        # must only ever shut down a connection that this request opened (see Watchdog).
        headers: dict[str, str] = {"Connection": "close"}
        if old.etag and _sendable(old.etag):
            headers["If-None-Match"] = old.etag
        if old.last_modified and _sendable(old.last_modified):
            headers["If-Modified-Since"] = old.last_modified
        requests = 0

        def attempt() -> tuple[int, httpx.Headers, bytes]:
            nonlocal requests
            try:
                status, answer, body, hops = self._get(feed, url, headers, ends)
            except FeedUnavailableError as exc:
                requests += 1
                raise TransientFailure(exc.problem) from exc.__cause__
            requests += hops
            failure = self._answer_error(feed, url, status, answer)
            if failure is not None:
                raise failure
            return status, answer, body

        def give_up(problem: str, failure: TransientFailure) -> Exception:
            # A wait the server asked for (too long to sleep here) travels on to the service.
            wait = {"retry_after": failure.wait} if failure.wait is not None else {}
            return FeedUnavailableError(feed, problem, **wait)

        status, answer, body = call_with_retries(
            attempt, self._policy, self._sleep, give_up=give_up, deadline=ends
        )
        new = Validators(etag=answer.get("ETag"), last_modified=answer.get("Last-Modified"))
        if status == 304:
            if not headers.keys() & {"If-None-Match", "If-Modified-Since"}:
                # 304 answers a conditional request only (RFC 9110 15.4.5): asked without
                # validators, it says nothing about the feed, least of all "unchanged".
                raise FeedFormatError(
                    feed,
                    "answered 304 Not Modified to a request without validators "
                    "(a broken cache or proxy in front of the feed?)",
                )
            return Unchanged(
                Validators(
                    etag=new.etag or old.etag,
                    last_modified=new.last_modified or old.last_modified,
                    body_sha256=old.body_sha256,
                ),
                requests=requests,
            )
        _check_body(feed, body, answer.get("Content-Type", ""))
        sha = hashlib.sha256(body).hexdigest()
        fresh = Validators(new.etag, new.last_modified, sha)
        if sha == old.body_sha256:
            return Unchanged(fresh, requests=requests)
        return FetchedBody(body, fresh, requests=requests)

    def _get(
        self, feed: str, url: str, headers: dict[str, str], ends: float
    ) -> tuple[int, httpx.Headers, bytes, int]:
        """One GET with redirects: status, headers, body (empty unless 2xx) and hop count.

        Raises ``FeedUnavailableError`` for what a retry may fix, other feed errors otherwise.
        """
        try:
            with (
                Watchdog(ends - time.monotonic()) as watchdog,
                self._halt.hook(watchdog.stop) if self._halt is not None else nullcontext(),
            ):
                try:
                    return self._stream(feed, url, headers, ends, watchdog)
                except (httpx.HTTPError, httpx.StreamError, OSError) as exc:
                    if watchdog.stopped:
                        raise Stopped from exc  # the process shuts down: not the feed's fault
                    if watchdog.fired or time.monotonic() >= ends:
                        raise self._too_long(feed) from exc
                    raise
        except httpx.TimeoutException as exc:
            raise FeedUnavailableError(feed, f"timed out after {self._timeout(exc)}") from exc
        except httpx.TooManyRedirects as exc:
            raise FeedRejectedError(
                feed, f"too many redirects from {_safe(url)} (a loop?) — check the feed URL"
            ) from exc
        except httpx.RemoteProtocolError as exc:
            if "location header" not in str(exc).lower():
                raise FeedUnavailableError(feed, f"connection failed: {one_line(exc)}") from exc
            # httpx reads every Location, even of a redirect it does not follow
            raise FeedRejectedError(
                feed, f"refused a redirect to a Location that is not a URL from {_safe(url)}"
            ) from None
        except (httpx.ConnectError, httpx.ProxyError) as exc:
            raise FeedUnavailableError(feed, f"unreachable: {_safe(url)}: {one_line(exc)}") from exc
        except (httpx.UnsupportedProtocol, httpx.InvalidURL) as exc:
            raise FeedRejectedError(feed, f"invalid URL {_safe(url)}: {one_line(exc)}") from exc
        except httpx.LocalProtocolError as exc:
            raise FeedRejectedError(feed, f"could not send the request: {one_line(exc)}") from exc
        except httpx.DecodingError as exc:
            raise FeedFormatError(feed, f"could not decode the body: {one_line(exc)}") from exc
        except (httpx.HTTPError, httpx.StreamError, OSError) as exc:
            # Dropped connections, a body cut short of its Content-Length, protocol noise.
            raise FeedUnavailableError(feed, f"connection failed: {one_line(exc)}") from exc
        except ValueError as exc:
            # Raised while building the request, not wrapped by httpx: a host the IDNA codec
            # refuses ("a..b", a 300-character label, "xn--a"). UnicodeError is a ValueError.
            raise FeedRejectedError(
                feed, f"cannot send a request to {_safe(url)}: {one_line(exc)}"
            ) from exc

    def _stream(
        self, feed: str, url: str, headers: dict[str, str], ends: float, watchdog: Watchdog
    ) -> tuple[int, httpx.Headers, bytes, int]:
        # Redirects are followed here, one hop at a time, each judged by the one redirect
        # policy before it is asked (never by the client, whatever it was built with).
        policy = self._redirects(url)
        origin = url
        hops = 0
        while True:
            hops += 1
            with self._client.stream(
                "GET",
                url,
                headers=headers,
                follow_redirects=False,
                extensions={"trace": watchdog.trace},
            ) as resp:
                if resp.status_code in REDIRECT_CODES and "Location" in resp.headers:
                    try:
                        url = policy.follow(url, resp.headers["Location"])
                    except RedirectRefusedError as exc:
                        raise FeedRejectedError(
                            feed, f"{exc} from {_safe(origin)} — check the feed URL"
                        ) from None
                    continue
                body = b""
                if 200 <= resp.status_code < 300:
                    body = self._read_body(feed, resp, ends)
                return resp.status_code, resp.headers, body, hops

    def _too_long(self, feed: str) -> FeedUnavailableError:
        return FeedUnavailableError(feed, f"took longer than {self._deadline.total_seconds():g}s")

    def _read_body(self, feed: str, response: httpx.Response, ends: float) -> bytes:
        try:
            declared = parse_content_length(response.headers.get("Content-Length"))
        except ValueRefusedError:
            declared = None  # a malformed length: the read below is bounded anyway
        if declared is not None and declared > self._max_bytes:
            raise FeedFormatError(feed, f"body of {declared} bytes is over {self._max_bytes}")
        chunks: list[bytes] = []
        size = 0
        for chunk in response.iter_bytes():
            # Each read is bounded by the client's timeout; this bounds them all together.
            if time.monotonic() >= ends:
                raise self._too_long(feed)
            size += len(chunk)
            if size > self._max_bytes:
                raise FeedFormatError(feed, f"body is over {self._max_bytes} bytes")
            chunks.append(chunk)
        return b"".join(chunks)

    def _answer_error(
        self, feed: str, url: str, status: int, headers: httpx.Headers
    ) -> TransientFailure | None:
        """``None`` for a usable answer; a failure another attempt may mend (with the
        server's Retry-After); or raise a permanent error."""
        if 200 <= status < 300 or status == 304:
            return None
        reason = _reason(status)
        if status in (408, 429) or 500 <= status < 600:
            problem = "rate limited (HTTP 429)" if status == 429 else f"server error {status}"
            wait = parse_retry_after(headers.get("Retry-After"))
            return TransientFailure(f"{problem} {reason}".rstrip(), wait)
        if 300 <= status < 400:
            raise FeedRejectedError(
                feed, f"HTTP {status} {reason} without a usable Location from {_safe(url)}"
            )
        raise FeedRejectedError(feed, f"HTTP {status} {reason} — check the feed URL")

    def _timeout(self, exc: httpx.TimeoutException) -> str:
        timeout = self._client.timeout
        seconds = timeout.connect if isinstance(exc, httpx.ConnectTimeout) else timeout.read
        return f"{seconds:g}s" if seconds is not None else "the client's timeout"

    def _read_file(self, feed: str, parts: SplitResult, old: Validators) -> FetchResult:
        if parts.netloc not in ("", "localhost"):
            raise FeedRejectedError(
                feed, f"file URL with a host is not supported: {_safe(parts.geturl())}"
            )
        path = Path(unquote(parts.path))
        body = read_regular_file(feed, path, _escaped(path), self._max_bytes)
        _check_body(feed, body, "")
        sha = hashlib.sha256(body).hexdigest()
        if sha == old.body_sha256:
            return Unchanged(Validators(body_sha256=sha), requests=0)
        return FetchedBody(body, Validators(body_sha256=sha), requests=0)


def _check_body(feed: str, body: bytes, content_type: str) -> None:
    if "html" in content_type.lower() or looks_like_html(body):
        shown = f" (Content-Type {one_line(content_type)})" if content_type else ""
        raise FeedFormatError(
            feed, f"returned HTML, not JSON{shown} — an error or login page, or the wrong URL?"
        )


def _sendable(value: str) -> bool:
    """A stored validator goes back into a header only if it is one line of printable ASCII
    (a mangled one would otherwise fail every poll before it reached the server)."""
    return value.isascii() and value.isprintable()


def _reason(status: int) -> str:
    return httpx.codes.get_reason_phrase(status)


def _split(url: str) -> SplitResult | None:
    """``urlsplit``, or ``None`` for a URL it refuses (e.g. ``http://[::1``)."""
    try:
        return urlsplit(url)
    except ValueError:
        return None


def _safe(url: str) -> str:
    """The URL without user info, query or fragment, which may carry credentials."""
    parts = _split(url)
    if parts is None:
        return "(a URL that does not parse)"  # its parts cannot be told apart: show none
    host = parts.netloc.rpartition("@")[2]
    return _escaped(f"{parts.scheme}://{host}{parts.path}")


def _escaped(value: object) -> str:
    """A configured URL or path for a message: control characters shown escaped
    (``\\x00``), not dropped, so the value shown is the value that was given."""
    text = "".join(c if c.isprintable() else ascii(c)[1:-1] for c in str(value)[:800])
    return one_line(text)
