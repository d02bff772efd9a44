"""The coverage page and its JSON API as HTTP answers (``OverviewApp``), for ``HttpServer``.

Routes (GET and HEAD only; everything is read-only):

- ``/[?state=S&q=TEXT&flatcar=V&driver=D]``: the page (``static/index.html``), which draws
  itself from the API below with ``static/app.js`` and ``static/style.css``; nothing is
  fetched from the internet. The query is the page's filter, read by the page itself, so
  a link keeps it; only these names are taken;
- ``/api/targets[?state=S&flatcar=V&driver=D]``: the driver x Flatcar matrix;
- ``/api/targets/<tag>``: one target's detail (404 when unknown);
- ``/api/fleet``: the banner, the GPU nodes and their gate; ``/api/feeds``: feed health;
- ``/api/openapi.json``: the OpenAPI 3 document describing these answers.

Every 200 carries an ``ETag`` (a hash of the body), and a request whose ``If-None-Match``
names it gets ``304`` with no body. The API's answers are built once per change and shared
(``web/answers.py``): before any work the store's change counters are read (one small
SELECT) and compared with those the kept answer was built at (the tables each answer reads:
``OverviewQueries.reads``), so a refresh when nothing changed costs that read, not the
answer; ``quick`` answers only from what is kept, for the server to call before it gives
out a turn at the expensive work. Unknown paths are 404; an unknown parameter or a bad
value is 400 with one line saying which; a store that cannot answer is 503 with a line
saying so (the page shows it; the log says why). A JSON body never holds a secret: the
service reads targets, builds, feeds and the fleet, never settings.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import time
from collections.abc import Callable, Hashable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field, replace
from http import HTTPStatus
from importlib.resources import files
from typing import Any, Protocol
from urllib.parse import parse_qs, unquote

from releasebot.domain.shared.errors import ReleasebotError, StoreUnavailableError
from releasebot.domain.shared.versions import DriverVersion, FlatcarVersion, is_oci_tag
from releasebot.domain.targets.models import TargetState
from releasebot.domain.views.overview import RECHECK_AFTER_SECONDS
from releasebot.edge.redact import redact as redact_forms
from releasebot.edge.text import one_line
from releasebot.web.answers import AnswerCache, Built
from releasebot.web.openapi import openapi_document

log = logging.getLogger("releasebot.web")

JSON = "application/json"
QUERY_MAX_CHARS = 512
STORE_DOWN = "the state store cannot be reached right now; releasebot's log says why"
STORE_UNREADABLE = (
    "the state store answered with something releasebot cannot read; releasebot's log names "
    "it and what to do"
)
PAGE_PARAMS = {"state", "q", "flatcar", "driver"}
"""The page's filter, kept in its address (``/?state=failed&q=4593``)."""
API_PATHS = ("/api/targets", "/api/targets/{tag}", "/api/fleet", "/api/feeds", "/api/openapi.json")
"""The API's addresses as the OpenAPI document names them (the tests hold the two equal)."""
_STATIC = {
    "/": ("index.html", "text/html; charset=utf-8"),
    "/static/app.js": ("app.js", "text/javascript; charset=utf-8"),
    "/static/style.css": ("style.css", "text/css; charset=utf-8"),
}
_SECURITY_HEADERS = {
    # Everything comes from this server; the page runs no inline script and no frame.
    "Content-Security-Policy": "default-src 'self'; img-src 'self' data:; "
    "frame-ancestors 'none'; base-uri 'none'; form-action 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
}


@dataclass(frozen=True)
class WebAnswer:
    status: int
    content_type: str
    body: bytes
    headers: Mapping[str, str] = field(default_factory=dict)


