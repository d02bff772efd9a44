"""Retention wired: the store, the fleet source and the registry's deletes for
``RetentionService``, from the ``[retention]``, ``[fleet]`` and ``[registry]`` settings.

Used by ``releasebot retention`` and, when ``retention.enabled``, by ``releasebot run``
(on its one engine). The fleet is read from the cluster when ``fleet.enabled``; without
it retention deletes nothing (it cannot know what the nodes run).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack, closing, contextmanager
from typing import TYPE_CHECKING

from sqlalchemy import Engine

from releasebot.config import Settings
from releasebot.domain.ports import FleetSource, StateStore
from releasebot.domain.shared.errors import ConfigError
from releasebot.registry.janitor import OrasJanitor
from releasebot.registry.oras import OrasRegistry
from releasebot.service.retention import RetentionService
from releasebot.store.dryrun import DryRunStore
from releasebot.wiring.core import (
    kube_client,
    make_registry,
    migrated_store,
    open_engine,
    read_only_store,
    utc_now,
)

if TYPE_CHECKING:
    from lightkube import Client


@contextmanager
def retention_service(
    settings: Settings,
    *,
    apply: bool,
    engine: Engine | None = None,
    fleet_source: FleetSource | None = None,
    kube: Client | None = None,
) -> Iterator[RetentionService]:
    """A ready ``RetentionService``; without ``apply`` the store is only read (and not
    migrated), so a dry run changes nothing at all. The fleet is read through ``kube`` when
    the process shares a client (``releasebot run``), else through one of its own."""
    registry = make_registry(settings)
    if not isinstance(registry, OrasRegistry):  # pragma: no cover - make_registry's type
        raise ConfigError("registry", "retention needs a real OCI registry")
    with ExitStack() as stack:
        stack.enter_context(closing(registry))
        if engine is None:
            engine = stack.enter_context(open_engine(settings.database.url))
        store: StateStore = (  # as the cycle's: events only when Slack delivers them
            migrated_store(engine, keep_events=settings.slack.enabled)
            if apply
            else DryRunStore(read_only_store(engine))
        )
        if fleet_source is None and settings.fleet.enabled:
            fleet_source = stack.enter_context(_cluster_fleet(settings, kube))
        retention = settings.retention
        yield RetentionService(
            store=store,
            janitor=OrasJanitor(registry),
            fleet=fleet_source,
            clock=utc_now,
            after=retention.after,
            max_deletions=retention.max_deletions,
        )


@contextmanager
def _cluster_fleet(settings: Settings, kube: Client | None) -> Iterator[FleetSource]:
    from releasebot.fleet.kubernetes import KubernetesFleetSource  # lightkube: only when needed

    fleet = settings.fleet
    with kube_client(settings, kube) as client:
        yield KubernetesFleetSource(
            client,
            selector=fleet.selector,
            page_size=fleet.page_size,
            gate_annotation=fleet.gate_annotation,
        )
