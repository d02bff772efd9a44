"""The only module that names concrete adapters: it turns ``Settings`` into working objects.

Everything here is a plain factory; nothing connects until a factory is called. The CLI
opens what it needs inside a ``with`` block so connections and HTTP pools are closed on
every exit path.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from datetime import UTC, datetime
from importlib.resources import files
from pathlib import Path

from releasebot.config import DatabaseSettings, FlatcarSettings, NvidiaSettings, Settings
from releasebot.service.plan import FeedOutcome, FeedSpec, PlanService
from releasebot.sources.fetch import HttpFeedFetcher, make_http_client
from releasebot.store import migrate
from releasebot.store.engine import make_engine
from releasebot.store.sql import SqlStateStore


def utc_now() -> datetime:
    return datetime.now(UTC)


@contextmanager
def open_store(url: str, *, upgrade: bool = True) -> Iterator[SqlStateStore]:
    """Open the state store at ``url``; migrate it to the newest schema first if asked."""
    engine = make_engine(url)
    try:
        if upgrade and not migrate.is_at_head(engine):
            migrate.upgrade(engine)
        yield SqlStateStore(engine)
    finally:
        engine.dispose()


def feed_specs(settings: Settings) -> tuple[list[FeedSpec], FeedSpec]:
    flatcar = [
        FeedSpec.flatcar(channel, settings.flatcar_feed_url(channel))
        for channel in settings.flatcar.channels
    ]
    return flatcar, FeedSpec.nvidia(settings.nvidia.feed_url)


@contextmanager
def plan_service(
    settings: Settings, on_outcome: Callable[[FeedOutcome], None]
) -> Iterator[PlanService]:
    """A ready ``PlanService`` with its store and HTTP client, closed when the block ends."""
    verify: bool | str = settings.http.ca_bundle or True
    client = make_http_client(settings.http.timeout, settings.http.user_agent, verify)
    with client, open_store(settings.database.url) as store:
        flatcar, nvidia = feed_specs(settings)
        yield PlanService(
            store=store,
            fetcher=HttpFeedFetcher(client, retries=settings.http.retries),
            flatcar_feeds=flatcar,
            nvidia_feed=nvidia,
            policy=settings.policy(),
            clock=utc_now,
            on_outcome=on_outcome,
        )


def demo_feed_dir() -> Path:
    """The small feeds shipped inside the package for ``releasebot demo``."""
    return Path(str(files("releasebot") / "demo"))


def demo_settings(base: Settings, directory: Path) -> Settings:
    """``base`` pointed at the shipped demo feeds and a SQLite file in ``directory``."""
    feeds = demo_feed_dir()
    return replace(
        base,
        database=DatabaseSettings(url=f"sqlite:///{directory / 'releasebot-demo.db'}"),
        flatcar=FlatcarSettings(
            feed_url=feeds.as_uri() + "/releases-{channel}.json",
            channels=("stable", "lts"),
            arches=("amd64", "arm64"),
            keep=2,
        ),
        nvidia=NvidiaSettings(
            feed_url=(feeds / "nvidia-releases.json").as_uri(),
            branches=("580",),
            branch_types=("production branch",),
            keep=1,
        ),
    )
