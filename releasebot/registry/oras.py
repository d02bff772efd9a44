"""The real ``Registry`` adapter: one repository in one OCI registry, through oras-py.

Why it exists: releasebot asks the registry which tags exist and with which digest (once
per cycle, for every target), reads image labels to confirm a build, and publishes the OCI
index of a multi-arch tag. It speaks the distribution API directly for those four questions:
manifest HEAD with every manifest media type in ``Accept``, paginated ``tags/list``, a
manifest and config-blob GET, and a manifest PUT.

What it takes from oras-py: its ``WWW-Authenticate`` parser. The ``requests`` session is
set up as ``oras.provider.Registry`` sets its own up (cookies refused, which Harbor needs),
without importing that module (``_registry_session``); the ``insecure`` / CA /
``tls_verify`` settings go with every request. What it deliberately does NOT use:
``Registry.do_request`` and the auth backends. ``do_request`` sleeps about two minutes on
a 5xx or a refused login, has no timeout, and raises a bare ``ValueError``; its token
backend cannot answer a ``Basic`` challenge and reports a token service that is down the
same way as a wrong password. So the request loop here is its own: a timeout on every
request, ``retries`` bounded attempts with capped backoff (the shared policy of
``edge.retry``) through an injected ``sleep``, ``Basic`` and ``Bearer`` (token service)
challenges both answered, and every failure translated into the domain's error tree. No
``requests`` or ``oras`` exception escapes. Every name put into a URL matches the OCI grammar
(``domain.shared.references``): ``request`` takes only the distribution API's routes with such a
name, absolute URLs only inside this repository, and ``tags`` skips listed names outside it
(one warning line), so a hostile listing cannot aim releasebot's credentials elsewhere.

Credentials come from a ``RegistryCredentials`` (``registry/credentials.py``): a static
password, or a cloud token that is renewed before it expires and, when the registry refuses
it anyway (a 401 or 403), renewed once and the request sent again.

Not here: pushing images (Kaniko does), deleting tags, Docker credential helpers
(``credsStore``/``credHelpers``: the cloud providers replace them) and ``identitytoken``
refresh tokens (the Secret Kaniko mounts carries ``auth`` or ``username``/``password``),
and Docker Hub's host aliases.
"""

from __future__ import annotations

import hashlib
import logging
import re
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from http.cookiejar import DefaultCookiePolicy
from typing import Any, NoReturn, cast
from urllib.parse import urljoin, urlsplit

import oras.auth.utils
import requests
import urllib3
from requests.structures import CaseInsensitiveDict
from requests.utils import parse_header_links

from releasebot.domain.shared.errors import (
    RegistryAuthError,
    RegistryError,
    RegistryUnavailableError,
)
from releasebot.domain.shared.references import (
    is_digest,
    is_reference,
    is_repository_path,
    is_sha256_digest,
    is_tag,
    shown,
)
from releasebot.domain.shared.versions import Arch
from releasebot.edge.json import JsonLimits, JsonRefusedError, decode_json
from releasebot.edge.parse import ValueRefusedError, check_regular_file
from releasebot.edge.redirects import RedirectPolicy, RedirectRefusedError
from releasebot.edge.retry import (
    RetryPolicy,
    Sleep,
    TransientFailure,
    call_with_retries,
    parse_retry_after,
    real_sleep,
)
from releasebot.edge.text import one_line
from releasebot.registry import (
    DEFAULT_TIMEOUT,
    IMAGE_TYPES,
    INDEX_TYPES,
    MANIFEST_TYPES,
    OCI_INDEX,
    OCI_MANIFEST,
    IndexEntry,
    common_labels,
    render_index,
    sha256_digest,
)
from releasebot.registry.credentials import RegistryCredentials, StaticCredentials
from releasebot.registry.dockerconfig import encode_basic, read_docker_config

log = logging.getLogger(__name__)