class OverviewQueries(Protocol):
    """What the page asks (``service.overview.OverviewService``); each raises
    ``StoreUnavailableError`` when the store cannot answer."""

    def targets(
        self,
        *,
        state: TargetState | None = None,
        flatcar: str | None = None,
        driver: str | None = None,
    ) -> dict[str, object]: ...

    def target(self, tag: str) -> dict[str, object] | None: ...

    def fleet(self) -> dict[str, object]: ...

    def feeds(self) -> dict[str, object]: ...

    def revisions(self) -> dict[str, int]: ...

    def reads(self, question: str) -> tuple[tuple[str, ...], tuple[str, ...]]: ...

    def matrix_basis(self) -> Hashable: ...


class Turns(Protocol):
    """The server's limit on expensive work (``server.TurnLimit``)."""

    @property
    def wait(self) -> float: ...

    def turn(self) -> AbstractContextManager[bool]: ...


class _Unlimited:
    """No limit: for a caller without a server (tests, scripts)."""

    wait = 60.0

    @contextlib.contextmanager
    def turn(self) -> Iterator[bool]:
        yield True


class BadRequestError(ValueError):
    """A query the API does not take; ``str()`` is the line the client gets."""


@dataclass(frozen=True)
class _Question:
    """An API answer to build: ``name`` keys it in the cache (its address and query),
    ``reads`` names the question (``OverviewQueries.reads`` says what it reads)."""

    name: str
    reads: str
    build: Callable[[], WebAnswer]


