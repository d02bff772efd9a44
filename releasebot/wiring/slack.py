"""The Slack features, wired: outbox delivery, the HTTP slash command, Socket Mode.

Each is on only when its settings are there: delivery needs ``slack.channel`` and the bot
token; the HTTP endpoint needs the signing secret; Socket Mode the app token. Delivery and
the chat commands that write hold the runner's ``SharedGuard`` and use its engine: one
engine per process. Chat commands get a reconcile service of their own on that engine (its
registry and launcher clients are separate from the cycle's), so a slow command never
shares a half-used client with a running cycle.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import ExitStack, contextmanager
from dataclasses import astuple
from datetime import timedelta
from typing import TYPE_CHECKING

from sqlalchemy import Engine

from releasebot.config import Settings
from releasebot.config.secrets import secret_values
from releasebot.domain.errors import ReleasebotError
from releasebot.domain.ports import StateStore
from releasebot.service.notifications import (
    DeliveryOutage,
    DeliveryReport,
    DeliveryRound,
    NotificationService,
    discard_undeliverable,
)
from releasebot.store.sql import SqlStateStore
from releasebot.wiring.core import proof_annotator, reconcile_service, utc_now
from releasebot.wiring.guard import SharedGuard
from releasebot.wiring.hooks import RunHooks

if TYPE_CHECKING:
    from releasebot.chat.slack import Payload
    from releasebot.domain.commands import Command
    from releasebot.service.commands import CommandService

log = logging.getLogger("releasebot.slack")


def notification_service(settings: Settings, store: StateStore) -> NotificationService | None:
    """Delivery of the outbox to the configured channel; ``None`` when Slack is not set up."""
    slack = settings.slack
    if not slack.enabled:
        return None
    from releasebot.notify.slack import SlackNotifier, make_web_client

    client = make_web_client(
        slack.secret("bot_token"),
        base_url=slack.base_url,
        timeout=slack.timeout,
    )
    notifier = SlackNotifier(
        client,
        channel=slack.channel,
        repository=settings.registry.repository,
        secrets=secret_values(settings),
    )
    return NotificationService(store=store, notifier=notifier)


def deliver_guarded(
    guard: SharedGuard, service: NotificationService | None, outage: DeliveryOutage
) -> DeliveryRound | None:
    """A delivery round under the cycle guard: during a leadership hand-over the old and
    the new leader never search-then-post the same event at once. What it did: busy (the
    guard was taken: the runner runs the round again once its cycle ends) and the outbox
    it left. The database being away (the guard cannot be taken or given back) is logged
    once per outage, never raised."""
    if service is None:
        return None
    try:
        with guard.hold() as held:
            if held:
                deliver_now(service, outage)
        return DeliveryRound(busy=not held, outbox=service.outbox(utc_now()))
    except ReleasebotError as error:
        outage.failed(error)
        return None


def discard_guarded(
    guard: SharedGuard, store: StateStore, outage: DeliveryOutage
) -> Callable[[], DeliveryRound | None]:
    """The delivery round without a notifier: once, under the guard, drop the events an
    older releasebot queued with Slack off (this one queues none then). The database
    being away is logged once per outage, as for delivery."""
    done: list[bool] = []

    def round_() -> DeliveryRound | None:
        if done:
            return None
        try:
            with guard.hold() as held:
                if held:
                    discard_now(store)
                    done.append(True)
        except ReleasebotError as error:
            outage.failed(error)
            return None
        outage.recovered()
        return DeliveryRound(busy=not held)

    return round_


def discard_now(store: StateStore) -> None:
    """``discard_undeliverable`` now; a store problem is logged (the next round retries)."""
    try:
        discard_undeliverable(store, utc_now())
    except ReleasebotError as error:
        log.warning("could not clear the notifications nobody delivers: %s", error)


def deliver_now(
    service: NotificationService | None, outage: DeliveryOutage | None = None
) -> DeliveryReport | None:
    """One delivery round; a problem is logged (once per ``outage`` when one is given),
    never raised (builds never wait)."""
    if service is None:
        return None
    try:
        report = service.deliver(utc_now())
    except ReleasebotError as error:
        if outage is None:
            log.warning("notifications not delivered: %s", error)
        else:
            outage.failed(error)
        return None
    if outage is not None:
        outage.recovered()
    return report


class GuardedCommands:
    """Runs the commands that write (plan, missing, build, retry) under the cycle guard, so
    a command on any replica never writes while a cycle does. While a cycle holds the guard
    the command waits for it (the person was told "queued" at once; these commands run in
    the handler's background pool and answer through the ``response_url``), up to ``wait``:
    a cycle still running then is answered with "not run", never left hanging."""

    WRITING = frozenset({"plan", "missing", "build", "retry"})

    def __init__(
        self,
        inner: CommandService,
        guard: SharedGuard,
        *,
        wait: timedelta = timedelta(minutes=10),
        poll: timedelta = timedelta(seconds=1),
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._inner = inner
        self._guard = guard
        self._wait = wait
        """Slack takes answers on a ``response_url`` for 30 minutes; a cycle takes minutes."""
        self._poll = poll.total_seconds()
        self._monotonic = monotonic
        self._closing = threading.Event()

    def run(self, command: Command, user: str) -> Payload:
        if command.verb.value not in self.WRITING:
            return self._inner.run(command, user)
        from releasebot.chat.slack import ephemeral

        deadline = self._monotonic() + self._wait.total_seconds()
        while True:
            with self._guard.hold() as held:
                if held:
                    return self._inner.run(command, user)
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


@contextmanager
def slack_hooks(settings: Settings, engine: Engine, guard: SharedGuard) -> Iterator[RunHooks]:
    """The ``RunHooks`` for ``releasebot run`` on its engine and guard; everything opened is
    closed on exit."""
    slack = settings.slack
    store = SqlStateStore(engine)
    delivery = notification_service(settings, store)
    outage = DeliveryOutage(log)
    deliver: Callable[[], DeliveryRound | None] = (
        discard_guarded(guard, store, outage)
        if delivery is None
        else lambda: deliver_guarded(guard, delivery, outage)
    )
    signing_secret = slack.secret("signing_secret")
    app_token = slack.secret("app_token")
    if not signing_secret and not app_token:
        yield RunHooks(deliver=deliver)
        return
    from releasebot.chat.slack import SlashCommandEndpoint, SlashCommandHandler
    from releasebot.service.commands import CommandService

    with ExitStack() as stack:
        reconciler = stack.enter_context(
            reconcile_service(settings, lambda _outcome: None, engine=engine)
        )
        annotator = stack.enter_context(proof_annotator(settings))
        commands = CommandService(
            store=store, reconciler=reconciler, clock=utc_now, annotator=annotator
        )
        guarded = GuardedCommands(commands, guard)
        handler = SlashCommandHandler(
            guarded,
            allowed_users=slack.allowed_users,
            allowed_channels=slack.allowed_channels,
        )
        stack.callback(handler.close)
        stack.callback(guarded.close)  # first: the handler's close waits for its commands
        endpoint_call: Callable[[bytes, Mapping[str, str]], tuple[int, str, bytes]] | None = None
        if signing_secret:
            endpoint = SlashCommandEndpoint(handler, signing_secret=signing_secret)

            def endpoint_call(body: bytes, headers: Mapping[str, str]) -> tuple[int, str, bytes]:
                answer = endpoint.handle(body, headers, time.time())
                status, content_type, payload = astuple(answer)
                return int(status), str(content_type), bytes(payload)

        if not app_token:
            yield RunHooks(deliver=deliver, slack=endpoint_call)
            return
        from releasebot.chat.socket import SocketModeFrontDoor

        door = SocketModeFrontDoor(
            handler,
            app_token=app_token,
            base_url=slack.base_url,
            timeout=slack.timeout,
        )
        stack.callback(door.close)  # before the handler: the door feeds it

        def connect() -> None:
            if door.connected:
                return
            try:
                door.connect()
            except ReleasebotError as error:  # /readyz shows it; the next round retries
                log.warning("Socket Mode not connected: %s", error)

        def leader_round() -> DeliveryRound | None:
            connect()  # a lost or refused connection is retried every delivery round
            return deliver()

        yield RunHooks(
            on_lead_start=connect,
            on_lead_stop=door.close,
            deliver=leader_round,
            socket_connected=lambda: door.connected,
            slack=endpoint_call,
        )
