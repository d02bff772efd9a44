"""``GuardedCommands``: the chat commands that use the build cycle's machinery wait for it.

``releasebot run`` holds one cycle guard per process (``wiring.guard.SharedGuard``): the
cycle, notification delivery and these commands take it one block at a time, so on any
replica no command writes while a cycle does, and the commands share the cycle's own
reconcile service without ever using it beside a running cycle. While a cycle holds the
guard such a command waits for it (the person was told "queued" at once; these commands run
in the handler's background pool and answer through the ``response_url``), up to ``wait``:
a cycle still running then is answered with "not run", never left hanging.

Deliberately not here: the guard itself (``runtime.lock``), what a command does
(``service.commands``).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from datetime import timedelta

from releasebot.chat.slack import CommandRunner, Payload, ephemeral
from releasebot.domain.targets.commands import Command, Verb
from releasebot.edge.stop import Stopped

Hold = Callable[[], AbstractContextManager[bool]]
"""Holds the cycle guard for a block; yields False at once while anyone else holds it."""


class GuardedCommands:
    """Runs the commands that use the reconcile service (plan, missing, build, retry,
    rebuild) under the cycle guard, waiting for a cycle that holds it; the others at once."""

    GUARDED = frozenset({Verb.PLAN, Verb.MISSING, Verb.BUILD, Verb.RETRY, Verb.REBUILD})

    def __init__(
        self,
        inner: CommandRunner,
        hold: Hold,
        *,
        wait: timedelta = timedelta(minutes=10),
        poll: timedelta = timedelta(seconds=1),
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._inner = inner
        self._hold = hold
        self._wait = wait
        """Slack takes answers on a ``response_url`` for 30 minutes; a cycle takes minutes."""
        self._poll = poll.total_seconds()
        self._monotonic = monotonic
        self._closing = threading.Event()

    def run(self, command: Command, user: str) -> Payload:
        if command.verb not in self.GUARDED:
            return self._inner.run(command, user)
        deadline = self._monotonic() + self._wait.total_seconds()
        while True:
            with self._hold() as held:
                if held:
                    try:
                        return self._inner.run(command, user)
                    except Stopped:  # the shutdown ended the cycle's waits, this one's too
                        return ephemeral(
                            f"`{command}` was stopped: releasebot is shutting down. Ask again"
                            " in a minute."
                        )
            if self._monotonic() >= deadline:
                return ephemeral(
                    f"`{command}` was not run: a build cycle has been running for more than"
                    f" {_minutes(self._wait)}. Ask again once it is over."
                )
            if self._closing.wait(self._poll):
                return ephemeral(f"`{command}` was not run: releasebot is shutting down.")

    def close(self) -> None:
        """Stop waiting: commands still waiting for a cycle answer "not run" at once."""
        self._closing.set()


def _minutes(wait: timedelta) -> str:
    minutes = round(wait.total_seconds() / 60)
    if minutes >= 1:
        return f"{minutes} minute" + ("" if minutes == 1 else "s")
    return f"{wait.total_seconds():g} s"
