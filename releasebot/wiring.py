"""The only module that names concrete adapters: it turns ``Settings`` into working objects.

Everything here is a plain factory; nothing connects until a factory is called. The CLI
opens what it needs inside a ``with`` block so connections and HTTP pools are closed on
every exit path.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import threading
from collections.abc import Callable, Iterator
from contextlib import closing, contextmanager
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from importlib.resources import files
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from sqlalchemy import Engine

from releasebot.builders.kaniko import InvalidOptionError, KanikoOptions
from releasebot.builders.memory import MemoryJobLauncher
from releasebot.config import DatabaseSettings, FlatcarSettings, NvidiaSettings, Settings
from releasebot.domain.errors import ConfigError
from releasebot.domain.ports import JobLauncher, Registry, StateStore
from releasebot.service.plan import FeedOutcome, FeedSpec, PlanService
from releasebot.service.reconcile import ReconcileOptions, ReconcileService
from releasebot.sources.fetch import HttpFeedFetcher, make_http_client
from releasebot.store import migrate
from releasebot.store.dryrun import DryRunStore
from releasebot.store.engine import make_engine
from releasebot.store.memory import MemoryStateStore
from releasebot.store.sql import SqlStateStore

if TYPE_CHECKING:
    from releasebot.leader import LeaderElector
    from releasebot.web.server import SlackHandler


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


@contextmanager
def _store_for(url: str, *, dry_run: bool) -> Iterator[StateStore]:
    """The store at ``url``; for a dry run read-only, and empty if it does not exist yet."""
    if not dry_run:
        with open_store(url) as store:
            yield store
        return
    if _missing_sqlite_file(url):  # do not even create the file
        yield DryRunStore(MemoryStateStore())
        return
    engine = make_engine(url)
    try:
        inner: StateStore = (
            SqlStateStore(engine) if migrate.is_at_head(engine) else MemoryStateStore()
        )
        yield DryRunStore(inner)
    finally:
        engine.dispose()


def _missing_sqlite_file(url: str) -> bool:
    prefix = "sqlite:///"
    return url.startswith(prefix) and not Path(url[len(prefix) :]).exists()


def db_upgrade(url: str, revision: str = "head") -> str:
    """Migrate the store at ``url`` up to ``revision``; the revision it is at afterwards."""
    engine = make_engine(url)
    try:
        migrate.upgrade(engine, revision)
        return migrate.current_revision(engine) or "base"
    finally:
        engine.dispose()


def db_downgrade(url: str, revision: str) -> str:
    engine = make_engine(url)
    try:
        migrate.downgrade(engine, revision)
        return migrate.current_revision(engine) or "base"
    finally:
        engine.dispose()


def db_current(url: str) -> str:
    engine = make_engine(url)
    try:
        return migrate.current_revision(engine) or "base"
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
    settings: Settings,
    on_outcome: Callable[[FeedOutcome], None],
    *,
    dry_run: bool = False,
) -> Iterator[PlanService]:
    """A ready ``PlanService`` with its store and HTTP client, closed when the block ends.

    With ``dry_run`` the database is read but never written (nor migrated).
    """
    verify: bool | str = settings.http.ca_bundle or True
    client = make_http_client(settings.http.timeout, settings.http.user_agent, verify)
    with client, _store_for(settings.database.url, dry_run=dry_run) as store:
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


def make_registry(settings: Settings) -> Registry:
    from releasebot.registry.oras import OrasRegistry  # requests + oras: only when needed

    registry = settings.registry
    try:
        return OrasRegistry(
            registry.repository,
            insecure=registry.insecure,
            ca_file=registry.ca_file or None,
            tls_verify=registry.tls_verify,
            docker_config=registry.docker_config or None,
            username=registry.username or None,
            password=registry.password or None,
            timeout=timedelta(seconds=registry.timeout_seconds),
            retries=registry.retries,
            user_agent=settings.http.user_agent,
        )
    except ValueError as error:
        raise ConfigError("registry", str(error)) from None


def kaniko_options(settings: Settings) -> KanikoOptions:
    kaniko = settings.kaniko
    try:
        return KanikoOptions(
            namespace=settings.kubernetes.namespace,
            registry_repository=settings.registry.repository,
            registry_secret=kaniko.registry_secret,
            context=kaniko.context or None,
            context_sub_path=kaniko.context_sub_path or None,
            context_configmap=None if kaniko.context else kaniko.context_configmap,
            dockerfile=kaniko.dockerfile,
            executor_image=kaniko.executor_image,
            memory_request=kaniko.memory_request,
            memory_limit=kaniko.memory_limit,
            ephemeral_storage_request=kaniko.ephemeral_storage_request,
            ephemeral_storage_limit=kaniko.ephemeral_storage_limit,
            cpu_request=kaniko.cpu_request,
            active_deadline=timedelta(seconds=kaniko.active_deadline_seconds),
            ttl_after_finished=timedelta(seconds=kaniko.ttl_seconds_after_finished),
            push_retry=kaniko.push_retry,
            insecure_registry=settings.registry.insecure,
            skip_tls_verify=not settings.registry.tls_verify,
            registry_ca_configmap=settings.registry.ca_configmap or None,
            user_namespace=kaniko.user_namespace,
        )
    except InvalidOptionError as error:
        raise ConfigError("kaniko", str(error)) from None


def make_launcher(settings: Settings, *, dry_run: bool = False) -> JobLauncher:
    options = kaniko_options(settings)
    if dry_run:
        return MemoryJobLauncher(options)
    # lightkube costs a fifth of a second to import: only commands that launch pay for it
    from releasebot.builders.kubernetes import KubernetesJobLauncher, make_kube_client

    kubeconfig = settings.kubernetes.kubeconfig or os.environ.get("KUBECONFIG") or None
    client = make_kube_client(kubeconfig, settings.kubernetes.namespace)
    return KubernetesJobLauncher(client, options)


def reconcile_options(settings: Settings) -> ReconcileOptions:
    build = settings.build
    return ReconcileOptions(
        max_concurrent_builds=build.max_concurrent_builds,
        max_attempts=build.max_attempts,
        retry_base=timedelta(seconds=build.retry_base_seconds),
        retry_cap=timedelta(seconds=build.retry_cap_seconds),
    )


@contextmanager
def reconcile_service(
    settings: Settings,
    on_outcome: Callable[[FeedOutcome], None],
    *,
    dry_run: bool = False,
    cluster: bool = True,
    registry: Registry | None = None,
) -> Iterator[ReconcileService]:
    """A ready ``ReconcileService``: store, feeds, registry and cluster wired from settings.

    A dry run reads the store and the registry, renders Jobs, and changes nothing. Without
    ``cluster`` no Kubernetes client is made (for ``plan``, which launches nothing).
    """
    launcher = make_launcher(settings, dry_run=dry_run or not cluster)  # config errors first
    registry = registry or make_registry(settings)
    with (
        closing(launcher),
        closing(registry),
        plan_service(settings, on_outcome, dry_run=dry_run) as planner,
    ):
        yield ReconcileService(
            planner=planner,
            store=planner.store,
            registry=registry,
            launcher=launcher,
            clock=utc_now,
            options=reconcile_options(settings),
            dry_run=dry_run,
        )


def run_identity(settings: Settings) -> str:
    """This replica's name: ``run.identity``, else ``$POD_NAME``, else the host name."""
    return settings.run.identity or os.environ.get("POD_NAME") or socket.gethostname()


