"""A local stand-in for Slack's Socket Mode: ``apps.connections.open`` over HTTP plus a
websocket server the client is sent to, both on 127.0.0.1.

The HTTP side answers ``POST /api/apps.connections.open`` like Slack: ``{"ok": true, "url":
"ws://127.0.0.1:PORT/link/?ticket=…"}`` for the right ``Bearer xapp-…`` token and
``{"ok": false, "error": "invalid_auth"}`` otherwise. The websocket side accepts only
tickets it issued, greets with ``hello`` as Slack does, lets the test ``push`` envelopes
and records every ack by ``envelope_id``::

    with FakeSocketModeSlack(app_token) as slack:
        door = SocketModeFrontDoor(
            handler, app_token=app_token, base_url=slack.base_url, timeout=timedelta(seconds=5)
        )
        door.connect()
        slack.push({"envelope_id": "e1", "type": "slash_commands", "payload": {...}})
        ack = slack.wait_ack("e1")

The websocket server runs on its own event loop in one thread, the HTTP server in another;
``stop()`` closes both and joins the threads. Not Slack: no reconnect hints, no
``disconnect`` messages unless a test pushes one, a single app.
"""

from __future__ import annotations

import asyncio
import json
import threading
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from websockets.asyncio.server import Server, ServerConnection, serve
from websockets.exceptions import ConnectionClosed

from tests.support.servers import Started


class FakeSocketModeSlack(Started):
    def __init__(self, app_token: str) -> None:
        self.app_token = app_token
        self.opened = 0
        """``apps.connections.open`` calls answered with a URL."""
        self.refused = 0
        self._tickets: set[str] = set()
        self._connections: list[ServerConnection] = []
        self._acks: dict[str, dict[str, Any]] = {}
        self._changed = threading.Condition()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stopping: asyncio.Event | None = None
        self._ws_server: Server | None = None
        self._ws_thread: threading.Thread | None = None
        self._http: ThreadingHTTPServer | None = None
        self._http_thread: threading.Thread | None = None

    # -- lifecycle ---------------------------------------------------------------------

    def start(self) -> FakeSocketModeSlack:
        started = threading.Event()

        async def main() -> None:
            self._loop = asyncio.get_running_loop()
            self._stopping = asyncio.Event()
            async with serve(self._serve, "127.0.0.1", 0, ping_interval=None) as server:
                self._ws_server = server
                started.set()
                await self._stopping.wait()
            # leaving the block closed the server and every connection

        self._ws_thread = threading.Thread(
            target=asyncio.run, args=(main(),), name="fake-slack-ws", daemon=True
        )
        self._ws_thread.start()
        if not started.wait(5):
            raise RuntimeError("websocket server did not start")
        self._http = ThreadingHTTPServer(("127.0.0.1", 0), _handler_for(self))
        self._http.daemon_threads = True
        self._http_thread = threading.Thread(
            target=self._http.serve_forever,
            kwargs={"poll_interval": 0.02},
            name="fake-slack-http",
            daemon=True,
        )
        self._http_thread.start()
        return self

    def stop(self) -> None:
        if self._http is not None:
            self._http.shutdown()
            self._http.server_close()
            self._http = None
        if self._http_thread is not None:
            self._http_thread.join(timeout=5)
        if self._loop is not None and self._stopping is not None:
            self._loop.call_soon_threadsafe(self._stopping.set)
        if self._ws_thread is not None:
            self._ws_thread.join(timeout=10)
            assert not self._ws_thread.is_alive(), "websocket server did not stop"
        self._ws_server = None

    # -- what the test sees ------------------------------------------------------------

    @property
    def base_url(self) -> str:
        assert self._http is not None, "not started"
        return f"http://127.0.0.1:{self._http.server_address[1]}/api/"

    @property
    def ws_port(self) -> int:
        assert self._ws_server is not None, "not started"
        return int(self._ws_server.sockets[0].getsockname()[1])

    @property
    def connections(self) -> int:
        with self._changed:
            return len(self._connections)

    def wait_connected(self, count: int = 1, timeout: float = 5) -> bool:
        with self._changed:
            return self._changed.wait_for(lambda: len(self._connections) >= count, timeout)

    def wait_disconnected(self, timeout: float = 10) -> bool:
        with self._changed:
            return self._changed.wait_for(lambda: not self._connections, timeout)

    def push(self, envelope: dict[str, Any]) -> None:
        """Send ``envelope`` to the newest connection, as Slack sends an event to one."""
        with self._changed:
            connection = self._connections[-1]
        assert self._loop is not None
        future = asyncio.run_coroutine_threadsafe(connection.send(json.dumps(envelope)), self._loop)
        future.result(timeout=5)

    def wait_ack(self, envelope_id: str, timeout: float = 5) -> dict[str, Any]:
        with self._changed:
            if not self._changed.wait_for(lambda: envelope_id in self._acks, timeout):
                raise TimeoutError(f"no ack for {envelope_id}")
            return self._acks[envelope_id]

    # -- the two servers ---------------------------------------------------------------

    def open_connection(self, authorization: str) -> dict[str, Any]:
        with self._changed:
            if authorization != f"Bearer {self.app_token}":
                self.refused += 1
                return {"ok": False, "error": "invalid_auth"}
            self.opened += 1
            ticket = uuid.uuid4().hex
            self._tickets.add(ticket)
        return {"ok": True, "url": f"ws://127.0.0.1:{self.ws_port}/link/?ticket={ticket}"}

    async def _serve(self, connection: ServerConnection) -> None:
        path = connection.request.path if connection.request is not None else ""
        ticket = path.partition("?ticket=")[2]
        with self._changed:
            known = path.startswith("/link/") and ticket in self._tickets
            self._tickets.discard(ticket)
        if not known:
            await connection.close(code=1008, reason="unknown ticket")
            return
        with self._changed:
            self._connections.append(connection)
            self._changed.notify_all()
        try:
            await connection.send(json.dumps({"type": "hello", "num_connections": 1}))
            async for message in connection:
                data = json.loads(message)
                if isinstance(data, dict) and "envelope_id" in data:
                    with self._changed:
                        self._acks[str(data["envelope_id"])] = data
                        self._changed.notify_all()
        except ConnectionClosed:
            pass  # slack-sdk's client closes the socket without a close frame
        finally:
            with self._changed:
                self._connections.remove(connection)
                self._changed.notify_all()


def _handler_for(fake: FakeSocketModeSlack) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            self.rfile.read(length)
            if self.path != "/api/apps.connections.open":
                answer: dict[str, Any] = {"ok": False, "error": "unknown_method"}
            else:
                answer = fake.open_connection(self.headers.get("Authorization", ""))
            body = json.dumps(answer).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    return Handler
