"""``releasebot run``: the scheduler, the leader election, the web server, wired.

One process, one database engine: the cycle's store, the runner's guard and gauges, and
the Slack features (which plug in through ``RunHooks``, ``wiring/slack.py``) all use it.
One reconcile service: the cycle's, which the chat commands use too (under the guard). One
Kubernetes client per API server configuration: the Jobs, the fleet, the Nodes, the Pods
and retention share one; the Lease's has a shorter timeout and is its own. The guard
itself and the replica's name are ``wiring/guard.py``'s; what the scheduled work logs is
``service/runlog.py``'s.
"""

from __future__ import annotations

import functools
import logging
import os
import signal
import threading
from collections.abc import Callable
from contextlib import ExitStack, closing
from datetime import timedelta
from typing import TYPE_CHECKING

from releasebot.config import Settings
from releasebot.config.pod import kubeconfig_path, lease_namespace
from releasebot.config.secrets import secret_values
from releasebot.domain.shared.errors import ConfigError
from releasebot.edge.heap import give_back_free_memory
from releasebot.edge.parse import parse_listen_address
from releasebot.edge.stop import Halt
from releasebot.runtime.lock import CycleGuard
from releasebot.runtime.runner import RunnerOptions
from releasebot.service.runlog import log_feed_outcome, run_retention
from releasebot.store.migrate import upgrade_apart
from releasebot.web.server import HttpServer
from releasebot.wiring.core import kube_client, open_engine, reconcile_service
from releasebot.wiring.guard import GUARD_TTL, SharedGuard, guard_holder, run_identity
from releasebot.wiring.retention import retention_service
from releasebot.wiring.slack import slack_hooks
from releasebot.wiring.web import listen_address, overview_app

if TYPE_CHECKING:
    from releasebot.domain.ports import LeaderElector
    from releasebot.service.reconcile import CycleReport, ReconcileService


def make_elector(settings: Settings, identity: str) -> LeaderElector:
    """The Kubernetes Lease elector, or ``AlwaysLeader`` with ``leader_election = "none"``."""
    from releasebot.runtime.leader.memory import AlwaysLeader

    run = settings.run
    if run.leader_election == "none":
        return AlwaysLeader(identity)
    from releasebot.edge.kube import make_kube_client
    from releasebot.runtime.leader.lease import KubernetesLeaseElector

    lease = run.lease
    kubeconfig = kubeconfig_path(settings)
    # Each call bounded well under the renewal period, so a hung API server costs one round.
    timeout = min(timedelta(seconds=5), lease / 4)
    client = make_kube_client(kubeconfig, settings.kubernetes.namespace, timeout=timeout)
    # The Lease lives in releasebot's own namespace, which may differ from the build one.
    namespace = lease_namespace(settings)
    return KubernetesLeaseElector(
        client,
        name=run.lease_name,
        namespace=namespace,
        identity=identity,
        duration=lease,
    )


def runner_options(settings: Settings) -> RunnerOptions:
    """The scheduler's timing: ``[run]``'s interval, jitter and lease, the guard's ttl."""
    run = settings.run
    return RunnerOptions(
        interval=run.interval,
        jitter=run.jitter,
        lease=run.lease,
        guard_ttl=GUARD_TTL,
        full_pass=run.full_pass,
    )


def run_service(
    settings: Settings,
    *,
    log_format: str | None = None,
    quiet: bool = False,
    stop: threading.Event | None = None,
) -> int:
    """``releasebot run``: serve and schedule until SIGTERM/SIGINT (or ``stop`` is set).

    Exit code 0 after a clean shutdown. A cycle still running after the shutdown grace is
    abandoned by ending the process at once (see ``runtime.runner``).
    """
    from releasebot.logs import RedactSecrets, configure_logging

    secrets = secret_values(settings)
    configure_logging(
        log_format or settings.run.log_format,
        level=logging.WARNING if quiet else logging.INFO,
        secrets=secrets,
    )
    redact = RedactSecrets(secrets).redact  # the /readyz body is unauthenticated
    stop = stop or threading.Event()
    _on_signals(stop)
    check_run(settings)  # every setting first: no warning, no database, no Lease before
    server, page_server = _bind(settings)  # a port taken is a setting's problem too
    try:
        return _serve(settings, server, page_server, redact, stop)
    finally:
        server.close()  # idempotent: already closed on a clean shutdown
        if page_server is not None:
            page_server.close()


def check_run(settings: Settings) -> None:
    """What only the wiring can judge of the settings, before ``run`` starts anything: the
    page's own address, the Slack secrets' files, the Kubernetes config, the registry's
    options and the signing key. ``ConfigError`` naming the key; reads local files only."""
    from releasebot.edge.kube import make_kube_client
    from releasebot.wiring.core import make_registry
    from releasebot.wiring.signing import check_signing_key

    make_kube_client(
        kubeconfig_path(settings)
    ).close()  # the Jobs' client; the Lease's and the fleet's too

    web = settings.web
    if web.enabled and web.listen not in ("", settings.run.listen):
        listen_address("web.listen", web.listen)
    for name in ("bot_token", "signing_secret", "app_token"):
        settings.slack.secret(name)
    with closing(make_registry(settings)):
        pass
    if settings.signing.enabled:
        check_signing_key(settings)


