"""Settings into working objects: stores, feeds, registry, cluster, the reconcile service.

Every function is a plain factory; nothing connects until one is called, and the context
managers close what they opened on every exit path.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import ExitStack, closing, contextmanager, nullcontext
from dataclasses import asdict, replace
from datetime import UTC, datetime
from importlib.resources import files
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sqlalchemy import Engine

from releasebot.builders.memory import MemoryJobLauncher
from releasebot.config import DatabaseSettings, FlatcarSettings, NvidiaSettings, Settings
from releasebot.config.pod import kubeconfig_path
from releasebot.domain.ports import (
    FleetSource,
    JobLauncher,
    NodeAnnotator,
    PodSource,
    Registry,
    StateStore,
)
from releasebot.domain.shared.errors import ConfigError, StoreError
from releasebot.domain.targets.attestation import Verification
from releasebot.domain.targets.bases import BaseRules
from releasebot.edge.retry import real_sleep
from releasebot.edge.stop import Halt
from releasebot.registry.credentials import (
    CachedTokenCredentials,
    RegistryCredentials,
    TokenFetcher,
    check_token,
)
from releasebot.service.fleet import FleetService
from releasebot.service.plan import FeedOutcome, FeedSpec, PlanService
from releasebot.service.proof import ProofService
from releasebot.service.reconcile import ReconcileOptions, ReconcileService
from releasebot.sources.artifacts import HttpArtifactSource
from releasebot.sources.fetch import HttpFeedFetcher, make_http_client
from releasebot.sources.flatcar import parse_flatcar_feed
from releasebot.sources.nvidia import parse_nvidia_feed
from releasebot.store import migrate
from releasebot.store.dryrun import DryRunStore
from releasebot.store.engine import make_engine
from releasebot.store.memory import MemoryStateStore
from releasebot.store.sql import SqlStateStore
from releasebot.wiring.signing import make_attestor, verify_published

if TYPE_CHECKING:
    from lightkube import Client


def utc_now() -> datetime:
    return datetime.now(UTC)


@contextmanager
def kube_client(settings: Settings, shared: Client | None = None) -> Iterator[Client]:
    """The Kubernetes client of the block: ``shared`` when the process has one (its owner
    closes it), else one of its own from the kubeconfig (``config.pod``), closed at the end.

    One client per API server configuration: the Jobs, the fleet, the Nodes' annotations,
    the Pods and retention all use the same kubeconfig and timeout, so ``releasebot run``
    shares one (lightkube's client holds no state between requests, and its httpx2 pool
    is safe across threads). The leader election's differs (a shorter timeout) and keeps
    its own."""
    if shared is not None:
        yield shared
        return
    from releasebot.edge.kube import make_kube_client  # lightkube: only when needed

    client = make_kube_client(kubeconfig_path(settings))
    try:
        yield client
    finally:
        client.close()


@contextmanager
def open_engine(url: str) -> Iterator[Engine]:
    """An engine on the store at ``url`` (it connects on first use), disposed at the end:
    the one engine of a process, shared by the store, the guard and the chat commands."""
    engine = make_engine(url)
    try:
        yield engine
    finally:
        engine.dispose()


def migrated_store(engine: Engine, *, keep_events: bool = True) -> SqlStateStore:
    """The store on ``engine``, migrated to the newest schema first if it is behind.

    Checked before any use: a database a newer releasebot migrated, or one missing a
    table, is refused (``StoreError``) rather than written to."""
    if migrate.schema_status(engine) is not migrate.Schema.CURRENT:
        migrate.upgrade(engine)
    return SqlStateStore(engine, keep_events=keep_events)


@contextmanager
def open_store(
    url: str, *, upgrade: bool = True, keep_events: bool = True
) -> Iterator[SqlStateStore]:
    """Open the state store at ``url``; migrate it to the newest schema first if asked."""
    with open_engine(url) as engine:
        yield (
            migrated_store(engine, keep_events=keep_events)
            if upgrade
            else SqlStateStore(engine, keep_events=keep_events)
        )


@contextmanager
def _store_for(
    url: str, *, dry_run: bool, engine: Engine | None = None, keep_events: bool = True
) -> Iterator[StateStore]:
    """The store at ``url`` (on ``engine`` when one is given); for a dry run read-only, and
    empty if it does not exist yet. ``keep_events``: whether anyone delivers the outbox."""
    if not dry_run:
        if engine is not None:
            yield migrated_store(engine, keep_events=keep_events)
            return
        with open_store(url, keep_events=keep_events) as store:
            yield store
        return
    if _missing_sqlite_file(url):  # do not even create the file
        yield DryRunStore(MemoryStateStore())
        return
    with open_engine(url) as own:
        yield DryRunStore(read_only_store(own))


def read_only_store(engine: Engine) -> StateStore:
    """The store a dry run reads: the database as it is, or empty if it was never migrated.

    A dry run migrates nothing, so a database at an older schema is refused with the advice
    to migrate it first (planning from an empty store instead would ignore its pause flag,
    its failures and its builds, and pretend); a newer one is refused by ``schema_status``.
    """
    status = migrate.schema_status(engine)
    if status is migrate.Schema.EMPTY:
        return MemoryStateStore()
    if status is migrate.Schema.BEHIND:
        raise StoreError(
            "state store: the database's schema is older than this releasebot's and a dry "
            "run migrates nothing: run `releasebot db upgrade` first"
        )
    return SqlStateStore(engine)


def _missing_sqlite_file(url: str) -> bool:
    prefix = "sqlite:///"
    return url.startswith(prefix) and not Path(url[len(prefix) :]).exists()


def db_upgrade(url: str, revision: str = "head") -> str:
    """Migrate the store at ``url`` up to ``revision``; the revision it is at afterwards."""
    with open_engine(url) as engine:
        migrate.upgrade(engine, revision)
        return migrate.current_revision(engine) or "base"


def db_downgrade(url: str, revision: str) -> str:
    with open_engine(url) as engine:
        migrate.downgrade(engine, revision)
        return migrate.current_revision(engine) or "base"


def db_current(url: str) -> str:
    with open_engine(url) as engine:
        return migrate.current_revision(engine) or "base"


def feed_specs(settings: Settings) -> tuple[list[FeedSpec], FeedSpec]:
    flatcar = [
        FeedSpec.flatcar(channel, settings.flatcar_feed_url(channel))
        for channel in settings.flatcar.channels
    ]
    return flatcar, FeedSpec.nvidia(settings.nvidia.feed_url)


def channel_feed(settings: Settings) -> Callable[[str], FeedSpec] | None:
    """The feed of any channel (for those GPU nodes follow); ``None`` without ``{channel}``."""
    if "{channel}" not in settings.flatcar.feed_url:
        return None
    return lambda channel: FeedSpec.flatcar(channel, settings.flatcar_feed_url(channel))


@contextmanager
def proof_annotator(
    settings: Settings, kube: Client | None = None
) -> Iterator[NodeAnnotator | None]:
    """What ``/releasebot release NODE`` writes with: the proof annotation on Nodes, when
    ``fleet.proof`` is on (else ``None``: there is nothing to release)."""
    fleet = settings.fleet
    if not (fleet.enabled and fleet.proof):
        yield None
        return
    from releasebot.fleet.gate import KubernetesNodeAnnotator

    with kube_client(settings, kube) as client:
        yield KubernetesNodeAnnotator(
            client, annotation=fleet.gate_annotation, proof_annotation=fleet.proof_annotation
        )


@contextmanager
def fleet_service(
    settings: Settings,
    store: StateStore,
    *,
    dry_run: bool = False,
    gate: bool = True,
    source: FleetSource | None = None,
    halt: Halt | None = None,
    kube: Client | None = None,
) -> Iterator[FleetService | None]:
    """The fleet's use case when ``fleet.enabled``, reading the cluster through one
    Kubernetes client, or over ``source`` (the demo's simulated fleet, read only). The
    reboot gate's annotator only with ``fleet.gate`` and ``gate`` (commands that launch
    nothing never write Nodes)."""
    fleet = settings.fleet
    if source is None and not fleet.enabled:
        yield None
        return
    annotator: NodeAnnotator | None = None
    prover: ProofService | None = None
    with ExitStack() as stack:
        if source is None:
            from releasebot.fleet.gate import KubernetesNodeAnnotator
            from releasebot.fleet.kubernetes import KubernetesFleetSource

            client = stack.enter_context(kube_client(settings, kube))
            sleep = real_sleep if halt is None else halt.sleep
            source = KubernetesFleetSource(
                client,
                selector=fleet.selector,
                page_size=fleet.page_size,
                gate_annotation=fleet.gate_annotation,
                proof_annotation=fleet.proof_annotation,
                sleep=sleep,
            )
            writer = KubernetesNodeAnnotator(
                client,
                annotation=fleet.gate_annotation,
                proof_annotation=fleet.proof_annotation,
                sleep=sleep,
            )
            if fleet.gate and gate:
                annotator = writer
            if fleet.proof:
                from releasebot.fleet.pods import KubernetesPodSource

                pods = KubernetesPodSource(client, namespace=fleet.operator_namespace, sleep=sleep)
                prover = ProofService(
                    pods=pods,
                    annotator=writer if gate else None,
                    store=store,
                    clock=utc_now,
                    rules=fleet.proof_rules,
                    dry_run=dry_run,
                )
        elif fleet.proof and isinstance(source, PodSource):
            prover = ProofService(
                pods=source,
                annotator=source if gate and isinstance(source, NodeAnnotator) else None,
                store=store,
                clock=utc_now,
                rules=fleet.proof_rules,
                dry_run=dry_run,
            )
        yield FleetService(
            source=source,
            store=store,
            clock=utc_now,
            repository=settings.registry.repository,
            annotator=annotator,
            alerts=settings.slack.enabled,
            dry_run=dry_run,
            prover=prover,
            requires_proof=fleet.gate_requires_proof,
        )


@contextmanager
def plan_service(
    settings: Settings,
    on_outcome: Callable[[FeedOutcome], None],
    *,
    dry_run: bool = False,
    engine: Engine | None = None,
    gate: bool = True,
    fleet_source: FleetSource | None = None,
    halt: Halt | None = None,
    kube: Client | None = None,
) -> Iterator[PlanService]:
    """A ready ``PlanService`` with its store, HTTP client and fleet, closed when the block
    ends.

    With ``dry_run`` the database is read but never written (nor migrated). The store is on
    ``engine`` when one is given (the caller disposes of it). With ``halt`` (``run``'s
    shutdown) feed requests and retry pauses end as soon as it is set.
    """
    verify: bool | str = settings.http.ca_bundle or True
    client = make_http_client(settings.http.timeout, settings.http.user_agent, verify)
    url = settings.database.url
    with (
        client,
        # Events only when Slack delivers them: with Slack off nobody ever would.
        _store_for(
            url, dry_run=dry_run, engine=engine, keep_events=settings.slack.enabled
        ) as store,
        fleet_service(
            settings, store, dry_run=dry_run, gate=gate, source=fleet_source, halt=halt, kube=kube
        ) as fleet,
    ):
        flatcar, nvidia = feed_specs(settings)
        yield PlanService(
            store=store,
            fetcher=HttpFeedFetcher(
                client,
                retries=settings.http.retries,
                sleep=real_sleep if halt is None else halt.sleep,
                halt=halt,
            ),
            flatcar_feeds=flatcar,
            nvidia_feed=nvidia,
            parse_flatcar=parse_flatcar_feed,
            parse_nvidia=parse_nvidia_feed,
            policy=settings.policy(),
            clock=utc_now,
            on_outcome=on_outcome,
            feed_alert_after=settings.slack.feed_alert_after if settings.slack.enabled else None,
            fleet=fleet,
            channel_feed=channel_feed(settings),
        )


def registry_credentials(settings: Settings) -> RegistryCredentials | None:
    """The cloud token provider ``registry.auth`` names; ``None`` for ``dockerconfig``
    (``OrasRegistry`` reads the docker config or the username itself)."""
    fetch = token_fetcher(settings)
    return None if fetch is None else CachedTokenCredentials(settings.registry.auth, fetch, utc_now)


def job_registry_login(settings: Settings) -> Callable[[], str] | None:
    """For ``registry.auth = "azure"``: a FRESH login per build Job's Secret (never the
    bot's cached one, which may be minutes from its end), judged like any token."""
    fetch = token_fetcher(settings) if settings.registry.auth == "azure" else None
    if fetch is None:
        return None
    fetcher = fetch
    return lambda: check_token("azure", fetcher(), utc_now()).encoded()


