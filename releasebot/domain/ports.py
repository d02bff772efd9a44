"""The ports: what the use cases need from the outside world, as Protocols.

Each port has a real adapter and an in-memory one side by side (``store/sql.py`` and
``store/memory.py``, ``sources/fetch.py`` and the tests' feed server); both satisfy the same
contract tests.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

from releasebot.domain.models import (
    DriverRelease,
    FeedState,
    FlatcarRelease,
    PlannedTarget,
    TargetRecord,
    Validators,
)


@dataclass(frozen=True)
class FetchedBody:
    """A feed answered with a body that differs from the last one seen."""

    body: bytes
    validators: Validators
    requests: int = 1


@dataclass(frozen=True)
class Unchanged:
    """The feed is unchanged since the validators were taken (304, or the same body hash)."""

    validators: Validators
    requests: int = 1


FetchResult = FetchedBody | Unchanged


class FeedFetcher(Protocol):
    """Reads one feed URL, conditionally when ``validators`` from a previous read are given.

    Raises ``FeedUnavailableError``, ``FeedRejectedError`` or ``FeedFormatError`` (never a
    transport library's exception).
    """

    def fetch(self, feed: str, url: str, validators: Validators | None) -> FetchResult: ...


class StateStore(Protocol):
    """Everything releasebot remembers. Each method is one transaction.

    Nothing is ever deleted because a feed changed: releases that vanish stay known, targets
    that drop out of the plan are kept with ``required=False``.
    """

    def feed_state(self, feed: str) -> FeedState | None: ...

    def feed_states(self) -> list[FeedState]: ...

    def record_flatcar_feed(
        self,
        feed: str,
        url: str,
        releases: Sequence[FlatcarRelease],
        validators: Validators,
        now: datetime,
    ) -> None:
        """Store a changed Flatcar feed body: upsert releases, mark which the feed lists."""

    def record_driver_feed(
        self,
        feed: str,
        url: str,
        drivers: Sequence[DriverRelease],
        validators: Validators,
        now: datetime,
    ) -> None:
        """Store a changed NVIDIA feed body."""

    def record_feed_unchanged(
        self, feed: str, url: str, validators: Validators, now: datetime
    ) -> None:
        """A poll found nothing new: only poll timestamps (and fresh validators) change."""

    def record_feed_failure(self, feed: str, url: str, error: str, now: datetime) -> None:
        """A poll failed: the error is kept, the last good data is left untouched."""

    def flatcar_releases(self, feed: str) -> list[FlatcarRelease]:
        """Every release the feed has ever listed, whether it still lists it or not."""

    def driver_releases(self, feed: str) -> list[DriverRelease]:
        """Every driver release the NVIDIA feed has ever listed."""

    def sync_targets(self, planned: Sequence[PlannedTarget], now: datetime) -> list[TargetRecord]:
        """Make ``planned`` the required targets; return them as stored, in plan order.

        New targets are inserted, changed ones updated, targets no longer planned are kept
        with ``required=False``. A plan identical to the stored one writes nothing.
        """

    def targets(self, *, required_only: bool = True) -> list[TargetRecord]: ...
