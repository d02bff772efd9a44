"""The Kubernetes API client, made and called one way for every adapter that uses it.

The build Job launcher, the leader election and the fleet source all talk to the API server
through lightkube (on httpx2, decoding with msgspec). What they share is here: building the client
from a kubeconfig or the in-cluster service account (``make_kube_client``), and calling it
with every lightkube, httpx2 and msgspec failure translated into the domain's error tree
(``kube_call``): 5xx, 408, 429, network failures, timeouts and unreadable answers are
``ClusterUnavailableError`` (retried by the given ``RetryPolicy`` first), other refusals
(403, 422, 400…) ``ClusterRejectedError`` at once; a 403 on a call that names the
``Permission`` it needs is ``ClusterForbiddenError`` saying what to grant, and a 401 says
the credentials were refused. A status the caller handles itself (404 on a read, 409 on a
create, 410 on a continued list) comes back as ``Answered``.

``get_raw`` is the one way to ask what lightkube's typed calls cannot ask for or read
safely (a Pod's log with ``previous`` and ``limitBytes``; a list whose items are handed to
a parser as raw JSON, page by page): the body, bounded, with errors raised as lightkube
raises them, for ``kube_call`` to translate.

Deliberately not here: what any request means (the adapters), and watching.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import TypeVar

import httpx2
import msgspec
import yaml  # type: ignore[import-untyped]  # PyYAML (lightkube reads with it) ships no hints
from lightkube import Client, KubeConfig
from lightkube.core.exceptions import ApiError
from lightkube.core.generic_client import transform_exception

from releasebot.domain.shared.errors import (
    ClusterForbiddenError,
    ClusterRejectedError,
    ClusterUnavailableError,
    ConfigError,
)
from releasebot.edge.json import JsonLimits, JsonRefusedError, decode_json
from releasebot.edge.parse import ValueRefusedError, parse_content_length, read_regular_file
from releasebot.edge.retry import (
    RetryPolicy,
    Sleep,
    TransientFailure,
    call_with_retries,
    parse_retry_after,
    real_sleep,
)
from releasebot.edge.text import one_line

T = TypeVar("T")

DEFAULT_TIMEOUT = timedelta(seconds=10)
"""Per request; the API server answers in milliseconds when healthy."""
KUBE_JSON_LIMITS = JsonLimits(max_bytes=32 * 1024 * 1024)
"""The biggest answer read: lists are paged (the fleet asks 500 nodes a page, ~10 MB)."""
ERROR_TEXT_MAX_CHARS = 300
"""API server messages quoted in errors and statuses are cut to one line of this length."""
RETRY_AFTER_MAX = timedelta(minutes=5)
"""The longest ``Retry-After`` of an API server passed on to the caller."""


class UnreadableAnswerError(Exception):
    """An API server's answer the bounded reader refused (too big, not JSON, too deep)."""

    def __init__(self, status: int, problem: str) -> None:
        super().__init__(f"unreadable answer (HTTP {status}): {problem}")
        self.status = status
        self.problem = problem


LIBRARY_ERRORS = (
    httpx2.HTTPError,
    httpx2.StreamError,
    msgspec.MsgspecError,
    json.JSONDecodeError,
    UnreadableAnswerError,
    KeyError,  # lightkube reading an error answer without the exact JSON Content-Type
    httpx2.InvalidURL,  # a name that cannot be in a URL (control characters): not an HTTPError
)
"""What lightkube lets escape from a call."""
_TEMPORARY_CODES = frozenset({408, 429})
_DEFAULT_POLICY = RetryPolicy()


def make_kube_client(
    kubeconfig: str | None,
    namespace: str | None = None,
    *,
    timeout: timedelta = DEFAULT_TIMEOUT,
) -> Client:
    """A lightkube client from a kubeconfig file, or in-cluster config when ``kubeconfig`` is
    ``None`` (the Pod's service-account token, CA and ``KUBERNETES_SERVICE_HOST``).

    ``namespace`` is the client's default; the adapters name their namespace on every call.
    Raises ``ConfigError`` when the configuration cannot be loaded. Connects to nothing.
    """
    key = "kubeconfig" if kubeconfig is not None else "kubernetes"
    try:
        if kubeconfig is not None:
            config = _read_kubeconfig(kubeconfig)
        else:
            config = KubeConfig.from_service_account()
        client = Client(
            config=config,
            namespace=namespace,
            timeout=httpx2.Timeout(timeout.total_seconds()),
            field_manager="releasebot",
        )
    except ValueRefusedError as error:  # the file itself: a FIFO, too big, unreadable
        raise ConfigError(key, str(error)) from None
    # Loading a kubeconfig fails in library-specific ways (lightkube's ConfigError, YAML,
    # msgspec, a missing environment variable or CA file): all mean the same to the user.
    except Exception as error:
        where = kubeconfig if kubeconfig is not None else "in-cluster service account"
        detail = _one_line(f"{type(error).__name__}: {error}")
        raise ConfigError(key, f"cannot load Kubernetes config from {where}: {detail}") from error
    # lightkube reads answers with msgspec (successes) and json (errors), neither bounded:
    # every answer is read and checked by the one bounded JSON reader before they see it.
    # lightkube keeps its httpx2 client private; its event hooks are httpx2's public API.
    http: httpx2.Client = client._client._client
    http.event_hooks["response"].append(check_answer)
    return client


