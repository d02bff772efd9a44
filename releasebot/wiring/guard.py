"""The database's cycle guard, as one process holds it, and this replica's name.

``releasebot run`` makes ONE ``SharedGuard`` on its one engine: the cycle, notification
delivery and the chat commands that write all hold it, one block at a time
(``CycleGuard.hold``), so on any replica nothing writes while a cycle does and, during a
leadership hand-over, two deliverers never search-then-post the same event at once.
``reconcile --once`` takes the same guard through ``guarded`` (its own engine: one cycle,
one process). Deliberately not here: what holds it (``wiring.run``, ``wiring.slack``).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass

from releasebot.config import Settings
from releasebot.config.pod import replica_identity
from releasebot.runtime.lock import CycleGuard, local_holder
from releasebot.runtime.runner import RunnerOptions
from releasebot.store.engine import make_engine
from releasebot.wiring.core import utc_now

GUARD_TTL = RunnerOptions.guard_ttl
"""SQLite guard rows lapse this long after a holder died (renewed every third of it)."""


def run_identity(settings: Settings) -> str:
    """This replica's name: ``run.identity``, else ``$POD_NAME``, else the host name
    (``config.pod``'s one rule)."""
    return replica_identity(settings)


def guard_holder(identity: str) -> str:
    """Who holds the cycle guard: ``<identity>@<host>:<pid>``, so a process on the same host
    can tell that a holder died (``runtime.lock``) instead of waiting for its row to lapse."""
    return local_holder(identity)


@dataclass(frozen=True)
class SharedGuard:
    """This process's cycle guard and the name it holds it under."""

    guard: CycleGuard
    holder: str

    def hold(self) -> AbstractContextManager[bool]:
        """Hold the guard for a block; yields False (at once) while anyone else holds it."""
        return self.guard.hold(self.holder, GUARD_TTL, utc_now)


@contextmanager
def guarded(settings: Settings, holder: str | None = None) -> Iterator[bool]:
    """Hold the database's cycle guard for the block (``reconcile --once``); yields whether
    it is held: False means another process runs a cycle right now."""
    engine = make_engine(settings.database.url)
    try:
        holder = holder or guard_holder(run_identity(settings))
        with SharedGuard(CycleGuard(engine), holder).hold() as held:
            yield held
    finally:
        engine.dispose()