def token_fetcher(settings: Settings) -> TokenFetcher | None:
    """The fetcher of ``registry.auth``'s cloud. Each cloud's library is imported only
    here, only when configured: ``ConfigError`` names the extra to install when missing."""
    registry = settings.registry
    if registry.auth == "ecr":
        from releasebot.registry.ecr import ecr_fetcher

        return ecr_fetcher(registry.host, registry.aws_region, registry.timeout)
    if registry.auth == "gcp":
        from releasebot.registry.gcp import gcp_fetcher

        return gcp_fetcher(registry.timeout)
    if registry.auth == "azure":
        from releasebot.registry.azure import azure_fetcher

        scheme = "http" if registry.insecure else "https"
        verify: bool | str = (registry.ca_file or True) if registry.tls_verify else False
        return azure_fetcher(f"{scheme}://{registry.host}", verify, registry.timeout)
    return None


def make_registry(settings: Settings, halt: Halt | None = None) -> Registry:
    from releasebot.registry.oras import OrasRegistry  # requests + oras: only when needed

    registry = settings.registry
    credentials = registry_credentials(settings)
    try:
        return OrasRegistry(
            registry.repository,
            insecure=registry.insecure,
            ca_file=registry.ca_file or None,
            tls_verify=registry.tls_verify,
            docker_config=registry.docker_config or None,
            username=registry.username or None,
            password=registry.password or None,
            credentials=credentials,
            timeout=registry.timeout,
            retries=registry.retries,
            user_agent=settings.http.user_agent,
            sleep=real_sleep if halt is None else halt.sleep,
        )
    except ValueError as error:
        raise ConfigError("registry", str(error)) from None