def _bind(settings: Settings) -> tuple[HttpServer, HttpServer | None]:
    """The probes' server on ``run.listen`` and, when it has a port of its own, the page's
    on ``web.listen``: bound (not serving yet), or ``ConfigError`` naming the key."""
    run, web = settings.run, settings.web
    host, port = parse_listen_address(run.listen)  # checked by the settings already
    try:
        server = HttpServer(host, port, allowed_hosts=web.allowed_hosts)
    except OSError as error:
        raise ConfigError("run.listen", f"cannot listen on {run.listen}: {error}") from None
    if not web.enabled or web.listen in ("", run.listen):
        return server, None
    page_host, page_port = listen_address("web.listen", web.listen)
    try:
        return server, HttpServer(page_host, page_port, allowed_hosts=web.allowed_hosts)
    except OSError as error:
        server.close()
        raise ConfigError("web.listen", f"cannot listen on {web.listen}: {error}") from None


def _cycle_and_give_back(cycle: Callable[[], CycleReport]) -> CycleReport:
    """One cycle, then the memory it freed back to the system (``edge.heap``)."""
    try:
        return cycle()
    finally:
        give_back_free_memory()


def _serve(
    settings: Settings,
    server: HttpServer,
    page_server: HttpServer | None,
    redact: Callable[[str], str],
    stop: threading.Event,
) -> int:
    """Start everything on the bound servers, serve until ``stop``, shut down in order."""
    from releasebot.runtime.metrics import ServiceMetrics
    from releasebot.runtime.runner import Runner
    from releasebot.store.engine import ping

    halt = Halt()  # set at shutdown: ends the cycle's waits on upstreams
    run = settings.run
    identity = run_identity(settings)
    elector = make_elector(settings, identity)  # its own client: a shorter timeout
    with (
        closing(elector),
        kube_client(settings) as kube,  # the one client of the Jobs, fleet, Nodes, Pods
        open_engine(settings.database.url) as engine,
    ):
        # A migration's Alembic would stay resident for the life of the process: a new or
        # older database is brought to the head by a child process (store/migrate.py).
        upgrade_apart(engine)
        with (
            reconcile_service(
                settings, log_feed_outcome, engine=engine, halt=halt, kube=kube
            ) as service,
            ExitStack() as slack,
        ):
            guard = SharedGuard(CycleGuard(engine), guard_holder(identity))
            hooks = slack.enter_context(slack_hooks(settings, engine, guard, service, kube))
            retain: Callable[[], None] | None = None
            if settings.retention.enabled:
                apply = not settings.retention.dry_run
                retention = slack.enter_context(
                    retention_service(settings, apply=apply, engine=engine, kube=kube)
                )
                retain = functools.partial(run_retention, retention, apply=apply)
            metrics = ServiceMetrics()
            runner = Runner(
                cycle=functools.partial(_cycle_and_give_back, service.cycle),
                elector=elector,
                guard=guard.guard,
                holder=guard.holder,
                store=service.store,  # one store: the rows it keeps are decoded once
                metrics=metrics,
                ping=lambda: ping(engine),
                deliver=hooks.deliver,
                on_lead_start=functools.partial(_lead_start, service, hooks.on_lead_start),
                on_lead_stop=hooks.on_lead_stop,
                socket_connected=hooks.socket_connected,
                retention=retain,
                options=runner_options(settings),
            )
            # The cycle's store: the page reads the target rows it decoded (once per change).
            pages = overview_app(settings, service.store) if settings.web.enabled else None
            server.alive = runner.alive
            server.ready = lambda: _redacted(runner.readiness(), redact)
            server.metrics = metrics.render
            server.slack = hooks.slack
            if page_server is None:
                server.pages = pages
            else:
                page_server.pages = pages
            runner.start()
            server.start()
            if page_server is not None:
                page_server.start()
            logging.getLogger("releasebot.run").info(
                "releasebot run started", extra={"identity": identity, "listen": run.listen}
            )
            stop.wait()
            logging.getLogger("releasebot.run").info("shutting down")
            halt.set()  # a cycle waiting on an upstream unwinds now, not after its timeouts
            finished = runner.stop()
            slack.close()  # the Slack hooks, after the leadership was given up
            server.close()
            if page_server is not None:
                page_server.close()
            if not finished:
                logging.shutdown()
                os._exit(0)  # the cycle's thread cannot be interrupted; its state is safe
    return 0


def _lead_start(service: ReconcileService, hook: Callable[[], None]) -> None:
    """A new leader reads everything again at its first cycle: another process led (and
    wrote) meanwhile, and what this one kept from before may be old."""
    service.full_pass()
    hook()


def _redacted(readiness: tuple[bool, str], redact: Callable[[str], str]) -> tuple[bool, str]:
    ready, why = readiness
    return ready, redact(why)


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
