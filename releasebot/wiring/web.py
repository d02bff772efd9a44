"""The coverage page, wired: its app on a store, and ``releasebot demo --serve``.

``overview_app`` puts ``web.overview.OverviewApp`` over ``service.overview`` for the
settings' repository and gate. ``serve_demo`` serves it on the demo's SQLite file after
``releasebot demo`` planned, with a few builds simulated (``demo.history``), so a newcomer
sees the page in one command. The simulated rows only ever go to the demo's own database.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import replace

from releasebot.config import Settings
from releasebot.config.secrets import secret_values
from releasebot.demo.history import seed_demo_builds
from releasebot.domain.ports import StateStore
from releasebot.domain.shared.errors import ConfigError
from releasebot.edge.parse import ValueRefusedError, parse_listen_address
from releasebot.edge.redact import Redactor
from releasebot.service.overview import OverviewOptions, OverviewService
from releasebot.web.overview import OverviewApp
from releasebot.web.server import HttpServer
from releasebot.wiring.core import open_store, utc_now


def overview_app(settings: Settings, store: StateStore) -> OverviewApp:
    """The page and API of ``settings`` on ``store``."""
    options = OverviewOptions(
        repository=settings.registry.repository,
        gate=settings.fleet.enabled and settings.fleet.gate,
    )
    return OverviewApp(OverviewService(store, options), Redactor(secret_values(settings)))


def listen_address(key: str, listen: str) -> tuple[str, int]:
    """``listen`` as ``(host, port)`` by the edge's one parser; a refusal names ``key``."""
    try:
        return parse_listen_address(listen)
    except ValueRefusedError as error:
        raise ConfigError(key, str(error)) from None


def serve_demo(
    settings: Settings,
    listen: str,
    stop: threading.Event,
    on_ready: Callable[[str], None],
) -> int:
    """Simulate builds in the demo's store, serve the page on ``listen`` until ``stop``."""
    host, port = listen_address("--listen", listen)
    with open_store(settings.database.url) as store:
        seed_demo_builds(store, utc_now())
        # as if the reboot gate were on, so the page shows what it would hold
        shown = replace(settings, fleet=replace(settings.fleet, enabled=True, gate=True))
        try:
            server = HttpServer(
                host,
                port,
                pages=overview_app(shown, store),
                allowed_hosts=settings.web.allowed_hosts,
            )
        except OSError as error:
            raise ConfigError("--listen", f"cannot listen on {listen}: {error}") from None
        server.start()
        name = f"[{host.strip('[]')}]" if ":" in host.strip("[]") else host
        on_ready(f"http://{name}:{server.port}/")
        try:
            stop.wait()
        finally:
            server.close()
    return 0