def make_launcher(
    settings: Settings, *, dry_run: bool = False, kube: Client | None = None
) -> JobLauncher:
    """The build Jobs' launcher: in memory for a dry run, else on ``kube`` when the process
    shares one (the launcher's ``close`` then must not be called), else on its own client."""
    options = settings.kaniko_options()
    if dry_run:
        return MemoryJobLauncher(options)
    # lightkube costs a fifth of a second to import: only commands that launch pay for it
    from releasebot.builders.kubernetes import KubernetesJobLauncher
    from releasebot.edge.kube import make_kube_client

    client = kube or make_kube_client(kubeconfig_path(settings), settings.kubernetes.namespace)
    return KubernetesJobLauncher(client, options, registry_login=job_registry_login(settings))


def reconcile_options(settings: Settings) -> ReconcileOptions:
    rules = settings.lifecycle_rules()
    return ReconcileOptions(**asdict(rules), recipe_args=recipe_args(settings))


def recipe_args(settings: Settings) -> tuple[tuple[str, str], ...]:
    """What every build is told beyond the contract: mirrors, the key, the recipe's revision."""
    from releasebot.builders.recipe import recipe_revision

    recipe = settings.recipe
    args: tuple[tuple[str, str], ...] = (
        ("FLATCAR_BASE_URL", recipe.flatcar_base_url),
        ("NVIDIA_BASE_URL", recipe.nvidia_base_url),
        ("FLATCAR_KEY_FINGERPRINT", recipe.flatcar_key_fingerprint),
        ("FLATCAR_KEY_URL", recipe.flatcar_key_url),
        ("MODULE_TYPES", recipe.module_types),
    )
    args += os_images(settings)
    if settings.kaniko.context:  # a git recipe of the operator's own: its revision is its commit
        return args
    # The shipped recipe, installed with `releasebot recipe configmap` from this very version.
    return (*args, ("RECIPE_REVISION", recipe_revision()))


