"""Every list releasebot reads from the API server, read one bounded way: ``list_objects``.

A list is read page by page (``limit``/``continue``) as the raw JSON the server sent,
through ``get_raw`` and the bounded JSON reader, never through lightkube's decoders (they
raise ``TypeError`` on a ``null`` item and give up on the whole list for one odd object).
Each item that is a JSON object is handed back with its number in the listing (1 for the
first item of the first page); an item that is not (``null``, a number, a string, a list)
is skipped and named in one line (``item 3 of the Node list is null: skipped``), at most
``SKIPPED_SHOWN`` lines and a count of the rest.

Three bounds hold for every listing, whatever the server answers:

- objects: at most ``max_items``;
- pages: at most ``ceil(max_items / page_size) + EXTRA_PAGES``: a server that hands out a
  ``continue`` token with every page, each small or empty, is stopped there;
- time: a wall-clock ``budget`` for the whole listing (checked before each page, on an
  injectable monotonic clock; a page in flight is bounded by the client's own timeout).

A bound that is hit does not raise: the answer is ``RawListing.cut``, one line saying
which bound, and the objects read so far. The caller decides what a cut listing means (the
fleet view is then unsure; a pod listing is refused). A 410 ``Expired`` continue token
(etcd compacted the revision mid-listing) restarts the listing once from the top, within
the same budget. Errors go through ``edge.kube.kube_call``: statuses in ``answers`` come
back as ``Answered`` (a 404 on a CRD's list), the rest as the domain's errors.

Deliberately not here: what an object means (the domain's parsers), and watching.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from lightkube import Client

from releasebot.domain.shared.errors import ClusterUnavailableError
from releasebot.edge.json import JsonRefusedError, decode_json
from releasebot.edge.kube import (
    KUBE_JSON_LIMITS,
    Answered,
    Permission,
    UnreadableAnswerError,
    get_raw,
    kube_call,
)
from releasebot.edge.retry import RetryPolicy, Sleep, real_sleep

DEFAULT_LIST_BUDGET = timedelta(seconds=60)
"""The longest one listing may take: 5,000 nodes are 10 pages of a few hundred
milliseconds each; a minute means a server that never finishes, not a big cluster."""
EXTRA_PAGES = 2
"""Pages allowed beyond those ``max_items`` would fill: the last, short page, and one a
server may cut short (a real API server fills every page but the last)."""
SKIPPED_SHOWN = 5
"""Skipped items named one by one; the rest are counted in one more line."""
_EXPIRED = 410


@dataclass(frozen=True)
class ListBounds:
    """How much of a listing is read at most; validated on construction."""

    max_items: int
    page_size: int
    budget: timedelta = DEFAULT_LIST_BUDGET

    def __post_init__(self) -> None:
        if self.max_items < 1 or self.page_size < 1:
            raise ValueError("max_items and page_size must be at least 1")
        if self.budget <= timedelta(0):
            raise ValueError("the listing's budget must be positive")

    @property
    def max_pages(self) -> int:
        return -(-self.max_items // self.page_size) + EXTRA_PAGES


@dataclass(frozen=True)
class RawListing:
    """What one listing read: the objects, what was skipped, and whether it is whole."""

    items: tuple[tuple[int, Mapping[str, object]], ...]
    """Each object with its number in the listing (1-based, across pages)."""
    skipped: tuple[str, ...] = ()
    """One line per item that is not an object (the first ``SKIPPED_SHOWN``, then a count)."""
    skipped_count: int = 0
    cut: str | None = None
    """Why the listing stopped before its end (a bound); ``None``: read to the end."""
    restarts: int = 0
    """How often the listing started over (an expired continue token)."""


def list_objects(
    client: Client,
    path: str,
    *,
    kind: str,
    plural: str,
    what: str,
    bounds: ListBounds,
    params: Mapping[str, str] | None = None,
    permission: Permission | None = None,
    answers: Collection[int] = (),
    policy: RetryPolicy,
    sleep: Sleep = real_sleep,
    monotonic: Callable[[], float] = time.monotonic,
) -> RawListing:
    """Every object of the list at ``path`` (``api/v1/nodes``), within ``bounds``.

    ``kind`` names the object in skipped-item lines (``Node``), ``plural`` in bound lines
    (``nodes``), ``what`` the request in errors (``list nodes``). Raises ``Answered`` for a
    status in ``answers``, the domain's errors otherwise (``edge.kube``)."""
    started = monotonic()
    for restarts in range(2):
        reader = _Reader(kind, plural, bounds, started, monotonic)
        try:
            return reader.read(
                lambda token: kube_call(
                    what,
                    lambda: _page(client, path, params or {}, plural, bounds.page_size, token),
                    policy=policy,
                    sleep=sleep,
                    answers={*answers, _EXPIRED},
                    permission=permission,
                ),
                restarts,
            )
        except Answered as answer:
            if answer.failure.code != _EXPIRED or _EXPIRED in answers:
                raise
    raise ClusterUnavailableError(
        f"kubernetes {what}: the continue token expired twice in a row (the listing is "
        "slower than etcd compaction); retrying next cycle"
    )