def secret_values(settings: Settings) -> list[str]:
    """Every secret the settings hold, for the log filter that masks them."""
    values = [settings.registry.password, make_url_password(settings.database.url)]
    for name in ("bot_token", "signing_secret", "app_token"):
        try:
            values.append(settings.slack.secret(name))
        except ConfigError:  # an unreadable file: the feature using it reports that
            continue
    return [value for value in values if value]


def make_url_password(url: str) -> str:
    try:
        return urlsplit(url).password or ""
    except ValueError:
        return ""


@contextmanager
def guarded(settings: Settings, holder: str | None = None) -> Iterator[bool]:
    """Hold the database's cycle guard for the block (``reconcile --once``); yields whether
    it is held: False means another process runs a cycle right now."""
    from releasebot.store.lock import CycleGuard

    engine = make_engine(settings.database.url)
    try:
        holder = holder or f"{run_identity(settings)}/{os.getpid()}"
        with CycleGuard(engine).hold(holder, GUARD_TTL, utc_now) as held:
            yield held
    finally:
        engine.dispose()


GUARD_TTL = timedelta(seconds=60)
"""SQLite guard rows lapse this long after a holder died (renewed every third of it)."""


def make_elector(settings: Settings, identity: str) -> LeaderElector:
    """The Kubernetes Lease elector, or ``AlwaysLeader`` with ``leader_election = "none"``."""
    from releasebot.leader.memory import AlwaysLeader

    run = settings.run
    if run.leader_election == "none":
        return AlwaysLeader(identity)
    from releasebot.builders.kubernetes import make_kube_client
    from releasebot.leader.lease import KubernetesLeaseElector

    lease = timedelta(seconds=run.lease_seconds)
    kubeconfig = settings.kubernetes.kubeconfig or os.environ.get("KUBECONFIG") or None
    # Each call bounded well under the renewal period, so a hung API server costs one round.
    timeout = min(timedelta(seconds=5), lease / 4)
    client = make_kube_client(kubeconfig, settings.kubernetes.namespace, timeout=timeout)
    return KubernetesLeaseElector(
        client,
        name=run.lease_name,
        namespace=settings.kubernetes.namespace,
        identity=identity,
        duration=lease,
    )