@contextmanager
def reconcile_service(
    settings: Settings,
    on_outcome: Callable[[FeedOutcome], None],
    *,
    dry_run: bool = False,
    cluster: bool = True,
    registry: Registry | None = None,
    engine: Engine | None = None,
    fleet_source: FleetSource | None = None,
    halt: Halt | None = None,
    kube: Client | None = None,
) -> Iterator[ReconcileService]:
    """A ready ``ReconcileService``: store, feeds, registry and cluster wired from settings.

    A dry run reads the store and the registry, renders Jobs, and changes nothing. Without
    ``cluster`` no Kubernetes client is made (for ``plan``, which launches nothing). The
    store is on ``engine`` when one is given (``releasebot run`` shares its one engine),
    and the cluster is reached through ``kube`` when one is given (``run`` shares one
    client per API server configuration); the settings of the cluster and the registry are
    checked before it is touched.
    """
    launcher = make_launcher(settings, dry_run=dry_run or not cluster, kube=kube)  # config first
    registry = registry or make_registry(settings, halt)
    verify: bool | str = settings.http.ca_bundle or True
    http = make_http_client(settings.http.timeout, settings.http.user_agent, verify)
    artifacts = None
    if settings.recipe.check_inputs and cluster:
        artifacts = HttpArtifactSource(
            http,
            flatcar_base_url=settings.recipe.flatcar_base_url,
            nvidia_base_url=settings.recipe.nvidia_base_url,
        )
    with (
        closing(launcher) if kube is None else nullcontext(),  # a shared client's owner closes it
        closing(registry),
        http,
        plan_service(
            settings,
            on_outcome,
            dry_run=dry_run,
            engine=engine,
            gate=cluster,
            fleet_source=fleet_source,
            halt=halt,
            kube=kube,
        ) as planner,
    ):
        attestor = None
        if cluster and not dry_run:
            attestor = make_attestor(settings, registry, http)
        yield ReconcileService(
            planner=planner,
            store=planner.store,
            registry=registry,
            launcher=launcher,
            clock=utc_now,
            options=reconcile_options(settings),
            dry_run=dry_run,
            artifacts=artifacts,
            attestor=attestor,
            full_pass_every=settings.run.full_pass,
            base_rules=base_rules(settings),
        )