MAX_BODY_BYTES = 4 * 1024 * 1024
"""Largest manifest, config blob, tag page or token answer read: distribution's own manifest
limit. Anything bigger is not what releasebot asked for."""


MAX_PAGES = 10_000
"""Tag pages followed at most (10 million tags at the default page size): a registry whose
``Link`` header never ends must not hold a cycle forever."""

DEFAULT_PAGE_SIZE = 1000
"""Tags asked per ``tags/list`` page. 1,000 keeps a big repository to a few requests and is
the largest page most registries (distribution 3, Harbor, GHCR) serve."""

_ACCEPT = ", ".join(MANIFEST_TYPES)
_IMAGE_ACCEPT = ", ".join(sorted(IMAGE_TYPES))
_SSL_REASON = re.compile(r"\[SSL: [A-Z_]+\][^'\"()]*")
_OS_REASON = re.compile(r"\[Errno -?\d+\][^'\"()]*")


@dataclass(frozen=True)
class RegistryAnswer:
    """A registry's answer: status, reason, headers (case-insensitive), body (bounded)."""

    status: int
    reason: str
    headers: CaseInsensitiveDict[str]
    body: bytes


@dataclass(frozen=True)
class _Manifest:
    media_type: str
    body: bytes
    document: dict[str, Any]


