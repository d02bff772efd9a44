"""The Slack features, wired: outbox delivery, the HTTP slash command, Socket Mode.

Each is on only when its settings are there: delivery needs ``slack.channel`` and the bot
token; the HTTP endpoint needs the signing secret; Socket Mode the app token. Delivery
(``service.delivery``) and the chat commands that use the reconcile service
(``chat.guarded``) hold the runner's ``SharedGuard`` and use its engine: one engine per
process. Those commands use the cycle's own reconcile service: holding the guard, they
never run beside a cycle of this process (``CycleGuard.hold`` lets one block at a time
hold it), so its clients and what it keeps are never used by two threads at once.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import ExitStack, contextmanager
from dataclasses import astuple
from typing import TYPE_CHECKING

from sqlalchemy import Engine

from releasebot.config import Settings
from releasebot.config.secrets import secret_values
from releasebot.domain.ports import StateStore
from releasebot.domain.shared.errors import ReleasebotError
from releasebot.service.delivery import deliver_guarded, discard_guarded
from releasebot.service.notifications import DeliveryOutage, DeliveryRound, NotificationService
from releasebot.store.sql import SqlStateStore
from releasebot.wiring.core import proof_annotator, utc_now
from releasebot.wiring.guard import SharedGuard
from releasebot.wiring.hooks import RunHooks

if TYPE_CHECKING:
    from lightkube import Client

    from releasebot.service.reconcile import ReconcileService

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


@contextmanager
def slack_hooks(
    settings: Settings,
    engine: Engine,
    guard: SharedGuard,
    reconciler: ReconcileService,
    kube: Client | None = None,
) -> Iterator[RunHooks]:
    """The ``RunHooks`` for ``releasebot run`` on its engine, guard and reconcile service
    (and its Kubernetes client, for ``release``); everything opened is closed on exit."""
    slack = settings.slack
    store = SqlStateStore(engine)
    delivery = notification_service(settings, store)
    outage = DeliveryOutage(log)
    deliver: Callable[[], DeliveryRound | None] = (
        discard_guarded(guard.hold, store, outage, utc_now)
        if delivery is None
        else functools.partial(deliver_guarded, guard.hold, delivery, outage, utc_now)
    )
    signing_secret = slack.secret("signing_secret")
    app_token = slack.secret("app_token")
    if not signing_secret and not app_token:
        yield RunHooks(deliver=deliver)
        return
    from releasebot.chat.guarded import GuardedCommands
    from releasebot.chat.slack import SlashCommandEndpoint, SlashCommandHandler
    from releasebot.service.commands import CommandService

    with ExitStack() as stack:
        annotator = stack.enter_context(proof_annotator(settings, kube))
        commands = CommandService(
            store=store, reconciler=reconciler, clock=utc_now, annotator=annotator
        )
        guarded = GuardedCommands(commands, guard.hold)
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