class OverviewApp:
    """Answers the page's and the API's GET requests; ``None`` for paths it does not own."""

    def __init__(
        self,
        service: OverviewQueries,
        redact: Callable[[str], str] = redact_forms,
        *,
        recheck_after: float = RECHECK_AFTER_SECONDS,
        monotonic: Callable[[], float] = time.monotonic,
        cache: AnswerCache[WebAnswer] | None = None,
    ) -> None:
        self._service = service
        self._redact = redact
        self._static: dict[str, bytes] = {}
        self._last_store_error: str | None = None
        self.cache: AnswerCache[WebAnswer] = cache or AnswerCache(
            recheck_after=recheck_after, monotonic=monotonic
        )

    def owns(self, path: str) -> bool:
        return path in _STATIC or path == "/api" or path.startswith(("/api/", "/static/"))

    def costly(self, path: str) -> bool:
        """Whether answering ``path`` may read the store in full (the JSON API): the server
        limits how many such answers it computes at once, after ``quick`` found none kept.
        The static page and the OpenAPI document are built once and cost nothing."""
        return path.startswith("/api/") and path != "/api/openapi.json"

    def __call__(
        self, target: str, headers: Mapping[str, str], turns: Turns | None = None
    ) -> WebAnswer | None:
        """The answer, built (in one of ``turns``) if what is kept is not current; ``None``
        when no turn came in time (the server answers "busy")."""
        return self._answer(target, headers, turns or _Unlimited())

    def quick(self, target: str, headers: Mapping[str, str]) -> WebAnswer | None:
        """The answer if it costs no more than the change counters' read (a kept answer, an
        error, a static file); ``None`` when it must be built (``__call__``)."""
        return self._answer(target, headers, None)

    def _answer(
        self, target: str, headers: Mapping[str, str], turns: Turns | None
    ) -> WebAnswer | None:
        path, _, query = target.partition("?")
        try:
            routed = self._route(unquote(path), query)
            answer = routed if isinstance(routed, WebAnswer) else self._kept(routed, turns)
        except BadRequestError as error:
            answer = _json(HTTPStatus.BAD_REQUEST, {"error": str(error)})
        except StoreUnavailableError as error:
            # The store's line names the database (host, user): the log has it, the page,
            # which anybody reaching the port reads, says only what it means.
            line = one_line(str(error), 300)
            if line != self._last_store_error:
                log.warning("coverage page: %s", line)
            self._last_store_error = line
            answer = _json(HTTPStatus.SERVICE_UNAVAILABLE, {"error": STORE_DOWN})
        except ReleasebotError as error:
            # Reachable but not readable (a newer schema, an unreadable row): not "try later".
            line = one_line(str(error), 300)
            if line != self._last_store_error:
                log.warning("coverage page: %s", line)
            self._last_store_error = line
            answer = _json(HTTPStatus.SERVICE_UNAVAILABLE, {"error": STORE_UNREADABLE})
        else:
            if answer is None:
                return None
            self._last_store_error = None
        return _conditional(answer, headers.get("if-none-match"))

    def _kept(self, question: _Question, turns: Turns | None) -> WebAnswer | None:
        """The kept answer when the counters it was built at are the store's now; else
        (with ``turns``) the one built now in a turn, or the kept one when what moved did
        not change what it shows (the tables it reads only in part); ``None``: build it
        (without ``turns``), or no turn came (with them)."""
        tables, partial = self._service.reads(question.reads)
        if turns is None:
            key = _counters(self._service.revisions(), tables)
            kept = self.cache.get(question.name)
            return kept.value if kept is not None and kept.key == key else None
        with self.cache.building(question.name, turns.wait) as building:
            if not building:
                return None  # another client's build of it took longer than a turn's wait
            # Read here, one builder at a time: whoever built before may have built it.
            key = _counters(self._service.revisions(), tables)
            kept = self.cache.get(question.name)
            if kept is not None and kept.key == key:
                return kept.value
            with turns.turn() as granted:
                if not granted:
                    return None
                basis = self._service.matrix_basis() if partial else None
                if (
                    kept is not None
                    and partial
                    and kept.basis == basis
                    and _moved(kept.key, key, tables) <= set(partial)
                ):
                    self.cache.put(question.name, replace(kept, key=key))  # keeps its age
                    return kept.value
                answer = question.build()
            if answer.status == HTTPStatus.OK:
                answer = replace(answer, headers={**answer.headers, "ETag": _etag(answer.body)})
            built = Built(answer, len(answer.body), key, basis, self.cache.now())
            self.cache.put(question.name, built)
            return answer

    def _route(self, path: str, query: str) -> WebAnswer | _Question:
        if path == "/":
            _params(query, PAGE_PARAMS)  # the page's filter: the page reads the values
        if path in _STATIC:
            if path != "/":
                _no_query(query)
            name, content_type = _STATIC[path]
            return WebAnswer(HTTPStatus.OK, content_type, self._file(name))
        if path == "/api/openapi.json":
            _no_query(query)
            return _json(HTTPStatus.OK, openapi_document())
        if path == "/api/targets":
            params = _params(query, {"state", "flatcar", "driver"})
            state = _state(params.get("state"))
            flatcar = _version(params.get("flatcar"), FlatcarVersion.is_valid, "flatcar")
            driver = _version(params.get("driver"), DriverVersion.is_valid, "driver")
            return _Question(
                _name(path, state and state.value, flatcar, driver),
                "targets",
                lambda: self._json(
                    HTTPStatus.OK,
                    self._service.targets(state=state, flatcar=flatcar, driver=driver),
                ),
            )
        if path.startswith("/api/targets/"):
            _no_query(query)
            tag = path.removeprefix("/api/targets/")
            if not is_oci_tag(tag):
                raise BadRequestError(f"{_shown(tag)} is not an image tag")
            return _Question(path, "target", lambda: self._detail(tag))
        if path == "/api/fleet":
            _no_query(query)
            return _Question(
                path, "fleet", lambda: self._json(HTTPStatus.OK, self._service.fleet())
            )
        if path == "/api/feeds":
            _no_query(query)
            return _Question(
                path, "feeds", lambda: self._json(HTTPStatus.OK, self._service.feeds())
            )
        return _json(HTTPStatus.NOT_FOUND, {"error": "not found"})

    def _detail(self, tag: str) -> WebAnswer:
        detail = self._service.target(tag)
        if detail is None:
            return _json(HTTPStatus.NOT_FOUND, {"error": f"no target {tag}"})
        return self._json(HTTPStatus.OK, detail)

    def _ok(self, body: Mapping[str, Any]) -> WebAnswer:
        return self._json(HTTPStatus.OK, body)

    def _json(self, status: int, body: Mapping[str, Any]) -> WebAnswer:
        """``body`` as JSON with every text masked (``edge.redact``): stored errors and log
        tails come from registries, API servers and builds, and may quote a credential."""
        seen: dict[str, str] = {}  # states, channels, versions repeat in every row

        def masked(text: str) -> str:
            if (shown := seen.get(text)) is None:
                shown = seen[text] = self._redact(text)
            return shown

        return _json(status, _masked(body, masked))

    def _file(self, name: str) -> bytes:
        if name not in self._static:
            self._static[name] = (files("releasebot.web") / "static" / name).read_bytes()
        return self._static[name]