class OrasRegistry:
    """``Registry`` on a real OCI registry (``repository`` is ``host[:port]/path``).

    ``insecure`` speaks plain HTTP; ``ca_file`` trusts a private CA; ``tls_verify=False``
    accepts any certificate (and wins over ``ca_file``). Credentials come from
    ``username``/``password`` or, failing those, from ``docker_config``'s entry for the
    host; none means anonymous; ``credentials`` (a cloud token provider) wins over all
    three. ``retries`` extra attempts follow a transient failure,
    after ``backoff`` doubled per attempt up to ``max_backoff``.

    ``request_count`` counts every HTTP request sent (token requests and retries included).
    """

    def __init__(
        self,
        repository: str,
        *,
        insecure: bool = False,
        ca_file: str | None = None,
        tls_verify: bool = True,
        docker_config: str | None = None,
        username: str | None = None,
        password: str | None = None,
        credentials: RegistryCredentials | None = None,
        timeout: timedelta = DEFAULT_TIMEOUT,
        retries: int = RetryPolicy.retries,
        sleep: Sleep = real_sleep,
        backoff: timedelta = RetryPolicy.backoff,
        max_backoff: timedelta = RetryPolicy.max_backoff,
        page_size: int = DEFAULT_PAGE_SIZE,
        user_agent: str = "releasebot",
        redirects: Callable[[str], RedirectPolicy] = RedirectPolicy,
    ) -> None:
        host, _, name = repository.partition("/")
        if not host or not is_repository_path(name) or "://" in repository:
            raise ValueError(
                f"repository must be host[:port]/path (the path in the OCI name grammar), "
                f"got {shown(repository)}"
            )
        if timeout <= timedelta(0) or page_size < 1:
            raise ValueError("timeout and page_size must be positive")
        if ca_file is not None and tls_verify and not insecure:
            try:
                check_regular_file(ca_file)  # a FIFO is not "not found", nor read by requests
            except ValueRefusedError as error:
                raise RegistryError(f"registry {host}: CA file: {error}") from None
        self._repository = repository
        self._host = host
        self._base = f"{'http' if insecure else 'https'}://{host}/v2/{name}"
        self._verify: bool | str = (ca_file or True) if tls_verify else False
        self._session = _registry_session(verify=self._verify)
        self._timeout = timeout
        self._redirects = redirects
        # A registry is asked many times per cycle: a Retry-After beyond max_backoff is
        # waited for up to max_backoff rather than failing the whole cycle's check.
        self._policy = RetryPolicy(
            retries=retries, backoff=backoff, max_backoff=max_backoff, cap_long_waits=True
        )
        self._sleep = sleep
        self._page_size = page_size
        self._pages: dict[str, _KeptPage] = {}
        """The last tag walk's pages by URL: a page whose body is byte for byte the same
        is not decoded and checked again (a steady cycle lists every tag every time)."""
        self._user_agent = user_agent
        if credentials is not None:
            self._credentials: RegistryCredentials = credentials
        elif username is not None or password is not None:
            self._credentials = StaticCredentials(encode_basic(username or "", password or ""))
        elif docker_config is not None:
            self._credentials = StaticCredentials(read_docker_config(docker_config, host))
        else:
            self._credentials = StaticCredentials(None)
        self._sent = threading.local()
        """Per thread, the basic credentials last used to answer a challenge: what
        ``renew`` replaces when the registry refuses them."""
        self._auth_header: str | None = None
        """The last Authorization that worked, sent up front to save a 401 round trip."""
        self._lock = threading.Lock()
        self.request_count = 0

    def __repr__(self) -> str:
        return f"OrasRegistry({self._repository!r}, credentials={self._credentials.kind})"

    @property
    def repository(self) -> str:
        return self._repository

    @property
    def base_url(self) -> str:
        """``http(s)://host/v2/<name>``: where ``request`` sends relative paths."""
        return self._base

    # -- the Registry port -------------------------------------------------------------

    def close(self) -> None:
        """Close the HTTP connections."""
        self._session.close()

    def digest(self, tag: str) -> str | None:
        answer = self._call("HEAD", self._manifest_url(tag), {"Accept": _ACCEPT})
        if answer.status == 404:
            return None
        self._expect_ok(answer, f"manifest {tag}")
        digest = answer.headers.get("Docker-Content-Digest")
        if digest is None:
            # The header is only a SHOULD in the distribution spec: hash the body instead.
            manifest = self._get_manifest(tag, _ACCEPT)
            return None if manifest is None else sha256_digest(manifest.body)
        if not is_sha256_digest(digest):
            raise RegistryError(
                f"registry {self._host}: manifest {tag} has an odd digest {one_line(digest)!r}"
            )
        return digest

    def tags(self) -> set[str]:
        url: str | None = f"{self._base}/tags/list?n={self._page_size}"
        seen: set[str] = set()
        tags: set[str] = set()
        refused: list[str] = []
        pages: dict[str, _KeptPage] = {}
        while url is not None:
            if url in seen or len(seen) >= MAX_PAGES:
                raise RegistryError(f"registry {self._host}: tag pagination does not end")
            seen.add(url)
            answer = self._call("GET", url, {"Accept": "application/json"})
            if answer.status == 404 and len(seen) == 1 and _is_unknown_name(answer):
                return set()
            self._expect_ok(answer, "tag list")
            kept = self._tag_page(url, answer.body, pages)
            tags.update(kept.tags)
            refused.extend(kept.refused)
            # A page without tags ends the walk even if a Link follows (seen on some proxies).
            url = self._next_page(answer, url) if kept.tags else None
        self._pages = pages
        if refused:
            # Never a URL: a listed "../other/manifests/x" would be a request elsewhere.
            log.warning(
                "registry %s: skipped %d listed tag(s) outside the OCI tag grammar, e.g. %s",
                self._host,
                len(refused),
                shown(refused[0]),
            )
        tags.difference_update(refused)
        return tags

    def _tag_page(self, url: str, body: bytes, pages: dict[str, _KeptPage]) -> _KeptPage:
        """One tag page, decoded and checked, or as kept from the last walk if its body is
        the same (same SHA-256); noted in ``pages`` for the next walk."""
        digest = hashlib.sha256(body).digest()
        kept = self._pages.get(url)
        if kept is None or kept.sha256 != digest:
            page = tuple(_parse_tag_page(self._host, body))
            kept = _KeptPage(digest, page, tuple(tag for tag in page if not is_tag(tag)))
        pages[url] = kept
        return kept

    def labels(self, reference: str) -> dict[str, str]:
        """An image's config labels; for an index, its annotations (the labels all its
        images share when ``push_index`` wrote it). Never the first image's labels: which
        image is "first" in somebody else's index means nothing."""
        manifest = self._get_manifest(reference, _ACCEPT)
        if manifest is None:
            raise RegistryError(f"registry {self._host}: no manifest {reference}")
        if manifest.media_type in INDEX_TYPES:
            return _string_map(self._host, manifest.document.get("annotations"), "annotations")
        return self._config(reference, manifest)[1]

    def push_index(self, tag: str, manifests: Sequence[tuple[Arch, str]]) -> str:
        if not is_tag(tag):
            raise RegistryError(f"registry {self._host}: not an OCI tag: {shown(tag)}")
        entries: list[IndexEntry] = []
        label_sets: list[dict[str, str]] = []
        for arch, digest in manifests:
            manifest = self._get_manifest(digest, _IMAGE_ACCEPT)
            if manifest is None:
                raise RegistryError(f"registry {self._host}: no {arch} manifest {digest}")
            if manifest.media_type not in IMAGE_TYPES or sha256_digest(manifest.body) != digest:
                raise RegistryError(
                    f"registry {self._host}: {digest} is not the {arch} image manifest "
                    f"({one_line(manifest.media_type)})"
                )
            built_for, labels = self._config(digest, manifest)
            if built_for != arch.value:
                raise RegistryError(
                    f"registry {self._host}: {digest} is an image for {one_line(built_for)!r}, "
                    f"not {arch}"
                )
            entries.append(IndexEntry(arch, digest, manifest.media_type, len(manifest.body)))
            label_sets.append(labels)
        body = render_index(entries, common_labels(label_sets))
        expected = sha256_digest(body)
        answer = self._call("PUT", self._manifest_url(tag), {"Content-Type": OCI_INDEX}, body)
        self._expect_ok(answer, f"index {tag}")
        answered = answer.headers.get("Docker-Content-Digest")
        if answered is not None and answered != expected:
            raise RegistryError(
                f"registry {self._host}: stored index {tag} as {one_line(answered)}, "
                f"but the bytes sent hash to {expected}"
            )
        return expected

    def request(
        self, method: str, path: str, headers: Mapping[str, str], body: bytes | None = None
    ) -> RegistryAnswer:
        """One authenticated, bounded-retry request to ``/v2/<name>/<path>`` (or to an
        absolute URL on the same registry, e.g. an upload ``Location``). Any answer,
        404 included, is returned; transport failures raise the domain's registry errors.
        For adapters that speak more of the distribution API (``registry/artifacts.py``)."""
        if "://" in path:
            url = path
            self._check_same_repository(url, "an answer's URL")
        else:
            _check_path(self._host, path)
            url = f"{self._base}/{path}"
        return self._call(method, url, headers, body)

    def _check_same_repository(self, url: str, what: str) -> None:
        """``url`` (a ``Location``, a ``Link``) stays in this repository on this registry:
        the credentials are for it, and a path that climbs out (``..``, an encoded ``/``)
        would spend them elsewhere."""
        here, there = urlsplit(self._base), urlsplit(url)
        if (here.scheme, here.netloc) != (there.scheme, there.netloc):
            raise RegistryError(
                f"registry {self._host}: refusing to send credentials to {one_line(there.netloc)}"
            )
        path = there.path
        segments = path.split("/")
        if (
            not path.startswith(here.path + "/")
            or any(segment in (".", "..") for segment in segments)
            or "%" in path
            or "\\" in path
        ):
            raise RegistryError(
                f"registry {self._host}: {what} leaves the repository: {shown(path)}"
            )

    # -- reading manifests and configs -------------------------------------------------

    def _manifest_url(self, reference: str) -> str:
        if not is_reference(reference):
            raise RegistryError(
                f"registry {self._host}: not an OCI tag or digest: {shown(reference)}"
            )
        return f"{self._base}/manifests/{reference}"

    def _get_manifest(self, reference: str, accept: str) -> _Manifest | None:
        answer = self._call("GET", self._manifest_url(reference), {"Accept": accept})
        if answer.status == 404:
            return None
        self._expect_ok(answer, f"manifest {reference}")
        document = _json_object(self._host, answer.body, f"manifest {reference}")
        media_type = answer.headers.get("Content-Type", "").split(";")[0].strip()
        if media_type not in IMAGE_TYPES | INDEX_TYPES:
            # Some registries answer application/json: the document then says what it is.
            declared = document.get("mediaType")
            if isinstance(declared, str) and declared:
                media_type = declared
            else:
                media_type = OCI_INDEX if "manifests" in document else OCI_MANIFEST
        return _Manifest(media_type, answer.body, document)

    def _config(self, reference: str, manifest: _Manifest) -> tuple[str, dict[str, str]]:
        """The image's architecture and labels, from its config blob."""
        config = manifest.document.get("config")
        digest = config.get("digest") if isinstance(config, dict) else None
        if not isinstance(digest, str) or not is_sha256_digest(digest):
            raise RegistryError(
                f"registry {self._host}: manifest {reference} names no config blob "
                f"({one_line(manifest.media_type)})"
            )
        answer = self._call("GET", f"{self._base}/blobs/{digest}", {})
        if answer.status == 404:
            raise RegistryError(f"registry {self._host}: config blob {digest} is missing")
        self._expect_ok(answer, f"config blob {digest}")
        if sha256_digest(answer.body) != digest:
            raise RegistryError(f"registry {self._host}: config blob {digest} is corrupt")
        document = _json_object(self._host, answer.body, f"config blob {digest}")
        architecture = document.get("architecture")
        inner = document.get("config")
        labels = inner.get("Labels") if isinstance(inner, dict) else None
        return (
            architecture if isinstance(architecture, str) else "",
            _string_map(self._host, labels, "config.Labels"),
        )

    def _next_page(self, answer: RegistryAnswer, url: str) -> str | None:
        for link in parse_header_links(answer.headers.get("Link", "")):
            if link.get("rel") == "next" and link.get("url"):
                target = urljoin(url, link["url"])
                here, there = urlsplit(url), urlsplit(target)
                if (here.scheme, here.netloc) != (there.scheme, there.netloc):
                    # Following it would hand our credentials to another host.
                    raise RegistryError(
                        f"registry {self._host}: tag list links to another host "
                        f"({one_line(there.netloc)})"
                    )
                if there.path != here.path:  # another repository's tags, or no tag list
                    raise RegistryError(
                        f"registry {self._host}: tag list links elsewhere: {shown(there.path)}"
                    )
                return target
        return None

    # -- requests: retries, auth, translation ------------------------------------------

    def _call(
        self, method: str, url: str, headers: Mapping[str, str], body: bytes | None = None
    ) -> RegistryAnswer:
        """One logical request: authenticated, retried while transient; any other answer
        (including 404) is returned. Raises the domain's registry errors."""

        def attempt() -> RegistryAnswer:
            answer = self._authorized(method, url, headers, body)
            _raise_if_transient(answer)
            return answer

        def give_up(problem: str, failure: TransientFailure) -> Exception:
            return RegistryUnavailableError(f"registry {self._host}: {problem}")

        def retrying(failure: TransientFailure, pause: timedelta) -> None:
            log.warning(
                "registry %s: %s; retrying in %gs",
                self._host,
                failure.problem,
                pause.total_seconds(),
            )

        return call_with_retries(
            attempt, self._policy, self._sleep, give_up=give_up, on_retry=retrying
        )

    def _authorized(
        self, method: str, url: str, headers: Mapping[str, str], body: bytes | None
    ) -> RegistryAnswer:
        sent = self._auth_header
        answer = self._send(method, url, _with_auth(headers, sent), body)
        if answer.status not in (401, 403):
            return answer
        try:
            return self._answered(method, url, headers, body, answer, sent)
        except RegistryAuthError:
            # A cloud token may have been revoked or expired early (or the clocks disagree):
            # one new token and one more try; static credentials have nothing new to offer.
            sent_basic: str | None = getattr(self._sent, "basic", None)
            if sent_basic is None or self._credentials.renew(sent_basic) is None:
                raise
            log.info("registry %s: credentials refused; renewed them once", self._host)
            return self._answered(method, url, headers, body, answer, None)

    def _answered(
        self,
        method: str,
        url: str,
        headers: Mapping[str, str],
        body: bytes | None,
        challenged: RegistryAnswer,
        sent: str | None,
    ) -> RegistryAnswer:
        """The request sent again with what answers ``challenged``; raises
        ``RegistryAuthError`` when that is refused too."""
        fresh = self._answer_challenge(challenged, sent)
        answer = self._send(method, url, _with_auth(headers, fresh), body)
        if answer.status in (401, 403):
            self._auth_failed(answer.status, answer.reason)
        return answer

    def _current_basic(self) -> str | None:
        basic = self._credentials.basic()
        self._sent.basic = basic
        return basic

    def _answer_challenge(self, answer: RegistryAnswer, sent: str | None) -> str:
        """The Authorization that answers the registry's challenge, or raise."""
        challenge = answer.headers.get("WWW-Authenticate", "")
        scheme = challenge.split(" ", 1)[0].lower()
        if scheme == "basic":
            basic = self._current_basic()
            if basic is None:
                raise RegistryAuthError(
                    f"registry {self._host}: {answer.status} {answer.reason} and no "
                    "credentials are configured for it — set the docker config or a username"
                )
            header = f"Basic {basic}"
            if sent == header:
                self._auth_failed(answer.status, answer.reason)
        elif scheme == "bearer":
            parsed = oras.auth.utils.parse_auth_header(challenge)
            realm = cast(str | None, parsed.realm)
            service = cast(str | None, parsed.service)
            scope = cast(str | None, parsed.scope)
            if not realm:
                raise RegistryError(f"registry {self._host}: bearer challenge without a realm")
            header = f"Bearer {self._token(realm, service, scope)}"
        else:
            self._auth_failed(answer.status, answer.reason)
        self._auth_header = header
        return header

    def _token(self, realm: str, service: str | None, scope: str | None) -> str:
        """A token from the registry's token service (basic credentials if any, else anon)."""
        parts = urlsplit(realm)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise RegistryError(f"registry {self._host}: odd token realm {one_line(realm)!r}")
        params = {key: value for key, value in (("service", service), ("scope", scope)) if value}
        prepared = requests.Request("GET", realm, params=params).prepare()
        headers = {"Accept": "application/json"}
        basic = self._current_basic()
        if basic is not None:
            headers["Authorization"] = f"Basic {basic}"
        answer = self._send("GET", str(prepared.url), headers, None)
        if answer.status in (401, 403):
            raise RegistryAuthError(
                f"registry {self._host}: token service {parts.netloc} answered "
                f"{answer.status} {answer.reason} — {self._hint()}"
            )
        _raise_if_transient(answer)
        self._expect_ok(answer, "token")
        document = _json_object(self._host, answer.body, "token answer")
        token = document.get("token") or document.get("access_token")
        if not isinstance(token, str) or not token or not token.isprintable():
            raise RegistryError(f"registry {self._host}: token service sent no usable token")
        return token

    def _auth_failed(self, status: int, reason: str) -> NoReturn:
        raise RegistryAuthError(
            f"registry {self._host}: {status} {one_line(reason)} — {self._hint()}"
        )

    def _hint(self) -> str:
        kind = self._credentials.kind
        if kind in ("basic", "anonymous"):
            return "check the docker config / credentials"
        return f"check the registry permissions of the workload identity ({kind})"

    def _send(
        self, method: str, url: str, headers: Mapping[str, str], body: bytes | None
    ) -> RegistryAnswer:
        """One HTTP request; transport failures become ``TransientFailure`` or ``RegistryError``."""
        with self._lock:
            self.request_count += 1
        policy = self._redirects(url)

        def judge(response: requests.Response, *_: Any, **__: Any) -> None:
            # requests calls this for every answer, redirects included, before it follows
            # one: a redirect the policy refuses is never asked.
            if response.is_redirect:
                try:
                    policy.follow(response.url, response.headers.get("Location"))
                except RedirectRefusedError:
                    response.close()
                    raise

        try:
            response = self._session.request(
                method,
                url,
                headers={"User-Agent": self._user_agent, **headers},
                data=body,
                timeout=self._timeout.total_seconds(),
                verify=self._verify,
                stream=True,
                allow_redirects=True,  # blob GETs may redirect to storage; auth is dropped
                hooks={"response": judge},
            )
            with response:
                content = b"" if method == "HEAD" else self._read(response)
                return RegistryAnswer(
                    response.status_code, response.reason or "", response.headers, content
                )
        except RedirectRefusedError as exc:
            raise RegistryError(f"registry {self._host}: {exc}") from None
        except requests.exceptions.SSLError as exc:
            raise RegistryError(_tls_problem(self._host, exc)) from exc
        except requests.exceptions.Timeout as exc:
            raise TransientFailure(f"timed out after {self._timeout.total_seconds():g}s") from exc
        except (
            requests.exceptions.ConnectionError,
            requests.exceptions.ChunkedEncodingError,
        ) as exc:
            raise TransientFailure(f"unreachable: {_os_reason(exc)}") from exc
        except requests.exceptions.RequestException as exc:
            raise RegistryError(f"registry {self._host}: request failed: {one_line(exc)}") from exc
        except OSError as exc:  # requests raises a bare OSError for an unreadable CA file
            raise RegistryError(f"registry {self._host}: {one_line(exc)}") from exc

    def _read(self, response: requests.Response) -> bytes:
        chunks: list[bytes] = []
        size = 0
        for chunk in response.iter_content(64 * 1024):
            size += len(chunk)
            if size > MAX_BODY_BYTES:
                raise RegistryError(
                    f"registry {self._host}: answer body is over {MAX_BODY_BYTES} bytes"
                )
            chunks.append(chunk)
        return b"".join(chunks)

    def _expect_ok(self, answer: RegistryAnswer, what: str) -> None:
        if 200 <= answer.status < 300:
            return
        raise RegistryError(
            f"registry {self._host}: {what}: {answer.status} {answer.reason}{_error_detail(answer)}"
        )


