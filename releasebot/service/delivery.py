"""Delivery rounds as ``releasebot run`` and ``reconcile --once`` schedule them.

``NotificationService.deliver`` is one round over the outbox; this module runs it the way a
process does: under the cycle guard (``deliver_guarded``: during a leadership hand-over the
old and the new leader never search-then-post the same event at once), without a notifier
(``discard_guarded``: once, drop what an older releasebot queued with Slack off), and with
every problem logged rather than raised, once per outage (``DeliveryOutage``), since builds
never wait for notifications.

``hold`` is the process's cycle guard (``wiring.guard.SharedGuard.hold``): a context that
yields whether the guard is held, False at once while anyone else holds it. Deliberately
not here: building the notifier (``wiring.slack``), when rounds run (``runtime.runner``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from contextlib import AbstractContextManager
from datetime import datetime

from releasebot.domain.ports import StateStore
from releasebot.domain.shared.errors import ReleasebotError
from releasebot.service.notifications import (
    DeliveryOutage,
    DeliveryReport,
    DeliveryRound,
    NotificationService,
    discard_undeliverable,
)

log = logging.getLogger("releasebot.slack")

Hold = Callable[[], AbstractContextManager[bool]]
Clock = Callable[[], datetime]


def deliver_guarded(
    hold: Hold, service: NotificationService | None, outage: DeliveryOutage, clock: Clock
) -> DeliveryRound | None:
    """A delivery round under the cycle guard. What it did: busy (the guard was taken: the
    runner runs the round again once its cycle ends) and the outbox it left. The database
    being away (the guard cannot be taken or given back) is logged once per outage, never
    raised."""
    if service is None:
        return None
    try:
        with hold() as held:
            if held:
                deliver_now(service, clock, outage)
        return DeliveryRound(busy=not held, outbox=service.outbox(clock()))
    except ReleasebotError as error:
        outage.failed(error)
        return None


def discard_guarded(
    hold: Hold, store: StateStore, outage: DeliveryOutage, clock: Clock
) -> Callable[[], DeliveryRound | None]:
    """The delivery round without a notifier: once, under the guard, drop the events an
    older releasebot queued with Slack off (this one queues none then). The database
    being away is logged once per outage, as for delivery."""
    done: list[bool] = []

    def round_() -> DeliveryRound | None:
        if done:
            return None
        try:
            with hold() as held:
                if held:
                    discard_now(store, clock)
                    done.append(True)
        except ReleasebotError as error:
            outage.failed(error)
            return None
        outage.recovered()
        return DeliveryRound(busy=not held)

    return round_


def discard_now(store: StateStore, clock: Clock) -> None:
    """``discard_undeliverable`` now; a store problem is logged (the next round retries)."""
    try:
        discard_undeliverable(store, clock())
    except ReleasebotError as error:
        log.warning("could not clear the notifications nobody delivers: %s", error)


def deliver_now(
    service: NotificationService | None, clock: Clock, outage: DeliveryOutage | None = None
) -> DeliveryReport | None:
    """One delivery round; a problem is logged (once per ``outage`` when one is given),
    never raised (builds never wait)."""
    if service is None:
        return None
    try:
        report = service.deliver(clock())
    except ReleasebotError as error:
        if outage is None:
            log.warning("notifications not delivered: %s", error)
        else:
            outage.failed(error)
        return None
    if outage is not None:
        outage.recovered()
    return report
