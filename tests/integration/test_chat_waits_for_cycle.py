"""Chat commands that meet a running cycle wait for it (``chat.guarded.GuardedCommands``).

The signed slash-command endpoint and handler of ``test_slash_http`` (its response_url
stand-in over real HTTP), with the commands that write run under a real ``CycleGuard`` on
SQLite, as ``releasebot run`` wires them. A cycle in progress is another holder of the
guard (another replica, or a ``reconcile --once``), which runs a real cycle while it holds
it. Covers: a chat ``build`` during that cycle is answered "queued" at once and runs once
the cycle is over; the wait is bounded ("not run", nothing launched); shutting down ends
the wait; commands that only read do not wait.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest
from sqlalchemy import Engine

from releasebot.chat.guarded import GuardedCommands
from releasebot.chat.slack import SlashCommandEndpoint, SlashCommandHandler
from releasebot.runtime.lock import CycleGuard
from releasebot.store import migrate
from releasebot.store.engine import make_engine
from releasebot.wiring.guard import SharedGuard
from tests.integration.test_slash_http import (
    ADMIN,
    CURRENT,
    OPS_CHANNEL,
    SECRET,
    ChatRig,
    ResponseUrlServer,
    make_chat_rig,
)

OLDER = "580.95.05-flatcar4593.2.4"  # not the policy's: only a person builds it
QUEUED = (
    "Queued `build 580.95.05 4593.2.4 amd64`; I will answer here when it is done"
    " (after the running build cycle, if there is one)."
)


@pytest.fixture
def engine(tmp_path: Path) -> Iterator[Engine]:
    engine = make_engine(f"sqlite:///{tmp_path / 'state.db'}")
    migrate.upgrade(engine)
    yield engine
    engine.dispose()


class Rig:
    """The chat rig with its commands guarded; ``cycle`` is the other guard holder."""

    def __init__(self, chat: ChatRig, engine: Engine, wait: timedelta) -> None:
        self.chat = chat
        self.cycle = CycleGuard(engine)
        self.guarded = GuardedCommands(
            chat.service,
            SharedGuard(CycleGuard(engine), "replica-a").hold,
            wait=wait,
            poll=timedelta(milliseconds=20),
        )
        self.handler = SlashCommandHandler(
            self.guarded,
            allowed_users=[ADMIN],
            allowed_channels=[OPS_CHANNEL],
            response_url_prefix=chat.replies.prefix,
        )
        chat.endpoint = SlashCommandEndpoint(self.handler, signing_secret=SECRET)

    def hold(self) -> None:
        assert self.cycle.try_acquire("replica-b", timedelta(minutes=1), datetime.now(UTC))

    def close(self) -> None:
        self.guarded.close()
        self.handler.close()


@pytest.fixture
def make(test_data: Path, engine: Engine) -> Iterator[Callable[..., Rig]]:
    made: list[Rig] = []
    with ResponseUrlServer() as replies, httpx.Client(timeout=5) as http:

        def factory(wait: timedelta = timedelta(seconds=30)) -> Rig:
            rig = Rig(make_chat_rig(test_data, http, replies), engine, wait)
            made.append(rig)
            return rig

        try:
            yield factory
        finally:
            for rig in made:
                rig.close()
                rig.cycle.release()


def test_a_build_during_a_cycle_is_queued_and_runs_after_it(make: Callable[..., Rig]) -> None:
    rig = make()
    chat = rig.chat
    rig.hold()  # the cycle starts: it holds the guard and launches the policy's target
    chat.reconciler.cycle()
    [cycle_job] = chat.launcher.created
    assert chat.store.target(CURRENT) is not None

    _, payload = chat.post("build 580.95.05 4593.2.4 amd64")
    assert payload["text"] == QUEUED  # at once, while the cycle still runs
    # It waits: several polls later nothing was launched and nothing answered.
    with pytest.raises(TimeoutError):
        chat.replies.wait(timeout=0.5)
    assert chat.launcher.created == [cycle_job]
    assert chat.store.target(OLDER) is None

    rig.cycle.release()  # the cycle is over
    [follow_up] = chat.replies.wait()
    assert follow_up["response_type"] == "in_channel"
    [_, chat_job] = chat.launcher.created
    assert follow_up["text"].startswith(f"<@{ADMIN}> started `{OLDER}` (amd64): job `{chat_job}`")
    record = chat.store.target(OLDER)
    assert record is not None
    assert record.attempts == 1


def test_the_wait_is_bounded_and_nothing_runs(make: Callable[..., Rig]) -> None:
    rig = make(wait=timedelta(milliseconds=300))
    chat = rig.chat
    rig.hold()  # a cycle that outlasts the wait
    _, payload = chat.post("build 580.95.05 4593.2.4 amd64")
    assert payload["text"] == QUEUED
    [follow_up] = chat.replies.wait()
    assert follow_up["text"] == (
        "`build 580.95.05 4593.2.4 amd64` was not run: a build cycle has been running for"
        " more than 0.3 s. Ask again once it is over."
    )
    assert chat.launcher.created == []
    assert chat.store.target(OLDER) is None


def test_shutting_down_ends_the_wait(make: Callable[..., Rig]) -> None:
    rig = make(wait=timedelta(minutes=10))
    chat = rig.chat
    rig.hold()
    chat.post("retry " + CURRENT)
    closing = threading.Timer(0.2, rig.guarded.close)
    closing.start()
    [follow_up] = chat.replies.wait(timeout=10)
    closing.join()
    assert follow_up["text"] == f"`retry {CURRENT}` was not run: releasebot is shutting down."
    assert chat.launcher.created == []


def test_reading_commands_do_not_wait(make: Callable[..., Rig]) -> None:
    rig = make(wait=timedelta(minutes=10))
    rig.hold()
    _, payload = rig.chat.post("status")
    assert payload["text"].startswith("*Status*: automatic builds are running")