def _masked(value: Any, redact: Callable[[str], str]) -> Any:
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, Mapping):
        return {key: _masked(item, redact) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_masked(item, redact) for item in value]
    return value


def _json(status: int, body: Mapping[str, Any]) -> WebAnswer:
    payload = json.dumps(body, separators=(",", ":"), ensure_ascii=True).encode()
    return WebAnswer(status, JSON, payload)


def _counters(revisions: Mapping[str, int], tables: Sequence[str]) -> tuple[int, ...]:
    return tuple(revisions.get(table, 0) for table in tables)


def _moved(kept: tuple[int, ...], now: tuple[int, ...], tables: Sequence[str]) -> set[str]:
    return {table for table, old, new in zip(tables, kept, now, strict=True) if old != new}


def _name(path: str, *values: str | None) -> str:
    """A cache name for ``path`` with its parsed parameters (so ``?a=1&b=2`` and ``?b=2&a=1``,
    or an escaped spelling, are one answer, not two kept copies)."""
    return path + "?" + "&".join("" if value is None else value for value in values)


def _etag(body: bytes) -> str:
    return '"' + hashlib.sha256(body).hexdigest()[:32] + '"'


def _conditional(answer: WebAnswer, if_none_match: str | None) -> WebAnswer:
    headers = dict(_SECURITY_HEADERS)
    if answer.status == HTTPStatus.OK:
        etag = answer.headers.get("ETag") or _etag(answer.body)
        headers["ETag"] = etag
        if if_none_match is not None and _matches(if_none_match, etag):
            return WebAnswer(HTTPStatus.NOT_MODIFIED, answer.content_type, b"", headers)
    return WebAnswer(answer.status, answer.content_type, answer.body, {**headers, **answer.headers})


def _matches(if_none_match: str, etag: str) -> bool:
    tags = {item.strip().removeprefix("W/") for item in if_none_match.split(",")}
    return "*" in tags or etag in tags


def _shown(value: str) -> str:
    return repr(one_line(value, 80))


def _no_query(query: str) -> None:
    if query:
        raise BadRequestError("this address takes no query parameters")


def _params(query: str, known: set[str]) -> dict[str, str]:
    if len(query) > QUERY_MAX_CHARS:
        raise BadRequestError(f"the query is longer than {QUERY_MAX_CHARS} characters")
    try:
        parsed = parse_qs(query, keep_blank_values=True, strict_parsing=bool(query))
    except ValueError:
        raise BadRequestError("the query string does not parse") from None
    params = {}
    for name, values in parsed.items():
        if name not in known:
            raise BadRequestError(
                f"unknown parameter {_shown(name)}; known: {', '.join(sorted(known))}"
            )
        if len(values) != 1:
            raise BadRequestError(f"parameter {name} given {len(values)} times")
        params[name] = values[0]
    return params


def _state(value: str | None) -> TargetState | None:
    if value is None:
        return None
    try:
        return TargetState(value)
    except ValueError:
        known = ", ".join(state.value for state in TargetState)
        raise BadRequestError(f"state {_shown(value)} is not one of {known}") from None


def _version(value: str | None, valid: Callable[[str], bool], name: str) -> str | None:
    if value is None:
        return None
    if not valid(value):
        raise BadRequestError(f"{name} {_shown(value)} is not a {name} version")
    return value
