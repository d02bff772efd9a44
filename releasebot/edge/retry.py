"""The one bounded-retry policy for ONE call inside an adapter, and the Retry-After header.

Feeds, the registry and the Kubernetes API are retried alike: ``retries`` extra attempts
after a failure another attempt may mend (network, timeout, 429, 5xx), pausing ``backoff``
doubled per attempt and capped at ``max_backoff``. A server that says how long to wait
(``Retry-After``) is believed up to ``max_backoff``; one asking for longer ends the call at
once and its wait travels in the error (``TemporaryError.retry_after``) to the service,
unless the policy caps such waits instead (``cap_long_waits``). An overall deadline, when
given, is never overslept. Sleeping is injected, so tests record the pauses.

Deliberately not here: deciding which failures are transient (each adapter knows its
protocol and raises ``TransientFailure``), and retries across cycles (the service's, driven
by the error's class).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from email.utils import parsedate_to_datetime
from typing import TypeVar

from releasebot.edge.parse import is_ascii_digits, parse_decimal

T = TypeVar("T")

MAX_RETRIES = 10
"""The most extra attempts any call gets: one call must not turn into minutes of hammering."""

MAX_RETRY_AFTER = timedelta(days=1)
"""The longest ``Retry-After`` believed: a server asking for more is asked again a day later."""

Sleep = Callable[[timedelta], None]


def real_sleep(pause: timedelta) -> None:
    time.sleep(pause.total_seconds())


@dataclass(frozen=True)
class RetryPolicy:
    """How one call is retried; validated on construction (``ValueError``)."""

    retries: int = 2
    """Extra attempts after the first. Default 2: a blip is ridden out, an outage is left to
    the next cycle."""
    backoff: timedelta = timedelta(seconds=1)
    """The first pause, doubled per attempt (1 s, 2 s, 4 s …)."""
    max_backoff: timedelta = timedelta(seconds=10)
    """The longest pause, and the longest ``Retry-After`` waited for inside a call."""
    cap_long_waits: bool = False
    """A ``Retry-After`` longer than ``max_backoff``: wait ``max_backoff`` and try again
    (True), or give up at once and hand the wait to the caller (False, the default)."""

    def __post_init__(self) -> None:
        if isinstance(self.retries, bool) or not 0 <= self.retries <= MAX_RETRIES:
            raise ValueError(f"retries must be between 0 and {MAX_RETRIES}, got {self.retries}")
        if self.backoff < timedelta(0) or self.max_backoff < timedelta(0):
            raise ValueError("backoff and max_backoff must not be negative")

    def pause(self, attempt: int, asked: timedelta | None = None) -> timedelta | None:
        """The pause after failed attempt ``attempt`` (counting from 1) before the next one;
        ``None``: give up. ``asked`` is the server's ``Retry-After``, if it sent one."""
        if attempt > self.retries:
            return None
        if asked is not None:
            if asked <= self.max_backoff:
                return max(asked, timedelta(0))
            return self.max_backoff if self.cap_long_waits else None
        pause: timedelta = self.backoff * 2 ** (attempt - 1)
        return min(pause, self.max_backoff)


class TransientFailure(Exception):
    """Raised inside a retried call for a failure another attempt may mend.

    ``problem`` is one line saying what failed; ``wait`` is how long the server asked to
    wait, if it said. Raise it ``from`` the library's exception: the final error keeps it.
    """

    def __init__(self, problem: str, wait: timedelta | None = None) -> None:
        super().__init__(problem)
        self.problem = problem
        self.wait = wait


def call_with_retries(
    call: Callable[[], T],
    policy: RetryPolicy,
    sleep: Sleep,
    *,
    give_up: Callable[[str, TransientFailure], Exception],
    deadline: float | None = None,
    on_retry: Callable[[TransientFailure, timedelta], None] | None = None,
) -> T:
    """``call()`` until it returns, retried by ``policy`` while it raises ``TransientFailure``.

    When the attempts are spent (or the server asks for too long, or the next pause would
    outlast ``deadline``, a ``time.monotonic()`` value), raises ``give_up(problem, last)``
    from the last failure's cause; ``problem`` says how many attempts were made.
    ``on_retry`` hears every failure that is retried, with the pause before the next try.
    """
    attempt = 0
    while True:
        attempt += 1
        try:
            return call()
        except TransientFailure as failure:
            pause = policy.pause(attempt, failure.wait)
            left = None if deadline is None else deadline - time.monotonic()
            if pause is not None and left is not None and pause.total_seconds() >= left:
                pause = None  # the pause would outlast the deadline
            if pause is None:
                problem = failure.problem
                if attempt > 1:
                    problem = f"{problem} (after {attempt} attempts)"
                raise give_up(problem, failure) from failure.__cause__
            if on_retry is not None:
                on_retry(failure, pause)
        sleep(pause)


def parse_retry_after(
    value: str | None, *, now: Callable[[], datetime] = lambda: datetime.now(UTC)
) -> timedelta | None:
    """A ``Retry-After`` header as a wait: delta-seconds or an HTTP date (RFC 9110), at most
    ``MAX_RETRY_AFTER``, never negative (a date in the past means now); ``None`` when the
    header is absent or malformed."""
    if not value:
        return None
    text = value.strip()
    if is_ascii_digits(text):  # "²" is not a number here
        seconds = parse_decimal(text, max_digits=12)  # never parse a megabyte of digits
        return min(timedelta(seconds=min(seconds or 10**9, 10**9)), MAX_RETRY_AFTER)
    try:
        when = parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:
        return None
    return min(max(when - now(), timedelta(0)), MAX_RETRY_AFTER)
