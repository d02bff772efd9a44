"""Socket Mode: the slash command without ingress, over slack-sdk's built-in client.

Slack gives each Socket Mode event to ONE open connection, so with several replicas a
command would land on a random one: only the leader calls ``connect()``, and calls
``close()`` when it stops leading. Nothing connects (and no thread starts) before
``connect()``; each ``connect()`` builds a fresh client, since a closed one cannot reopen.

``slash_commands`` envelopes go to the same ``SlashCommandHandler`` as the HTTP endpoint;
its immediate answer is the ack's payload (Slack wants the ack within 3 s) and slow work
follows up through the ``response_url``. Other envelope types are acked and ignored.

Not here: signature checks (Socket Mode has none: the app token authenticates the
connection), leader election, and reconnect policy beyond slack-sdk's own.
"""

from __future__ import annotations

import contextlib
import logging
import socket
import threading
from datetime import timedelta

from slack_sdk.errors import SlackApiError, SlackClientError
from slack_sdk.socket_mode.builtin import SocketModeClient
from slack_sdk.socket_mode.client import BaseSocketModeClient
from slack_sdk.socket_mode.request import SocketModeRequest
from slack_sdk.socket_mode.response import SocketModeResponse

from releasebot.chat.slack import SlashCommandHandler, SlashRequest
from releasebot.domain.shared.errors import (
    ConfigError,
    SocketModeRejectedError,
    SocketModeUnavailableError,
)
from releasebot.edge.slackweb import BoundedWebClient
from releasebot.edge.text import one_line

log = logging.getLogger("releasebot.chat.socket")

_AUTH_ERRORS = frozenset(
    {"invalid_auth", "not_authed", "not_allowed_token_type", "account_inactive", "token_revoked"}
)


class SocketModeFrontDoor:
    """The leader's Socket Mode connection, routing slash commands to the shared handler."""

    def __init__(
        self,
        handler: SlashCommandHandler,
        *,
        app_token: str,
        base_url: str,
        timeout: timedelta,
        ping_interval: timedelta = timedelta(seconds=5),
    ) -> None:
        """``base_url`` is the Web API root ``apps.connections.open`` is called under
        (proxies, tests); ``ping_interval`` also sets how soon a dead link is replaced."""
        if not app_token.startswith("xapp-"):
            raise ConfigError("slack.app_token", "Socket Mode needs an app-level token (xapp-…)")
        self._handler = handler
        self._token = app_token
        self._base_url = base_url
        self._timeout = max(1, round(timeout.total_seconds()))
        self._ping_interval = ping_interval.total_seconds()
        self._client: SocketModeClient | None = None
        self._lock = threading.Lock()

    def __repr__(self) -> str:  # the token stays out of any repr
        return f"SocketModeFrontDoor(base_url={self._base_url!r}, connected={self.connected})"

    @property
    def connected(self) -> bool:
        """True while a Socket Mode connection is open (for ``/readyz``)."""
        client = self._client
        return client is not None and client.is_connected()

    def connect(self) -> None:
        """Open the connection (no-op if open). Raises ``SocketModeRejectedError`` for a bad
        token, ``SocketModeUnavailableError`` when Slack cannot be reached."""
        with self._lock:
            if self._client is not None:
                return
            web = BoundedWebClient(base_url=self._base_url, timeout=self._timeout, logger=log)
            client = SocketModeClient(
                self._token,
                logger=log,
                web_client=web,
                ping_interval=self._ping_interval,
                concurrency=2,
            )
            client.socket_mode_request_listeners.append(self._on_request)
            try:
                client.connect()
            except SlackApiError as error:
                _shut(client)
                code = one_line(error.response.get("error", "unknown"), 100)
                if code in _AUTH_ERRORS:
                    raise SocketModeRejectedError(f"Slack refused the app token: {code}") from error
                raise SocketModeUnavailableError(f"apps.connections.open: {code}") from error
            except (SlackClientError, OSError) as error:
                _shut(client)
                raise SocketModeUnavailableError(
                    f"cannot open Socket Mode: {type(error).__name__}"
                ) from error
            self._client = client
        if not client.is_connected():  # the websocket failed; slack-sdk retries on its own
            log.warning("Socket Mode websocket not open yet; reconnecting in the background")

    def close(self) -> None:
        """Close the connection and stop its threads (no-op if not connected)."""
        with self._lock:
            client, self._client = self._client, None
        if client is not None:
            _shut(client)

    def _on_request(self, client: BaseSocketModeClient, request: SocketModeRequest) -> None:
        if request.type != "slash_commands":
            client.send_socket_mode_response(SocketModeResponse(envelope_id=request.envelope_id))
            return
        answer = self._handler.answer(SlashRequest.from_fields(request.payload))
        client.send_socket_mode_response(
            SocketModeResponse(envelope_id=request.envelope_id, payload=answer)
        )


def _shut(client: SocketModeClient) -> None:
    """``client.close()``, without waiting out slack-sdk's polling timeouts."""
    # slack-sdk's close() joins a reader sitting in recv() (up to 3 s) and a message
    # loop sitting in a queue get (up to 1 s); ending both loops and waking them first
    # makes a leadership hand-over immediate (these are the client's declared fields).
    client.auto_reconnect_enabled = False
    client.closed = True
    client.message_queue.put(None)  # the message loop skips None and sees `closed`
    client.current_session_state.terminated = True
    session = client.current_session
    sock = session.sock if session is not None else None
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)
    client.close()
