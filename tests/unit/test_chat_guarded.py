"""Which chat commands wait for the cycle guard (``chat.guarded.GuardedCommands``).

Every command that uses the reconcile service (``plan``, ``missing``, ``build``, ``retry``,
``rebuild``) runs only while holding the guard, since ``releasebot run`` hands the chat the
cycle's own reconcile service; the others run at once. The real guard, the Slack endpoint
and the waiting are in ``tests/integration/test_chat_waits_for_cycle.py``.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta

import pytest

from releasebot.chat.commands import parse_command
from releasebot.chat.guarded import GuardedCommands
from releasebot.chat.slack import Payload
from releasebot.domain.targets.commands import Command
from releasebot.edge.stop import Stopped

TAG = "580.178.04-flatcar4593.2.5"


class Inner:
    def __init__(self) -> None:
        self.ran: list[str] = []

    def run(self, command: Command, user: str) -> Payload:
        self.ran.append(command.verb.value)
        return {"text": "done"}


@contextmanager
def taken() -> Iterator[bool]:
    yield False  # a cycle holds the guard, all the time


@pytest.mark.parametrize(
    "text", ["plan", "missing", "build 580.178.04 4593.2.5", f"retry {TAG}", f"rebuild {TAG}"]
)
def test_a_command_using_the_reconcile_service_never_runs_beside_a_cycle(text: str) -> None:
    inner = Inner()
    guarded = GuardedCommands(inner, taken, wait=timedelta(0), poll=timedelta(0))
    answer = guarded.run(parse_command(text), "U1")
    assert inner.ran == []
    assert "was not run: a build cycle has been running" in answer["text"]


@pytest.mark.parametrize("text", ["status", "help", "pause", "resume", "release gpu-1"])
def test_the_other_commands_run_at_once(text: str) -> None:
    inner = Inner()
    guarded = GuardedCommands(inner, taken, wait=timedelta(0), poll=timedelta(0))
    assert guarded.run(parse_command(text), "U1") == {"text": "done"}
    assert inner.ran == [text.split()[0]]


def test_a_command_the_shutdown_stops_is_answered_not_dropped() -> None:
    """The commands share the cycle's halt: a shutdown ends their waits with ``Stopped``
    (a BaseException no handler catches), and the person who was told "queued" is told why."""

    class Stopping(Inner):
        def run(self, command: Command, user: str) -> Payload:
            raise Stopped

    @contextmanager
    def free() -> Iterator[bool]:
        yield True

    guarded = GuardedCommands(Stopping(), free, wait=timedelta(0), poll=timedelta(0))
    answer = guarded.run(parse_command("plan"), "U1")
    assert "was stopped: releasebot is shutting down" in answer["text"]