def base_rules(settings: Settings) -> BaseRules | None:
    """What makes a driver base (``domain/targets/bases.py``); ``None`` with ``recipe.bases`` off.

    The revision is the shipped recipe's digest, or the commit a git context pins: a
    change of either is a new base."""
    if not settings.recipe.bases:
        return None
    args = recipe_args(settings)
    revision = dict(args).get("RECIPE_REVISION")
    if revision is None:  # a git recipe of the operator's own: its commit, shortened
        revision = (settings.kaniko.context or "unknown").rsplit("#", 1)[-1][:12]
    return BaseRules(revision=revision, os_images=os_images(settings), build_args=args)


def os_images(settings: Settings) -> tuple[tuple[str, str], ...]:
    """``RUNTIME_IMAGE`` and ``BUILDER_IMAGE`` as configured (the recipe's defaults when
    empty): every build is told them, and they are part of a base's tag."""
    recipe = settings.recipe
    pairs = (("RUNTIME_IMAGE", recipe.runtime_image), ("BUILDER_IMAGE", recipe.builder_image))
    return tuple((name, value) for name, value in pairs if value)


def verify_tag(settings: Settings, tag: str) -> Verification:
    """``releasebot verify TAG``: check the tag's signatures, SBOM and provenance."""
    with closing(make_registry(settings)) as registry:
        return verify_published(settings, registry, tag)


def demo_registry(settings: Settings) -> Registry:
    """An empty in-memory registry for ``settings``' repository: every target is missing."""
    from releasebot.registry.memory import MemoryRegistry

    return MemoryRegistry(settings.registry.repository)


def recipe_manifest(settings: Settings) -> dict[str, Any]:
    """The ConfigMap of the shipped recipe, for the build namespace (``recipe configmap``)."""
    from releasebot.builders.recipe import CONFIGMAP_NAME, recipe_configmap

    name = settings.kaniko.context_configmap or CONFIGMAP_NAME
    return recipe_configmap(settings.kubernetes.namespace, name)


def with_fleet(settings: Settings) -> Settings:
    """``settings`` with ``fleet.enabled`` on (``releasebot fleet`` reads it regardless)."""
    return replace(settings, fleet=replace(settings.fleet, enabled=True))


def demo_fleet_source() -> FleetSource:
    """The simulated fleet of ``releasebot demo`` (``demo/fleet.json``), in memory."""
    from releasebot.fleet.memory import MemoryFleetSource

    nodes = json.loads((demo_feed_dir() / "fleet.json").read_text(encoding="utf-8"))
    return MemoryFleetSource(nodes)


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