MAX_KUBECONFIG_BYTES = 1024 * 1024
"""A kubeconfig with a few clusters and inline certificates is tens of KiB."""


def _read_kubeconfig(path: str) -> KubeConfig:
    """lightkube's ``KubeConfig.from_file``, but read through the one bounded file reader
    (``from_file`` reads any file whole, and waits forever on a FIFO)."""
    data = read_regular_file(os.path.expanduser(path), MAX_KUBECONFIG_BYTES)
    document = yaml.safe_load(data.decode("utf-8"))
    if not isinstance(document, dict):
        raise ValueRefusedError(f"{path} is not a kubeconfig (a YAML mapping)")
    return KubeConfig.from_dict(document, fname=Path(path).expanduser())


def check_answer(response: httpx2.Response) -> None:
    """An httpx2 response hook: read the body within ``KUBE_JSON_LIMITS`` and, when it
    says it is JSON, decode it once with the bounded reader; ``UnreadableAnswerError``
    otherwise, before lightkube's own unbounded decoders run."""
    limit = KUBE_JSON_LIMITS.max_bytes
    declared = parse_content_length(response.headers.get("Content-Length"))
    if declared is not None and declared > limit:
        response.close()
        raise UnreadableAnswerError(
            response.status_code, f"body of {declared} bytes is over {limit}"
        )
    chunks: list[bytes] = []
    size = 0
    for chunk in response.iter_bytes():
        size += len(chunk)
        if size > limit:
            response.close()
            raise UnreadableAnswerError(response.status_code, f"body is over {limit} bytes")
        chunks.append(chunk)
    body = b"".join(chunks)
    # The body is read: hand it to lightkube as if httpx2 had read it (``Response.read``
    # returns ``_content`` once it is set, which is how httpx2 caches a read body).
    response._content = body
    if "json" in response.headers.get("Content-Type", "").lower():
        try:
            decode_json(body, KUBE_JSON_LIMITS)
        except JsonRefusedError as error:
            raise UnreadableAnswerError(response.status_code, error.problem) from error


ERROR_BODY_MAX_BYTES = 64 * 1024
"""The most of an error answer read by ``get_raw``: a ``Status`` is a few hundred bytes."""


@dataclass(frozen=True)
class RawAnswer:
    """A successful answer of ``get_raw``: its first bytes, and whether there were more."""

    body: bytes
    cut: bool
    content_type: str


def get_raw(client: Client, path: str, params: Mapping[str, str], *, max_bytes: int) -> RawAnswer:
    """GET ``path`` (``api/v1/namespaces/gpu-operator/pods``) from the API server ``client``
    talks to, with its credentials, reading at most ``max_bytes`` of a successful answer
    (the rest is never read) and at most ``ERROR_BODY_MAX_BYTES`` of an error, which is
    raised as lightkube raises it (``ApiError`` for a JSON ``Status``, else httpx2's
    ``HTTPStatusError``; an error body that is not bounded JSON is ``UnreadableAnswerError``).
    Call it inside ``kube_call``."""
    http: httpx2.Client = client._client._client  # lightkube's own, with auth and TLS
    request = http.build_request("GET", path, params=dict(params))
    response = http.send(request, stream=True)
    try:
        limit = ERROR_BODY_MAX_BYTES if response.is_error else max_bytes
        chunks: list[bytes] = []
        size = 0
        cut = False
        for chunk in response.iter_bytes():
            if size + len(chunk) > limit:
                chunks.append(chunk[: limit - size])
                cut = True
                break
            chunks.append(chunk)
            size += len(chunk)
        body = b"".join(chunks)
    finally:
        response.close()
    content_type = response.headers.get("Content-Type", "")
    if response.is_error:
        if cut:
            raise UnreadableAnswerError(response.status_code, f"body is over {limit} bytes")
        response._content = body  # read: as httpx2 keeps a body it has read
        if "json" in content_type.lower():
            try:
                decode_json(body, KUBE_JSON_LIMITS)
            except JsonRefusedError as error:
                raise UnreadableAnswerError(response.status_code, error.problem) from error
        try:
            response.raise_for_status()
        except httpx2.HTTPStatusError as error:
            raise transform_exception(error) from error
    return RawAnswer(body, cut, content_type)


@dataclass(frozen=True)
class KubeFailure:
    """One failed API call, classified."""

    code: int | None
    """The HTTP status, when the API server (or a proxy in front of it) answered."""
    text: str
    temporary: bool
    retry_after: timedelta | None = None
    detail: str = ""
    """What the server said, without the request's name (one line)."""


@dataclass(frozen=True)
class Permission:
    """The RBAC rule a call needs, named in the error when the API server refuses it."""

    verb: str
    resource: str
    """The plural, with its subresource if any (``nodes``, ``pods/log``)."""
    group: str = ""
    """The API group; ``""`` is the core group."""