_DIGEST_ROUTES = ("blobs/", "referrers/")


def _check_path(host: str, path: str) -> None:
    """``path`` is one of the distribution API's routes under a repository, with a name of
    the OCI grammar in it: ``manifests/<tag|digest>``, ``blobs/<digest>``,
    ``referrers/<digest>``, ``blobs/uploads/`` or ``tags/list``. Anything else (a name read
    from a listing such as ``../../other/repo/manifests/x`` or ``x?digest=...``) is refused
    before a request is sent."""
    if path.startswith("manifests/"):
        ok = is_reference(path.removeprefix("manifests/"))
    elif path in ("blobs/uploads/", "tags/list"):
        ok = True
    else:
        ok = any(path.startswith(r) and is_digest(path.removeprefix(r)) for r in _DIGEST_ROUTES)
    if not ok:
        raise RegistryError(
            f"registry {host}: refusing a request outside the OCI name grammar: {shown(path)}"
        )


def _with_auth(headers: Mapping[str, str], authorization: str | None) -> dict[str, str]:
    return {**headers, "Authorization": authorization} if authorization else dict(headers)


def _registry_session(*, verify: bool | str) -> requests.Session:
    """A ``requests`` session that refuses every cookie, as oras-py's ``Registry`` sets its
    own up: some registries (Harbor) take a cookie kept as a sign of a browser and ask for
    CSRF tokens next. Without TLS verification urllib3's warnings are off, as oras-py turns
    them off (``registry.tls_verify = false`` says it already).

    Made here rather than taken from ``oras.provider.Registry``: importing that module
    imports ``jsonschema`` and its metaschemas, 3 MiB of resident memory for the life of
    ``releasebot run``, for a session this adapter only sends through."""
    session = requests.Session()
    session.cookies.set_policy(DefaultCookiePolicy(allowed_domains=[]))
    if not verify:
        urllib3.disable_warnings()
    return session


