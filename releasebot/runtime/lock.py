"""``CycleGuard``: no two reconcile cycles ever write at once, whatever the leases say.

The Kubernetes Lease elects one replica to run cycles, but a lease can misbehave: a paused
leader wakes up after its lease expired, two clocks disagree, a CronJob run overlaps the
Deployment. The database is the one thing every writer shares, so it holds the guard:

- PostgreSQL: a session-level ``pg_try_advisory_lock(CYCLE_LOCK)`` on a dedicated
  connection (autocommit, so no transaction stays open), held for the whole cycle and
  released after it. A process that dies loses its connection, and the server drops the
  lock at once. ``CYCLE_LOCK`` is not the store's ``STORE_WRITE_LOCK``: the cycle's own
  small write transactions still take that one, so the two never wait on each other.
- SQLite (any database without advisory locks): a lease row in ``locks`` (holder,
  expires_at), taken when absent or expired in one ``BEGIN IMMEDIATE`` transaction,
  renewed while held (``hold`` renews from a thread), deleted on release. A process that
  dies holds it until ``expires_at``: keep the ttl short and renew.

``try_acquire`` never waits: a busy guard means another process is running a cycle right
now, and the caller skips this one (the next comes soon). Deliberately not here: leader
election (``releasebot.runtime.leader``), serialising single writes (``engine.lock_writes``).
"""

from __future__ import annotations

import logging
import os
import socket
import threading
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from datetime import datetime, timedelta
from types import TracebackType

from sqlalchemy import Connection, Engine, delete, exc, insert, select, text, update

from releasebot.domain.shared.errors import ReleasebotError
from releasebot.edge.parse import parse_decimal
from releasebot.store.decode import checked
from releasebot.store.engine import transaction, translate_error
from releasebot.store.tables import locks

log = logging.getLogger("releasebot.guard")

CYCLE_LOCK = 0x72625F6379636C65
"""PostgreSQL advisory lock key held for a whole reconcile cycle (``rb_cycle`` in ASCII).

Chosen like ``engine.STORE_WRITE_LOCK`` and ``engine.MIGRATION_LOCK``: fixed, so every
releasebot process on one database competes for it, and unlikely to collide with another
application's keys. ``pg_locks`` shows it as ``classid`` 1919049587, ``objid`` 1668901733."""

CYCLE_LOCK_NAME = "cycle"
"""The ``locks`` row name of the SQLite guard."""


