"""Use case: drain the outbox into the chat, in order, without losing or repeating a thing.

Events were committed with the state changes they announce (``StateStore.save``); this
service delivers them later, so Slack being slow, down or rate-limiting never blocks a
build. One round (``deliver``) takes the due events oldest first:

- per message key strictly in order: an earlier undelivered event of a key holds back the
  later ones (an update must not overtake the post it edits);
- a temporary error (network, 5xx, 429) marks the event undelivered with a capped
  exponential backoff (at least the ``Retry-After``) and ends the round: Slack is not
  hammered while it is down;
- a permanent error (bad token, channel, blocks) marks the event undelivered with a long
  backoff and logs once; it is never dropped. Token or channel problems end the round;
  a problem with one message only holds back its own key;
- a success marks the event delivered together with its message ref, in one transaction.

Nothing is sent twice: the notifier searches for an already-posted message before every
post (see ``notify/slack.py``), which closes the window between Slack's answer and
``mark_delivered``. This module does not render, talk HTTP, or schedule itself.

``DeliveryOutage`` keeps the log of rounds that cannot run at all (the database is away:
the guard or the outbox cannot be read) to one warning when the outage starts and one line
when delivery works again, however many rounds fail in between (every ten seconds).

``BacklogWatch`` says when notifications stop going out for any reason (Slack refusing,
rounds always finding the cycle guard taken, a bug): a backlog that has not shrunk for
``stuck_after`` is one warning per episode and the ``releasebot_notification_stuck``
gauge; each round reports the backlog and its oldest event's time (``OutboxState``), and
whether it ran at all (``DeliveryRound``), so the runner can run a round that found the
guard taken as soon as its own cycle gives the guard back.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Protocol

from releasebot.domain.shared.errors import (
    ChatRejectedError,
    PermanentError,
    ReleasebotError,
    TemporaryError,
)
from releasebot.domain.targets.builds import retry_delay
from releasebot.domain.targets.events import Event, MessageRef, StoredEvent

log = logging.getLogger("releasebot.notifications")


class Outbox(Protocol):
    """What delivery needs of the state store (``StateStore`` plus ``outbox_events``)."""

    def pending_events(self, now: datetime, limit: int = 50) -> list[StoredEvent]: ...

    def outbox_events(self, message_key: str) -> list[StoredEvent]:
        """Every event of ``message_key``, delivered or not, oldest first (by id)."""

    def outbox_backlog(self) -> int: ...

    def mark_delivered(
        self, event_id: int, now: datetime, ref: MessageRef | None = None
    ) -> None: ...

    def mark_undelivered(
        self, event_id: int, error: str, next_attempt_at: datetime, now: datetime
    ) -> None: ...

    def message_ref(self, message_key: str) -> MessageRef | None: ...


class Notifier(Protocol):
    """Tells one event (``SlackNotifier``); raises ``TemporaryError`` or ``PermanentError``."""

    def deliver(
        self, stored: StoredEvent, events_for_key: Sequence[Event], ref: MessageRef | None
    ) -> MessageRef: ...


@dataclass(frozen=True)
class DeliveryOptions:
    batch_size: int = 50
    """Events taken per round; the rest wait for the next round."""
    retry_base: timedelta = timedelta(seconds=30)
    """Backoff after the first temporary failure; doubles per attempt."""
    retry_cap: timedelta = timedelta(minutes=15)
    """Longest backoff for a temporary failure: Slack outages rarely last longer."""
    permanent_retry: timedelta = timedelta(hours=6)
    """When an event Slack refused is tried again: after a human had time to fix it."""


@dataclass
class DeliveryReport:
    delivered: list[int] = field(default_factory=list)
    postponed: list[int] = field(default_factory=list)
    """Events that failed this round, marked undelivered with their next attempt time."""
    held: list[int] = field(default_factory=list)
    """Events waiting behind an undelivered earlier event of their key."""
    stopped: str | None = None
    """Why the round ended early (the error), if it did."""
    backlog: int = 0
    """Events still undelivered after the round."""


class NotificationService:
    """Delivers the outbox through a ``Notifier``. Owns retries across rounds."""

    def __init__(
        self, *, store: Outbox, notifier: Notifier, options: DeliveryOptions = DeliveryOptions()
    ) -> None:
        self._store = store
        self._notifier = notifier
        self._options = options

    def deliver(self, now: datetime) -> DeliveryReport:
        """One round: deliver what is due, in order, until done or Slack says stop."""
        report = DeliveryReport()
        blocked: set[str] = set()
        for stored in self._store.pending_events(now, self._options.batch_size):
            key = stored.event.message_key
            history = [e for e in self._store.outbox_events(key) if e.id <= stored.id]
            if key in blocked or any(e.delivered_at is None for e in history[:-1]):
                blocked.add(key)
                report.held.append(stored.id)
                continue
            ref = self._store.message_ref(key)
            try:
                ref = self._notifier.deliver(stored, [e.event for e in history], ref)
            except TemporaryError as error:
                self._postpone(stored, error, now, self._backoff(stored, error), report)
                report.stopped = str(error)
                break
            except PermanentError as error:
                self._postpone(stored, error, now, self._options.permanent_retry, report)
                blocked.add(key)
                if isinstance(error, ChatRejectedError) and error.affects_all:
                    report.stopped = str(error)
                    break
                continue
            self._store.mark_delivered(stored.id, now, ref)
            report.delivered.append(stored.id)
        report.backlog = self._store.outbox_backlog()
        return report

    def outbox(self, now: datetime) -> OutboxState:
        """The backlog and when its oldest event was made (``outbox_state``)."""
        return outbox_state(self._store, now)

    def _backoff(self, stored: StoredEvent, error: TemporaryError) -> timedelta:
        delay = retry_delay(
            stored.attempts + 1, base=self._options.retry_base, cap=self._options.retry_cap
        )
        return max(delay, error.retry_after)

    def _postpone(
        self,
        stored: StoredEvent,
        error: TemporaryError | PermanentError,
        now: datetime,
        delay: timedelta,
        report: DeliveryReport,
    ) -> None:
        message, next_attempt_at = str(error), now + delay
        self._store.mark_undelivered(stored.id, message, next_attempt_at, now)
        report.postponed.append(stored.id)
        # Logged once per event and error: a refusal retried every few hours is not news.
        level = logging.DEBUG if stored.last_error == message else _level(error)
        log.log(
            level,
            "event %d (%s, %s) not delivered, next try at %s: %s",
            stored.id,
            stored.event.kind.value,
            stored.event.message_key,
            next_attempt_at.isoformat(),
            message,
        )


@dataclass(frozen=True)
class OutboxState:
    """The outbox after a round: how many events wait, and when the oldest was made."""

    backlog: int
    oldest_at: datetime | None = None


@dataclass(frozen=True)
class DeliveryRound:
    """What one scheduled round did, for the runner: ``busy`` when it did not run because
    the cycle guard was taken (the runner runs it again once its own cycle gives the guard
    back), and the outbox it left (``None``: unknown, or no notifier)."""

    busy: bool = False
    outbox: OutboxState | None = None


def outbox_state(store: Outbox, now: datetime) -> OutboxState:
    """The backlog and its oldest event (two small reads; undelivered rows are indexed)."""
    backlog = store.outbox_backlog()
    oldest = store.pending_events(now + _EVER, 1) if backlog else []
    return OutboxState(backlog, oldest[0].event.created_at if oldest else None)


class BacklogWatch:
    """One warning when the backlog has not shrunk for ``stuck_after``, one line when it
    is empty again; quiet in between and while it moves."""

    def __init__(self, stuck_after: timedelta, logger: logging.Logger = log) -> None:
        self._stuck_after = stuck_after
        self._log = logger
        self._last: int | None = None
        self._since: datetime | None = None  # when the backlog last shrank (or appeared)
        self._warned = False

    def observe(self, state: OutboxState, now: datetime) -> bool:
        """Record the outbox after a round; whether it counts as stuck now."""
        if state.backlog == 0:
            if self._warned:
                self._log.info("notifications: the backlog is delivered, nothing waits")
            self._last, self._since, self._warned = None, None, False
            return False
        if self._last is None or self._since is None or state.backlog < self._last:
            self._since = now
        self._last = state.backlog
        stuck = now - self._since >= self._stuck_after
        if stuck and not self._warned:
            self._warned = True
            oldest_at = state.oldest_at
            oldest = "" if oldest_at is None else f", the oldest from {oldest_at.isoformat()}"
            self._log.warning(
                "notifications are not going out: %d waiting%s, and the backlog has not "
                "shrunk for %s (said once; a line says when it is delivered; see "
                "releasebot_notification_stuck)",
                state.backlog,
                oldest,
                self._stuck_after,
                extra={"backlog": state.backlog},
            )
        return stuck


def _level(error: TemporaryError | PermanentError) -> int:
    return logging.WARNING if isinstance(error, TemporaryError) else logging.ERROR


_EVER = timedelta(days=36500)


def discard_undeliverable(store: Outbox, now: datetime, *, batch: int = 200) -> int:
    """Mark every undelivered event delivered without telling anyone; returns how many.

    For an install without a notifier: the store no longer keeps events then
    (``keep_events=False``), but one that ran an older releasebot with Slack off holds a
    backlog nobody will send, which would only keep the backlog alert firing.
    """
    discarded = 0
    while pending := store.pending_events(now + _EVER, batch):
        for stored in pending:
            store.mark_delivered(stored.id, now)
        discarded += len(pending)
    if discarded:
        log.warning("discarded %d notification(s): no notifier is configured", discarded)
    return discarded


class DeliveryOutage:
    """One warning per outage of delivery rounds, one info line on recovery, quiet between."""

    def __init__(self, logger: logging.Logger = log) -> None:
        self._log = logger
        self._lock = threading.Lock()
        self._since: str | None = None  # the first error of the outage going on, if any

    def failed(self, error: ReleasebotError) -> None:
        """A round could not run because of ``error``: said once per outage."""
        with self._lock:
            first, self._since = self._since is None, self._since or str(error)
        if first:
            self._log.warning(
                "notifications not delivered: %s (said once; the rounds go on and a line "
                "says when delivery works again)",
                error,
                extra={"error": type(error).__name__},
            )
        else:
            self._log.debug("notifications still not delivered: %s", error)

    def recovered(self) -> None:
        """A round ran: the outage, if there was one, is over."""
        with self._lock:
            was, self._since = self._since, None
        if was is not None:
            self._log.info("notifications: delivery works again (it stopped with: %s)", was)