# -- answers ---------------------------------------------------------------------------


_ERROR_LIMITS = JsonLimits(max_bytes=64 * 1024)
"""An error body is read for its first code and message only: a bigger one is not JSON."""


def _raise_if_transient(answer: RegistryAnswer) -> None:
    status = answer.status
    if status in (408, 429) or 500 <= status < 600:
        wait = parse_retry_after(answer.headers.get("Retry-After"))
        raise TransientFailure(f"{status} {answer.reason}".rstrip(), wait)


def _first_error(answer: RegistryAnswer) -> tuple[str, str]:
    """``(code, message)`` of the registry's JSON error body; empty strings when none."""
    try:
        first = decode_json(answer.body, _ERROR_LIMITS)["errors"][0]  # type: ignore[index]
        return str(first.get("code", "")), str(first.get("message", ""))
    except (JsonRefusedError, AttributeError, TypeError, IndexError, KeyError):
        return "", ""


def _error_detail(answer: RegistryAnswer) -> str:
    """``: CODE message`` from the registry's error body, trimmed; '' when there is none."""
    code, message = _first_error(answer)
    return f": {one_line(code)} {one_line(message)}".rstrip() if code or message else ""


def _is_unknown_name(answer: RegistryAnswer) -> bool:
    return _first_error(answer)[0] in ("NAME_UNKNOWN", "NOT_FOUND")