@dataclass(frozen=True)
class RunHooks:
    """What other features plug into ``releasebot run``; every one is optional.

    ``on_lead_start``/``on_lead_stop`` run on the scheduler's lease thread when this
    process gains or loses the leadership (and ``on_lead_stop`` at shutdown): start and
    stop Socket Mode there, without blocking. ``deliver`` runs every few seconds on the
    leader only. ``socket_connected`` feeds /readyz on the leader (``None``: not used).
    ``slack`` answers ``POST /slack/commands`` from the raw body and headers.
    """

    on_lead_start: Callable[[], None] = lambda: None
    on_lead_stop: Callable[[], None] = lambda: None
    deliver: Callable[[], object] = lambda: None
    socket_connected: Callable[[], bool | None] = lambda: None
    slack: SlackHandler | None = None
    close: Callable[[], None] = lambda: None
    """Called once at shutdown, after the leadership was given up."""


def run_hooks(settings: Settings, store: StateStore, service: ReconcileService) -> RunHooks:
    """The Slack features' hooks for ``releasebot run``; none until they are wired here."""
    return RunHooks()


def run_service(
    settings: Settings,
    *,
    log_format: str | None = None,
    quiet: bool = False,
    stop: threading.Event | None = None,
) -> int:
    """``releasebot run``: serve and schedule until SIGTERM/SIGINT (or ``stop`` is set).

    Exit code 0 after a clean shutdown. A cycle still running after the shutdown grace is
    abandoned by ending the process at once (see ``service.runner``).
    """
    from releasebot.logs import configure_logging
    from releasebot.service.metrics import ServiceMetrics
    from releasebot.service.runner import Runner, RunnerOptions
    from releasebot.store.engine import ping
    from releasebot.store.lock import CycleGuard
    from releasebot.web.server import HttpServer

    configure_logging(
        log_format or settings.run.log_format,
        level=logging.WARNING if quiet else logging.INFO,
        secrets=secret_values(settings),
    )
    stop = stop or threading.Event()
    _on_signals(stop)
    run = settings.run
    identity = run_identity(settings)
    options = RunnerOptions(
        interval=timedelta(seconds=run.interval_seconds),
        jitter=timedelta(seconds=run.jitter_seconds),
        lease=timedelta(seconds=run.lease_seconds),
        guard_ttl=GUARD_TTL,
    )
    elector = make_elector(settings, identity)
    with (
        closing(elector),
        reconcile_service(settings, _log_feed) as service,
        _engine(settings.database.url) as engine,
    ):
        store = SqlStateStore(engine)
        hooks = run_hooks(settings, store, service)
        metrics = ServiceMetrics()
        runner = Runner(
            cycle=service.cycle,
            elector=elector,
            guard=CycleGuard(engine),
            holder=f"{identity}/{os.getpid()}",
            store=store,
            metrics=metrics,
            ping=lambda: ping(engine),
            deliver=hooks.deliver,
            on_lead_start=hooks.on_lead_start,
            on_lead_stop=hooks.on_lead_stop,
            socket_connected=hooks.socket_connected,
            options=options,
        )
        host, _, port = run.listen.rpartition(":")
        try:
            server = HttpServer(
                host,
                int(port),
                alive=runner.alive,
                ready=runner.readiness,
                metrics=metrics.render,
                slack=hooks.slack,
            )
        except OSError as error:
            raise ConfigError("run.listen", f"cannot listen on {run.listen}: {error}") from None
        runner.start()
        server.start()
        logging.getLogger("releasebot.run").info(
            "releasebot run started", extra={"identity": identity, "listen": run.listen}
        )
        stop.wait()
        logging.getLogger("releasebot.run").info("shutting down")
        finished = runner.stop()
        hooks.close()
        server.close()
        if not finished:
            logging.shutdown()
            os._exit(0)  # the cycle's thread cannot be interrupted; its state is safe
    return 0


@contextmanager
def _engine(url: str) -> Iterator[Engine]:
    engine = make_engine(url)
    try:
        yield engine
    finally:
        engine.dispose()


def _log_feed(outcome: FeedOutcome) -> None:
    extra = {"feed": outcome.feed, "result": outcome.status.value}
    if outcome.error is not None:
        _feed_log.warning("%s", outcome.error, extra=extra)
    else:
        _feed_log.info("feed %s: %s", outcome.feed, outcome.status.value, extra=extra)


_feed_log = logging.getLogger("releasebot.feeds")


def _on_signals(stop: threading.Event) -> None:
    """SIGTERM and SIGINT set ``stop``; a second one ends the process the default way."""
    if threading.current_thread() is not threading.main_thread():
        return  # tests run the service in a thread and set ``stop`` themselves

    def handle(number: int, _frame: object) -> None:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        logging.getLogger("releasebot.run").info(
            "received %s", signal.Signals(number).name, extra={"signal": number}
        )
        stop.set()

    signal.signal(signal.SIGTERM, handle)
    signal.signal(signal.SIGINT, handle)


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