class CycleGuard:
    """The database-held guard of one kind of work (the reconcile cycle by default).

    One instance is held by one holder at a time; use ``try_acquire``/``release``, or
    ``with guard.hold(holder, ttl, clock) as held:``. Thread-safe: a keepalive thread may
    renew while another thread runs the cycle. ``hold`` is how the threads of one process
    share one instance (the cycle, notification delivery, chat commands): one block at a
    time holds it, any other gets False at once, whatever holder name it gives.
    """

    def __init__(
        self, engine: Engine, *, name: str = CYCLE_LOCK_NAME, key: int = CYCLE_LOCK
    ) -> None:
        self._engine = engine
        self._name = name
        self._key = key
        self._advisory = engine.dialect.name == "postgresql"
        self._lock = threading.RLock()
        self._in_use = threading.Lock()  # one `hold` block at a time in this process
        self._conn: Connection | None = None  # PostgreSQL: the session holding the lock
        self._holder: str | None = None
        self._ttl = timedelta()

    @property
    def holder(self) -> str | None:
        """Who holds the guard through this instance; ``None`` when it is not held."""
        return self._holder

    @property
    def held(self) -> bool:
        return self._holder is not None

    @property
    def expires(self) -> bool:
        """Whether the guard lapses unless renewed (the SQLite lease row)."""
        return not self._advisory

    def try_acquire(self, holder: str, ttl: timedelta, now: datetime) -> bool:
        """Take the guard for ``holder`` if nobody else has it; never waits.

        ``ttl`` only matters for the lease row: it lapses at ``now + ttl`` unless renewed.
        Raises ``StoreUnavailableError``/``StoreError`` when the database cannot say.
        """
        with self._lock:
            if self._holder is not None and self._holder != holder:
                return False  # this instance is busy for someone else in this process
            taken = self._take_advisory() if self._advisory else self._take_row(holder, ttl, now)
            if taken:
                self._holder, self._ttl = holder, ttl
            return taken

    def renew(self, now: datetime) -> bool:
        """Extend the lease row to ``now + ttl``; False (and no longer held) if it was lost.

        An advisory lock needs no renewal: it lives as long as its session.
        """
        with self._lock:
            if self._holder is None:
                return False
            if self._advisory:
                return True
            with self._transaction() as conn:
                changed = conn.execute(
                    update(locks)
                    .where(locks.c.name == self._name, locks.c.holder == self._holder)
                    .values(expires_at=now + self._ttl)
                ).rowcount
            if changed != 1:
                log.warning(
                    "the cycle guard lapsed and was taken over", extra={"guard": self._name}
                )
                self._holder = None
            return changed == 1

    def release(self) -> None:
        """Give the guard up; a no-op when not held. Never raises for a lost database:
        the advisory lock dies with its session, the row with its ``expires_at``."""
        with self._lock:
            holder, self._holder = self._holder, None
            if holder is None:
                return
            try:
                if self._advisory:
                    self._release_advisory()
                else:
                    with self._transaction() as conn:
                        conn.execute(
                            delete(locks).where(
                                locks.c.name == self._name, locks.c.holder == holder
                            )
                        )
            except ReleasebotError as error:
                log.warning("could not release the cycle guard: %s", error)

    @contextmanager
    def hold(self, holder: str, ttl: timedelta, clock: Callable[[], datetime]) -> Iterator[bool]:
        """``try_acquire``; yields whether the guard is held; renews every ``ttl / 3`` from a
        daemon thread while the block runs (lease row only); releases at the end.

        Yields False at once while another block of this process holds it (another thread
        of the same process must not take it as its own) or another process does.
        """
        if not self._in_use.acquire(blocking=False):
            yield False
            return
        try:
            with self._held(holder, ttl, clock) as held:
                yield held
        finally:
            self._in_use.release()

    @contextmanager
    def _held(self, holder: str, ttl: timedelta, clock: Callable[[], datetime]) -> Iterator[bool]:
        if not self.try_acquire(holder, ttl, clock()):
            yield False
            return
        stop = threading.Event()
        keeper = None
        if self.expires:
            keeper = threading.Thread(
                target=self._keep, args=(stop, ttl / 3, clock), name="cycle-guard", daemon=True
            )
            keeper.start()
        try:
            yield True
        finally:
            stop.set()
            if keeper is not None:
                keeper.join(timeout=ttl.total_seconds())
            self.release()

    def stop_renewing(self) -> None:
        """Forget the guard without releasing it: an abandoned cycle may still write, so the
        row must lapse by itself (and an advisory lock dies with the process)."""
        with self._lock:
            self._holder = None
            self._conn = None

    def __enter__(self) -> CycleGuard:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc_value: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.release()

    # -- PostgreSQL ----------------------------------------------------------------------

    def _take_advisory(self) -> bool:
        if self._conn is not None:
            return True  # already ours: a session lock would count twice, do not stack it
        try:
            conn = self._engine.connect()
        except exc.SQLAlchemyError as error:
            raise translate_error(error, self._engine.url, connecting=True) from error
        try:
            conn.execution_options(isolation_level="AUTOCOMMIT")
            statement = text("SELECT pg_try_advisory_lock(:key)")
            taken = bool(conn.execute(statement, {"key": self._key}).scalar())
        except exc.SQLAlchemyError as error:
            conn.invalidate()
            conn.close()
            raise translate_error(error, self._engine.url) from error
        if taken:
            self._conn = conn
        else:
            conn.close()
        return taken

    def _release_advisory(self) -> None:
        conn, self._conn = self._conn, None
        if conn is None:
            return
        try:
            statement = text("SELECT pg_advisory_unlock(:key)")
            unlocked = bool(conn.execute(statement, {"key": self._key}).scalar())
        except exc.SQLAlchemyError:
            unlocked = False
        if not unlocked:
            # Never hand a session that may still hold the lock back to the pool.
            conn.invalidate()
        conn.close()

    # -- the lease row -------------------------------------------------------------------

    def _take_row(self, holder: str, ttl: timedelta, now: datetime) -> bool:
        with self._transaction() as conn:
            row = conn.execute(select(locks).where(locks.c.name == self._name)).one_or_none()
            values = {"holder": holder, "expires_at": now + ttl}
            if row is not None:
                checked(locks, row)
            if row is None:
                conn.execute(insert(locks).values(name=self._name, **values))
                return True
            if row.holder != holder and row.expires_at > now and not holder_died(row.holder):
                return False
            conn.execute(update(locks).where(locks.c.name == self._name).values(**values))
            if row.holder != holder:
                log.warning(
                    "took over the cycle guard from %s, whose lease had lapsed or who died",
                    row.holder,
                    extra={"guard": self._name},
                )
            return True

    def _transaction(self) -> AbstractContextManager[Connection]:
        """One write transaction (``BEGIN IMMEDIATE`` on SQLite); errors translated."""
        return transaction(self._engine, write=True)

    def _keep(self, stop: threading.Event, every: timedelta, clock: Callable[[], datetime]) -> None:
        while not stop.wait(every.total_seconds()):
            try:
                if not self.renew(clock()):
                    return
            except ReleasebotError as error:  # the database blipped: try again next time
                log.warning("could not renew the cycle guard: %s", error)


def local_holder(identity: str) -> str:
    """``<identity>@<host>:<pid>``: a holder name another process on this host can check."""
    return f"{identity}@{socket.gethostname()}:{os.getpid()}"


def holder_died(holder: str) -> bool:
    """True when ``holder`` names a process on THIS host that no longer exists.

    Only then may a lease row be taken before it lapses (a ``reconcile --once`` killed
    mid-cycle must not block the next CronJob run for a minute). A holder on another host,
    or one whose process may still run, is left alone.
    """
    _, _, place = holder.rpartition("@")
    host, _, pid_text = place.rpartition(":")
    pid = parse_decimal(pid_text, max_digits=7)  # the row is outside text: ASCII digits only
    if host != socket.gethostname() or pid is None or pid == 0 or pid == os.getpid():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:  # someone else's live process
        return False
    return False
