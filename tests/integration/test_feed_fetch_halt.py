"""The feed fetcher stopped by the process's ``Halt``, over real sockets on loopback.

A feed on a black hole (accepts, never answers) holds a fetch in its read; setting the halt
shuts that connection down and the fetch raises ``Stopped``, not a feed error (being
stopped is not the feed's failure). A fetch in a retry pause (the feed answered 503)
stops the same way, and a fetch asked after the halt never connects. ``Halt`` itself: its
sleep, its hooks (run once, at once when already set, never after their block).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from datetime import timedelta

import httpx
import pytest

from releasebot.edge.stop import Halt, Stopped
from releasebot.sources.fetch import HttpFeedFetcher
from tests.support.blackhole import BlackHole
from tests.support.feedserver import FeedServer, Reply
from tests.support.runprocess import wait_for


@pytest.fixture
def black_hole() -> Iterator[BlackHole]:
    with BlackHole() as hole:
        yield hole


def fetcher(halt: Halt, client: httpx.Client) -> HttpFeedFetcher:
    return HttpFeedFetcher(client, retries=3, sleep=halt.sleep, halt=halt)


def test_a_request_in_flight_is_ended_by_the_halt(black_hole: BlackHole) -> None:
    halt, outcome = Halt(), []
    with httpx.Client(timeout=60) as client:
        fetch = fetcher(halt, client)

        def poll() -> None:
            try:
                fetch.fetch("flatcar/stable", black_hole.url + "/releases.json", None)
            except BaseException as error:  # noqa: BLE001 (what the test looks at)
                outcome.append(error)

        polling = threading.Thread(target=poll)
        polling.start()
        wait_for(lambda: black_hole.accepted, timeout=30, what="the feed request")
        halt.set()
        polling.join(timeout=30)  # without the halt: 60 s per read, then retries
    assert not polling.is_alive()
    [error] = outcome
    assert isinstance(error, Stopped)


def test_a_retry_pause_is_ended_by_the_halt() -> None:
    halt, outcome = Halt(), []
    asked = threading.Event()
    with FeedServer() as server:

        def unavailable(_request: object) -> Reply:
            asked.set()
            return Reply(503, body=b"busy")

        server.route("/nvidia.json", unavailable)
        with httpx.Client(timeout=10) as client:
            fetch = HttpFeedFetcher(
                client, retries=3, sleep=halt.sleep, halt=halt, backoff=timedelta(hours=1)
            )

            def poll() -> None:
                try:
                    fetch.fetch("nvidia", server.url("/nvidia.json"), None)
                except BaseException as error:  # noqa: BLE001 (what the test looks at)
                    outcome.append(error)

            polling = threading.Thread(target=poll)
            polling.start()
            assert asked.wait(10)
            halt.set()
            polling.join(timeout=30)  # without the halt: an hour's pause
    assert not polling.is_alive()
    [error] = outcome
    assert isinstance(error, Stopped)


def test_nothing_is_asked_after_the_halt(black_hole: BlackHole) -> None:
    halt = Halt()
    halt.set()
    with httpx.Client(timeout=60) as client, pytest.raises(Stopped):
        fetcher(halt, client).fetch("nvidia", black_hole.url + "/nvidia.json", None)
    assert black_hole.accepted == 0


def test_the_halt_wakes_sleeps_and_runs_each_hook_once() -> None:
    halt, ran = Halt(), []
    halt.sleep(timedelta(0))  # not set: an ordinary pause
    with halt.hook(lambda: ran.append("in flight")):
        pass
    with halt.hook(lambda: ran.append("waiting")):
        halt.set()
        halt.set()
    assert ran == ["waiting"]  # the finished block's hook was dropped
    with halt.hook(lambda: ran.append("late")):
        pass
    assert ran == ["waiting", "late"]  # already set: at once
    with pytest.raises(Stopped):
        halt.sleep(timedelta(hours=1))
    with pytest.raises(Stopped):
        halt.check()
