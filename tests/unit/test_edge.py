"""What every adapter shares (``releasebot.edge``): one-line third-party text, the
``Retry-After`` header, and the one bounded-retry policy with its loop (pauses recorded,
never slept; the deadline played with a fake of ``time.monotonic``).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from releasebot.edge import retry
from releasebot.edge.retry import (
    MAX_RETRY_AFTER,
    RetryPolicy,
    TransientFailure,
    call_with_retries,
    parse_retry_after,
)
from releasebot.edge.text import one_line

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


def test_one_line_collapses_escapes_and_cuts() -> None:
    assert one_line("a\n\n b\tc ") == "a b c"
    assert one_line("red \x1b[31malert\x07") == "red alert"  # the sequence goes whole
    cut = one_line("x" * 1000, 50)
    assert (len(cut), cut[-1]) == (50, "…")
    assert one_line(ValueError("boom")) == "boom"
    assert len(one_line("é" * 10**6)) == 200  # a huge body costs a bounded amount of work


@pytest.mark.parametrize(
    ("header", "wait"),
    [
        (None, None),
        ("", None),
        ("soon", None),
        ("-5", None),
        ("1.5", None),
        ("3", timedelta(seconds=3)),
        (" 7 ", timedelta(seconds=7)),
        ("3600", timedelta(hours=1)),
        ("9" * 40, MAX_RETRY_AFTER),
        ("9" * 100_000, MAX_RETRY_AFTER),
        ("Mon, 30 Nov 2026 12:00:30 GMT", timedelta(seconds=30)),
        ("Wed, 21 Oct 2015 07:28:00 GMT", timedelta(0)),  # in the past: now
        ("Mon, 30 Nov 2026 12:00:30", None),  # no zone: not an HTTP date
        ("Fri, 30 Nov 2029 12:00:00 GMT", MAX_RETRY_AFTER),
    ],
)
def test_retry_after(header: str | None, wait: timedelta | None) -> None:
    assert parse_retry_after(header, now=lambda: NOW) == wait


def test_the_policy_doubles_caps_and_gives_up() -> None:
    policy = RetryPolicy(retries=4, backoff=timedelta(seconds=1), max_backoff=timedelta(seconds=5))
    pauses = [policy.pause(attempt) for attempt in range(1, 6)]
    assert pauses == [timedelta(seconds=s) for s in (1, 2, 4, 5)] + [None]


def test_a_server_wait_is_believed_up_to_the_cap() -> None:
    policy = RetryPolicy(max_backoff=timedelta(seconds=10))
    assert policy.pause(1, timedelta(seconds=7)) == timedelta(seconds=7)
    assert policy.pause(1, timedelta(0)) == timedelta(0)
    assert policy.pause(1, timedelta(minutes=5)) is None  # handed to the caller
    capped = RetryPolicy(max_backoff=timedelta(seconds=10), cap_long_waits=True)
    assert capped.pause(1, timedelta(minutes=5)) == timedelta(seconds=10)


@pytest.mark.parametrize("retries", [-1, 11, True])
def test_retries_are_bounded(retries: int) -> None:
    with pytest.raises(ValueError, match="retries must be between 0 and 10"):
        RetryPolicy(retries=retries)


class Flaky:
    """Fails ``times`` times (from a library error), then answers."""

    def __init__(self, times: int, wait: timedelta | None = None) -> None:
        self.left = times
        self.calls = 0
        self.wait = wait

    def __call__(self) -> str:
        self.calls += 1
        if self.left:
            self.left -= 1
            try:
                raise OSError("connection reset")
            except OSError as error:
                raise TransientFailure("reset", self.wait) from error
        return "answer"


class Gone(Exception):
    pass


def give_up(problem: str, failure: TransientFailure) -> Exception:
    return Gone(problem, failure.wait)


def test_the_loop_retries_then_answers() -> None:
    pauses: list[timedelta] = []
    flaky = Flaky(2)
    assert call_with_retries(flaky, RetryPolicy(), pauses.append, give_up=give_up) == "answer"
    assert (flaky.calls, pauses) == (3, [timedelta(seconds=1), timedelta(seconds=2)])


def test_the_loop_gives_up_saying_how_often_it_tried() -> None:
    pauses: list[timedelta] = []
    heard: list[timedelta] = []
    with pytest.raises(Gone) as caught:
        call_with_retries(
            Flaky(5),
            RetryPolicy(retries=2),
            pauses.append,
            give_up=give_up,
            on_retry=lambda failure, pause: heard.append(pause),
        )
    assert caught.value.args[0] == "reset (after 3 attempts)"
    assert isinstance(caught.value.__cause__, OSError)  # the library's error stays the cause
    assert pauses == heard == [timedelta(seconds=1), timedelta(seconds=2)]


def test_one_attempt_says_so_without_a_count() -> None:
    with pytest.raises(Gone) as caught:
        call_with_retries(Flaky(1), RetryPolicy(retries=0), lambda _: None, give_up=give_up)
    assert caught.value.args[0] == "reset"


def test_a_long_server_wait_ends_the_call_and_travels_on() -> None:
    pauses: list[timedelta] = []
    flaky = Flaky(1, wait=timedelta(hours=1))
    with pytest.raises(Gone) as caught:
        call_with_retries(flaky, RetryPolicy(), pauses.append, give_up=give_up)
    assert caught.value.args == ("reset", timedelta(hours=1))
    assert (flaky.calls, pauses) == (1, [])


def test_a_pause_that_would_outlast_the_deadline_is_not_taken(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    clock = [100.0]
    monkeypatch.setattr(retry.time, "monotonic", lambda: clock[0])
    pauses: list[timedelta] = []
    with pytest.raises(Gone):
        call_with_retries(Flaky(3), RetryPolicy(), pauses.append, give_up=give_up, deadline=101.5)
    assert pauses == [timedelta(seconds=1)]  # the second pause (2 s) would end past 101.5