Page = tuple[list[object], str | None]


class _Reader:
    """One pass over the pages of a listing."""

    def __init__(
        self,
        kind: str,
        plural: str,
        bounds: ListBounds,
        started: float,
        monotonic: Callable[[], float],
    ) -> None:
        self._kind = kind
        self._plural = plural
        self._bounds = bounds
        self._started = started
        self._monotonic = monotonic
        self._items: list[tuple[int, Mapping[str, object]]] = []
        self._skipped: list[str] = []
        self._skipped_count = 0
        self._number = 0

    def read(self, fetch: Callable[[str | None], Page], restarts: int) -> RawListing:
        bounds = self._bounds
        token: str | None = None
        for pages in range(bounds.max_pages):
            if pages and self._monotonic() - self._started > bounds.budget.total_seconds():
                return self._answer(
                    restarts,
                    f"not finished after {bounds.budget.total_seconds():g} s "
                    f"({pages} pages of {self._plural})",
                )
            page, token = fetch(token)
            for raw in page:
                self._number += 1
                if isinstance(raw, dict):
                    if len(self._items) >= bounds.max_items:
                        return self._answer(
                            restarts, f"more than {bounds.max_items} {self._plural}"
                        )
                    self._items.append((self._number, raw))
                else:
                    self._skip(raw)
            if token is None:
                return self._answer(restarts, None)
        return self._answer(restarts, f"more than {bounds.max_pages} pages of {self._plural}")

    def _skip(self, raw: object) -> None:
        self._skipped_count += 1
        if self._skipped_count <= SKIPPED_SHOWN:
            self._skipped.append(
                f"item {self._number} of the {self._kind} list is {_what(raw)}: skipped"
            )

    def _answer(self, restarts: int, cut: str | None) -> RawListing:
        skipped = list(self._skipped)
        rest = self._skipped_count - len(skipped)
        if rest > 0:
            skipped.append(f"{rest} more items of the {self._kind} list are not objects: skipped")
        return RawListing(tuple(self._items), tuple(skipped), self._skipped_count, cut, restarts)


def _what(raw: object) -> str:
    if raw is None:
        return "null"
    if isinstance(raw, bool):
        return "a boolean"
    if isinstance(raw, int | float):
        return "a number"
    if isinstance(raw, str):
        return "a string"
    if isinstance(raw, list):
        return "a list"
    return "not an object"


def _page(
    client: Client,
    path: str,
    params: Mapping[str, str],
    plural: str,
    size: int,
    token: str | None,
) -> Page:
    """One page of a list: its items as raw JSON, and the continue token if any."""
    query = {**params, "limit": str(size)}
    if token is not None:
        query["continue"] = token
    limit = KUBE_JSON_LIMITS.max_bytes
    answer = get_raw(client, path, query, max_bytes=limit)
    if answer.cut:
        raise UnreadableAnswerError(200, f"body is over {limit} bytes")
    try:
        body: Any = decode_json(answer.body, KUBE_JSON_LIMITS)
    except JsonRefusedError as error:
        raise UnreadableAnswerError(200, error.problem) from error
    if not isinstance(body, dict) or not isinstance(body.get("items"), list | None):
        raise UnreadableAnswerError(200, f"not a list of {plural}")
    items: list[object] = body.get("items") or []
    metadata = body.get("metadata")
    continued = metadata.get("continue") if isinstance(metadata, dict) else None
    return items, continued if isinstance(continued, str) and continued else None