def _json_object(host: str, body: bytes, what: str) -> dict[str, Any]:
    try:
        document = decode_json(body)
    except JsonRefusedError as exc:
        raise RegistryError(f"registry {host}: {what} is not JSON: {exc.problem}") from exc
    if not isinstance(document, dict):
        raise RegistryError(f"registry {host}: {what} is not a JSON object")
    return document


@dataclass(frozen=True)
class _KeptPage:
    """A tag page as the last walk read it: its body's SHA-256, its tags, those refused."""

    sha256: bytes
    tags: tuple[str, ...]
    refused: tuple[str, ...]


def _parse_tag_page(host: str, body: bytes) -> list[str]:
    tags = _json_object(host, body, "tag list").get("tags")
    if tags is None:  # an empty repository answers "tags": null
        return []
    if not isinstance(tags, list) or not all(isinstance(tag, str) for tag in tags):
        raise RegistryError(f"registry {host}: tag list has no list of tags")
    return cast(list[str], tags)


def _string_map(host: str, value: object, what: str) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, dict) or not all(
        isinstance(key, str) and isinstance(item, str) for key, item in value.items()
    ):
        raise RegistryError(f"registry {host}: {what} is not a map of strings")
    return dict(value)


def _tls_problem(host: str, exc: Exception) -> str:
    found = _SSL_REASON.search(str(exc))
    reason = one_line(found.group(0).strip() if found else type(exc).__name__)
    if "CERTIFICATE_VERIFY_FAILED" in reason:
        hint = "set the registry's CA file, or turn TLS verification off"
    elif "WRONG_VERSION_NUMBER" in reason or "RECORD_LAYER" in reason:
        hint = "does the registry speak plain HTTP (insecure)?"
    else:
        hint = "check the registry's TLS settings"
    return f"registry {host}: TLS handshake failed: {reason} — {hint}"


def _os_reason(exc: Exception) -> str:
    found = _OS_REASON.search(str(exc))
    return one_line(found.group(0).strip() if found else type(exc).__name__)