class Answered(Exception):
    """The API server answered with a status the caller asked to handle itself."""

    def __init__(self, failure: KubeFailure) -> None:
        super().__init__(failure.text)
        self.failure = failure


def kube_call(
    what: str,
    operation: Callable[[], T],
    *,
    policy: RetryPolicy = _DEFAULT_POLICY,
    sleep: Sleep = real_sleep,
    answers: Collection[int] = (),
    permission: Permission | None = None,
) -> T:
    """``operation()`` retried by ``policy``, every library error translated.

    ``what`` names the request in messages (``create job rb-…``). An HTTP status in
    ``answers`` is raised as ``Answered`` for the caller to handle. With ``permission``, a
    403 is ``ClusterForbiddenError`` naming that rule.
    """

    def attempt() -> T:
        try:
            return operation()
        except LIBRARY_ERRORS as error:
            failure = classify(what, error)
            if failure is None:
                raise  # a KeyError of our own making: a bug, not the cluster
            if failure.code is not None and failure.code in answers:
                raise Answered(failure) from error
            if failure.code == 403 and permission is not None:
                rule = permission
                raise ClusterForbiddenError(
                    rule.verb, rule.resource, rule.group, failure.detail
                ) from error
            if not failure.temporary:
                raise ClusterRejectedError(failure.text) from error
            raise TransientFailure(failure.text, failure.retry_after) from error

    def give_up(problem: str, failure: TransientFailure) -> Exception:
        wait = {"retry_after": failure.wait} if failure.wait else {}
        return ClusterUnavailableError(problem, **wait)

    return call_with_retries(attempt, policy, sleep, give_up=give_up)


def classify(what: str, error: Exception) -> KubeFailure | None:
    """What a lightkube/httpx2/msgspec error means; ``None`` for an unrelated ``KeyError``."""
    prefix = f"kubernetes {what}"
    if isinstance(error, UnreadableAnswerError):
        return KubeFailure(None, _one_line(f"{prefix}: {error}"), True)
    if isinstance(error, ApiError):
        code = error.response.status_code
        status = error.status
        detail = f"{code} {status.reason or error.response.reason_phrase}: {status.message or ''}"
        return _http_failure(prefix, code, detail, error.response)
    if isinstance(error, httpx2.HTTPStatusError):
        return _from_response(prefix, error.response)
    if isinstance(error, KeyError | json.JSONDecodeError | msgspec.MsgspecError):
        # lightkube turns an error response into ApiError only when its Content-Type is
        # exactly application/json, reading the header with [] (KeyError when absent),
        # parsing the body (JSONDecodeError when it lies about being JSON) and decoding a
        # Status (msgspec errors when it is some other JSON).
        answer = _status_error_behind(error)
        if answer is not None:
            return _from_response(prefix, answer.response)
        if isinstance(error, KeyError):
            return None
        # A success answer whose body is not the object asked for.
        return KubeFailure(None, _one_line(f"{prefix}: unreadable answer: {error}"), True)
    if isinstance(error, httpx2.InvalidURL):  # nothing was sent: asking again cannot help
        return KubeFailure(None, _one_line(f"{prefix}: not a valid request URL: {error}"), False)
    if isinstance(error, httpx2.TimeoutException):
        return KubeFailure(None, _one_line(f"{prefix}: timed out ({type(error).__name__})"), True)
    if isinstance(error, httpx2.TransportError):
        text = f"{prefix}: API server unreachable ({type(error).__name__}: {error})"
        return KubeFailure(None, _one_line(text), True)
    return KubeFailure(None, _one_line(f"{prefix}: {type(error).__name__}: {error}"), True)


def _status_error_behind(error: BaseException) -> httpx2.HTTPStatusError | None:
    """The HTTP error response lightkube was handling when ``error`` happened, if any."""
    context = error.__context__
    for _ in range(5):  # the JSON decoder adds a StopIteration in between
        if context is None or isinstance(context, httpx2.HTTPStatusError):
            return context
        context = context.__context__
    return None


def _from_response(prefix: str, response: httpx2.Response) -> KubeFailure:
    try:
        body = response.text
    except (httpx2.HTTPError, httpx2.StreamError, UnicodeDecodeError):
        body = ""
    detail = f"{response.status_code} {response.reason_phrase}: {body}"
    return _http_failure(prefix, response.status_code, detail, response)


def _http_failure(prefix: str, code: int, detail: str, response: httpx2.Response) -> KubeFailure:
    temporary = code >= 500 or code in _TEMPORARY_CODES
    wait = parse_retry_after(response.headers.get("Retry-After")) if temporary else None
    text = f"{prefix}: {detail}"
    if code == 401:
        text += (
            ": the API server refused releasebot's credentials (service account token or "
            "kubeconfig)"
        )
    return KubeFailure(
        code,
        _one_line(text),
        temporary,
        None if wait is None else min(wait, RETRY_AFTER_MAX),
        _one_line(detail),
    )


def _one_line(text: str) -> str:
    return one_line(text, ERROR_TEXT_MAX_CHARS)
