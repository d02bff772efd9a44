"""The settings tree: one frozen dataclass per section, each field with its rule beside it.

``setting(default, rule, key=...)`` declares a field: its default (written once: here, or
taken from the options that own it, ``KanikoOptions``, ``LifecycleRules``, the retry
policy), the rule its value follows (``config.rules``), and the key users write when that
is not the field's name: durations are ``timedelta`` fields read from their documented
``*_seconds`` keys. Every field's docstring or the example file says its unit and why its
default is what it is. Deliberately not here: reading the file and the environment
(``config.load``).
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from datetime import timedelta
from typing import Any

from releasebot.builders import kaniko
from releasebot.builders.kaniko import DEFAULT_EXECUTOR_IMAGE, KanikoOptions
from releasebot.builders.recipe import CONFIGMAP_NAME
from releasebot.config import rules
from releasebot.config.rules import Seconds, redact_url, setting
from releasebot.domain.errors import ConfigError, InvalidOptionError
from releasebot.domain.fleet import (
    DEFAULT_GATE_ANNOTATION,
    DEFAULT_PROOF_ANNOTATION,
    LIST_PAGE_SIZE,
)
from releasebot.domain.lifecycle import LifecycleRules
from releasebot.domain.policy import DriverPolicy, FlatcarPolicy, IncompatiblePair, Policy
from releasebot.domain.proof import ProofRules
from releasebot.domain.retention import DEFAULT_AFTER, DEFAULT_MAX_DELETIONS
from releasebot.domain.selectors import LabelSelector
from releasebot.domain.versions import Arch
from releasebot.edge.parse import ValueRefusedError, read_secret_file
from releasebot.edge.retry import RetryPolicy
from releasebot.registry import DEFAULT_TIMEOUT as REGISTRY_TIMEOUT

# -- the sections ------------------------------------------------------------------------------


@dataclass(frozen=True)
class DatabaseSettings:
    url: str = setting("sqlite:///releasebot.db", rules.database_url)
    """SQLAlchemy URL. ``sqlite:///relative.db``, ``sqlite:////abs.db`` or
    ``postgresql+psycopg://user:pass@host/db``; ``postgresql://`` is read as psycopg 3."""

    def __repr__(self) -> str:  # the URL may hold a password
        return f"DatabaseSettings(url={redact_url(self.url)!r})"

    def __str__(self) -> str:
        return repr(self)


@dataclass(frozen=True)
class FlatcarSettings:
    feed_url: str = setting(
        "https://www.flatcar.org/releases-json/releases-{channel}.json", rules.feed_url
    )
    channels: tuple[str, ...] = setting(("stable", "lts"), rules.channels)
    arches: tuple[str, ...] = setting(("amd64",), rules.arches)
    keep: int = setting(2, rules.keep)


@dataclass(frozen=True)
class NvidiaSettings:
    feed_url: str = setting(
        "https://docs.nvidia.com/datacenter/tesla/drivers/releases.json", rules.feed_url
    )
    branches: tuple[str, ...] = setting(("580",), rules.branches)
    branch_types: tuple[str, ...] = setting((), rules.branch_types)
    keep: int = setting(1, rules.keep)
    incompatible: tuple[str, ...] = setting((), rules.incompatible_pairs)
    """Known-bad ``DRIVER:KERNEL`` pairs (shell patterns, e.g. ``550.*:6.12.97*``): never
    planned, with the reason shown by ``plan``. Empty by default: a pair that fails to
    compile is found by its build (``incompatible``) and told once."""


REGISTRY_AUTHS = ("dockerconfig", "ecr", "gcp", "azure")
"""The values of ``registry.auth``."""


@dataclass(frozen=True)
class RegistrySettings:
    repository: str = setting(
        "registry.example.com/nvidia/driver", rules.kaniko_rule(kaniko.check_repository)
    )
    insecure: bool = setting(False)
    """Plain HTTP (a registry on a private network without TLS)."""
    ca_file: str = setting("")
    ca_configmap: str = setting("", rules.kaniko_rule(kaniko.check_name, optional=True))
    """ConfigMap (key ``ca.crt``) with the same CA, mounted into the build Jobs."""
    tls_verify: bool = setting(True)
    docker_config: str = setting("")
    """Path to a Docker ``config.json`` (the Secret Kaniko mounts); empty: none."""
    username: str = setting("")
    password: str = setting("", secret=True)
    timeout: timedelta = setting(
        REGISTRY_TIMEOUT, Seconds(0, 3600, whole=False), key="timeout_seconds"
    )
    retries: int = setting(RetryPolicy.retries, rules.retries)
    auth: str = setting("dockerconfig", rules.one_of(*REGISTRY_AUTHS))
    """Where the registry password comes from. ``dockerconfig`` (the default, as before any
    cloud support): ``username``/``password`` or ``docker_config``, a lasting password.
    ``ecr``, ``gcp``, ``azure``: a short-lived token from the pod's workload identity
    (IRSA / EKS Pod Identity, GKE Workload Identity, Azure Workload Identity), renewed
    before it expires; needs ``releasebot[aws]``, ``[gcp]`` or ``[azure]`` (the image has
    all three). docs/operations.md says what to create in each cloud."""
    aws_region: str = setting("", rules.printable(40, empty=True))
    """The AWS region of ECR's API (``auth = "ecr"``); empty: the one in the registry's host
    (``<account>.dkr.ecr.<region>.amazonaws.com``), else ``AWS_REGION``."""

    @property
    def host(self) -> str:
        return self.repository.split("/", 1)[0]

    @property
    def path(self) -> str:
        return self.repository.split("/", 1)[1]


@dataclass(frozen=True)
class KubernetesSettings:
    namespace: str = setting("releasebot", rules.kaniko_rule(kaniko.check_dns_label))
    kubeconfig: str = setting("")
    """Empty: the in-cluster service account, else ``$KUBECONFIG``."""


@dataclass(frozen=True)
class KanikoSettings:
    """The build Jobs' shape; the defaults (and rules) are ``KanikoOptions``'s."""

    executor_image: str = setting(DEFAULT_EXECUTOR_IMAGE, rules.kaniko_rule(kaniko.check_image))
    registry_secret: str = setting("releasebot-registry", rules.kaniko_rule(kaniko.check_name))
    service_account: str = setting("", rules.kaniko_rule(kaniko.check_name, optional=True))
    """The build Pods' service account; empty: the namespace's ``default``. With
    ``registry.auth = "ecr"`` or ``"gcp"`` name the one bound to the cloud identity that may
    push (Kaniko's credential helper uses it); unused by ``dockerconfig`` and ``azure``."""
    context: str = setting("", rules.git_context)
    """A git context (``git://host/repo.git#refs/heads/main#<commit>``); empty: the
    ConfigMap ``context_configmap`` mounted as ``dir://``."""
    context_configmap: str = setting(
        CONFIGMAP_NAME, rules.kaniko_rule(kaniko.check_name, optional=True)
    )
    context_sub_path: str = setting("", rules.sub_path)
    dockerfile: str = setting(KanikoOptions.dockerfile, rules.sub_path)
    memory_request: str = setting(
        KanikoOptions.memory_request, rules.kaniko_rule(kaniko.check_quantity)
    )
    memory_limit: str = setting(
        KanikoOptions.memory_limit, rules.kaniko_rule(kaniko.check_quantity)
    )
    ephemeral_storage_request: str = setting(
        KanikoOptions.ephemeral_storage_request, rules.kaniko_rule(kaniko.check_quantity)
    )
    ephemeral_storage_limit: str = setting(
        KanikoOptions.ephemeral_storage_limit, rules.kaniko_rule(kaniko.check_quantity)
    )
    cpu_request: str = setting(KanikoOptions.cpu_request, rules.kaniko_rule(kaniko.check_quantity))
    active_deadline: timedelta = setting(
        KanikoOptions.active_deadline, Seconds(60, 86400), key="active_deadline_seconds"
    )
    ttl_after_finished: timedelta = setting(
        KanikoOptions.ttl_after_finished, Seconds(0, 30 * 86400), key="ttl_seconds_after_finished"
    )
    push_retry: int = setting(KanikoOptions.push_retry, rules.kaniko_rule(kaniko.check_push_retry))
    user_namespace: bool = setting(KanikoOptions.user_namespace)


@dataclass(frozen=True)
class SlackSettings:
    bot_token: str = setting("", rules.token("xoxb-"), secret=True)
    """``xoxb-…``; empty: no notifications. Prefer ``bot_token_file`` or the environment."""
    bot_token_file: str = setting("", rules.existing_file)
    signing_secret: str = setting("", secret=True)
    signing_secret_file: str = setting("", rules.existing_file)
    app_token: str = setting("", rules.token("xapp-"), secret=True)
    """``xapp-…`` for Socket Mode; empty: the HTTP endpoint only."""
    app_token_file: str = setting("", rules.existing_file)
    channel: str = setting("", rules.optional_slack_id)
    """Channel ID (``C…``) notifications go to."""
    allowed_users: tuple[str, ...] = setting((), rules.slack_ids)
    allowed_channels: tuple[str, ...] = setting((), rules.slack_ids)
    base_url: str = setting("https://slack.com/api/", rules.api_base_url)
    feed_alert_after: timedelta = setting(
        timedelta(hours=6), Seconds(60, 30 * 86400), key="feed_alert_after_seconds"
    )
    timeout: timedelta = setting(
        timedelta(seconds=10), Seconds(0, 3600, whole=False), key="timeout_seconds"
    )

    def secret(self, name: str) -> str:
        """``bot_token``, ``signing_secret`` or ``app_token``: the value, else its file's."""
        value = str(getattr(self, name))
        path = str(getattr(self, f"{name}_file"))
        if value or not path:
            return value
        try:
            return read_secret_file(path)
        except ValueRefusedError as error:
            raise ConfigError(f"slack.{name}_file", str(error)) from None

    @property
    def enabled(self) -> bool:
        return bool(self.channel and (self.bot_token or self.bot_token_file))


@dataclass(frozen=True)
class RecipeSettings:
    flatcar_base_url: str = setting("https://{channel}.release.flatcar-linux.net", rules.http_url)
    """Where Flatcar's build artefacts live; ``{channel}`` is replaced (mirrors work)."""
    nvidia_base_url: str = setting("https://us.download.nvidia.com/tesla", rules.http_url)
    flatcar_key_fingerprint: str = setting(
        "F88CFEDEFF29A5B4D9523864E25D9AED0593B34A", rules.fingerprint
    )
    flatcar_key_url: str = setting(
        "https://www.flatcar.org/security/image-signing-key/Flatcar_Image_Signing_Key.asc",
        rules.http_url,
    )
    check_inputs: bool = setting(True)
    """HEAD the inputs before launching (targets wait instead of failing)."""
    module_types: str = setting("both", rules.one_of("proprietary", "open", "both"))
    """Kernel module flavours the recipe builds (``MODULE_TYPES``): ``proprietary``,
    ``open`` or ``both``. Both by default, so a node can pick either at start
    (``KERNEL_MODULE_TYPE``); one alone keeps a flavour that does not compile for a kernel
    from failing the other's image."""
    bases: bool = setting(True)
    """Build a driver base per (driver, arch, recipe revision, base OS images) with
    ``Dockerfile.base`` and every per-release image FROM it (``DRIVER_BASE``), so a Flatcar
    update pulls only the kernel layer. On by default: the shipped recipe is built so (its
    Dockerfile needs ``DRIVER_BASE``), and false with its ConfigMap is a settings error.
    Off only for a recipe of one's own with a single Dockerfile (docs/recipe.md)."""
    runtime_image: str = setting("", rules.kaniko_rule(kaniko.check_image, optional=True))
    """The base OS image of the driver image (``RUNTIME_IMAGE``), pinned as
    ``image:tag@sha256:…`` in production. Empty: the recipe's default. A change builds
    new bases (it is part of their tag)."""
    builder_image: str = setting("", rules.kaniko_rule(kaniko.check_image, optional=True))
    """The image the recipe compiles in (``BUILDER_IMAGE``). Empty: the recipe's default.
    A change builds new bases, as ``runtime_image`` does."""


@dataclass(frozen=True)
class SigningSettings:
    """Signatures, SBOM and provenance for every image releasebot publishes. Off while no
    key is configured: images are then published unsigned, and the start says so."""

    key_file: str = setting("", rules.existing_file)
    """The private key: cosign's ``cosign.key`` (encrypted PEM) or a PKCS #8 PEM, ECDSA
    P-256, mounted from a Secret. Read with the password and public key files as one set
    before every signature; a new set is taken once it belongs together
    (``signing/keyfiles.py``). Empty: images are not signed."""
    password_file: str = setting("", rules.existing_file)
    """File holding the key's password (cosign's ``cosign.password``); or set
    ``RELEASEBOT_SIGNING_PASSWORD``. An unencrypted PEM needs neither."""
    password: str = setting("", secret=True)
    public_key_file: str = setting("", rules.existing_file)
    """``cosign.pub``: what ``releasebot verify`` and the check before publishing trust.
    Empty: derived from ``key_file``."""

    @property
    def enabled(self) -> bool:
        return bool(self.key_file)


@dataclass(frozen=True)
class BuildSettings:
    """The lifecycle's numbers; their defaults are ``LifecycleRules``'s."""

    max_concurrent_builds: int = setting(
        LifecycleRules.max_concurrent_builds, rules.between(1, 100)
    )
    max_attempts: int = setting(LifecycleRules.max_attempts, rules.between(1, 20))
    retry_base: timedelta = setting(
        LifecycleRules.retry_base, Seconds(1, 86400), key="retry_base_seconds"
    )
    retry_cap: timedelta = setting(
        LifecycleRules.retry_cap, Seconds(1, 7 * 86400), key="retry_cap_seconds"
    )


@dataclass(frozen=True)
class HttpSettings:
    timeout: timedelta = setting(
        timedelta(seconds=30), Seconds(0, 3600, whole=False), key="timeout_seconds"
    )
    retries: int = setting(RetryPolicy.retries, rules.retries)
    user_agent: str = setting("releasebot", rules.printable(200, empty=False))
    ca_bundle: str = setting("")
    """Path to a PEM bundle for feeds behind a TLS-intercepting proxy; empty = system store."""


@dataclass(frozen=True)
class RunSettings:
    """``releasebot run``: the scheduler, leader election and the HTTP endpoints."""

    interval: timedelta = setting(timedelta(minutes=5), Seconds(1, 86400), key="interval_seconds")
    jitter: timedelta = setting(timedelta(seconds=30), Seconds(0, 3600), key="jitter_seconds")
    full_pass: timedelta = setting(
        timedelta(hours=1), Seconds(60, 7 * 86400), key="full_pass_seconds"
    )
    """Seconds between full passes (60 s to a week): a cycle that reads every row, release
    and target again instead of trusting what it kept from the last cycle. Between them a
    cycle reads only what the store's change counters say changed, which misses an edit
    made behind releasebot's back (SQL typed by hand); a full pass sees it. Default one
    hour: such edits are rare and repaired by hand anyway, and a full pass at 10,000
    targets costs about what a cycle cost before cycles kept anything."""
    listen: str = setting("0.0.0.0:8080", rules.listen)
    """``host:port`` of the one HTTP server (probes, metrics, Slack commands)."""
    lease_name: str = setting("releasebot-leader", rules.kaniko_rule(kaniko.check_dns_label))
    lease: timedelta = setting(timedelta(seconds=30), Seconds(2, 600), key="lease_seconds")
    identity: str = setting("", rules.printable(128, empty=True))
    """This replica's name in the Lease; empty: ``$POD_NAME``, else the host name."""
    leader_election: str = setting("kubernetes", rules.one_of("kubernetes", "none"))
    log_format: str = setting("auto", rules.one_of("auto", "json", "text"))


@dataclass(frozen=True)
class WebSettings:
    """The coverage page (``/``) and its read-only JSON API (``/api/...``) of ``releasebot
    run``. No authentication: it shows no secret, but put it behind the ingress's auth."""

    enabled: bool = setting(True)
    listen: str = setting("", rules.listen_or_empty)
    """``host:port`` of its own server; empty: on the probes' server (``run.listen``)."""
    allowed_hosts: tuple[str, ...] = setting((), rules.host_names)
    """Host names a request's ``Host`` may say (an Ingress's), on every HTTP server of
    ``releasebot run`` (page, API, probes, metrics, Slack). Always answered besides:
    ``localhost``, loopback, the listen address, and any IP address when listening on all
    (the kubelet's probes and Prometheus use the pod's IP). Empty by default: port-forward
    and in-cluster access need nothing; any other name is refused (421) against DNS
    rebinding."""


@dataclass(frozen=True)
class FleetSettings:
    """The GPU nodes, read from the cluster every cycle; the optional reboot gate."""

    enabled: bool = setting(False)
    """Build for every Flatcar version a GPU node runs or will reboot into (reads Nodes and
    the GPU Operator's objects: the ClusterRole ``releasebot-node-reader``)."""
    node_selector: str = setting("", rules.label_selector)
    """Nodes to read (``kubectl -l`` syntax); empty: every node."""
    page_size: int = setting(LIST_PAGE_SIZE, rules.between(10, 5000))
    gate: bool = setting(False)
    """Hold FLUO's reboots until the node's next image is verified (patches Nodes: the
    ``reboot-gate`` component)."""
    gate_annotation: str = setting(DEFAULT_GATE_ANNOTATION, rules.annotation_key)
    proof: bool = setting(False)
    """After FLUO reboots a GPU node, set ``proof_annotation`` only once the GPU Operator
    proved the driver on it (FLUO's ``--after-reboot-annotations``; reads pods and their
    logs in ``operator_namespace`` and patches Nodes: the ``after-reboot-proof`` component).
    A node that cannot prove its image halts the rollout there."""
    proof_annotation: str = setting(DEFAULT_PROOF_ANNOTATION, rules.annotation_key)
    proof_soak: timedelta = setting(ProofRules.soak, Seconds(0, 86400), key="proof_soak_seconds")
    """How long everything must hold before a node counts as proven: 2 minutes rides out a
    driver pod that turns Ready and then crashes."""
    proof_deadline: timedelta = setting(
        ProofRules.deadline, Seconds(60, 7 * 86400), key="proof_deadline_seconds"
    )
    """No proof within this long after the reboot is a refusal: 30 minutes is longer than
    the GPU Operator's ~21 minute startup window for the driver pod."""
    gate_requires_proof: bool = setting(False)
    """The before-reboot gate opens for an image only once one node proved it (the first
    node of each image is the canary): needs ``gate`` and ``proof``."""
    operator_namespace: str = setting("gpu-operator", rules.kaniko_rule(kaniko.check_dns_label))
    """Where the GPU Operator runs its driver and validator pods."""

    @property
    def selector(self) -> LabelSelector:
        return LabelSelector.parse(self.node_selector, key="fleet.node_selector")

    @property
    def proof_rules(self) -> ProofRules:
        return ProofRules(soak=self.proof_soak, deadline=self.proof_deadline)


@dataclass(frozen=True)
class RetentionSettings:
    """Deleting the registry tags of Flatcar releases nothing needs any more (opt-in)."""

    enabled: bool = setting(False)
    """Let ``releasebot run`` run retention daily, and ``releasebot retention --apply``
    delete (deletes need the registry's delete permission)."""
    dry_run: bool = setting(True)
    """The daily run only logs what it would delete; set false to delete."""
    after: timedelta = setting(DEFAULT_AFTER, Seconds(1, 3650, per_unit=86400), key="after_days")
    """How long a release must have left every Flatcar feed (and every GPU node) first."""
    max_deletions: int = setting(DEFAULT_MAX_DELETIONS, rules.between(1, 1000))
    """Tags deleted per run at most; the rest wait for the next run."""


@dataclass(frozen=True)
class Settings:
    database: DatabaseSettings = field(default_factory=DatabaseSettings)
    flatcar: FlatcarSettings = field(default_factory=FlatcarSettings)
    nvidia: NvidiaSettings = field(default_factory=NvidiaSettings)
    registry: RegistrySettings = field(default_factory=RegistrySettings)
    http: HttpSettings = field(default_factory=HttpSettings)
    kubernetes: KubernetesSettings = field(default_factory=KubernetesSettings)
    kaniko: KanikoSettings = field(default_factory=KanikoSettings)
    build: BuildSettings = field(default_factory=BuildSettings)
    slack: SlackSettings = field(default_factory=SlackSettings)
    recipe: RecipeSettings = field(default_factory=RecipeSettings)
    run: RunSettings = field(default_factory=RunSettings)
    signing: SigningSettings = field(default_factory=SigningSettings)
    fleet: FleetSettings = field(default_factory=FleetSettings)
    retention: RetentionSettings = field(default_factory=RetentionSettings)
    web: WebSettings = field(default_factory=WebSettings)

    def policy(self) -> Policy:
        return Policy(
            flatcar=FlatcarPolicy(
                channels=self.flatcar.channels,
                arches=frozenset(Arch(arch) for arch in self.flatcar.arches),
                keep=self.flatcar.keep,
            ),
            drivers=DriverPolicy(
                branches=frozenset(self.nvidia.branches),
                branch_types=frozenset(self.nvidia.branch_types),
                keep=self.nvidia.keep,
            ),
            incompatible=tuple(IncompatiblePair.parse(pair) for pair in self.nvidia.incompatible),
        )

    def flatcar_feed_url(self, channel: str) -> str:
        return self.flatcar.feed_url.replace("{channel}", channel)

    def kaniko_options(self) -> KanikoOptions:
        """How every build Job is shaped; ``ConfigError`` naming the key of a rule broken
        rules.between fields (a request above its limit, a sub-path without a git context)."""
        shape, registry = self.kaniko, self.registry
        try:
            return KanikoOptions(
                namespace=self.kubernetes.namespace,
                registry_repository=registry.repository,
                registry_secret=shape.registry_secret,
                context=shape.context or None,
                context_sub_path=shape.context_sub_path or None,
                context_configmap=None if shape.context else shape.context_configmap,
                dockerfile=shape.dockerfile,
                executor_image=shape.executor_image,
                memory_request=shape.memory_request,
                memory_limit=shape.memory_limit,
                ephemeral_storage_request=shape.ephemeral_storage_request,
                ephemeral_storage_limit=shape.ephemeral_storage_limit,
                cpu_request=shape.cpu_request,
                active_deadline=shape.active_deadline,
                ttl_after_finished=shape.ttl_after_finished,
                push_retry=shape.push_retry,
                insecure_registry=registry.insecure,
                skip_tls_verify=not registry.tls_verify,
                registry_ca_configmap=registry.ca_configmap or None,
                user_namespace=shape.user_namespace,
                registry_auth=registry.auth,
                service_account=shape.service_account or None,
            )
        except InvalidOptionError as error:
            raise ConfigError(_KANIKO_KEYS.get(error.field, "kaniko"), error.problem) from None

    def lifecycle_rules(self) -> LifecycleRules:
        build = self.build
        return LifecycleRules(
            max_concurrent_builds=build.max_concurrent_builds,
            max_attempts=build.max_attempts,
            retry_base=build.retry_base,
            retry_cap=build.retry_cap,
        )


SECTIONS: dict[str, type[Any]] = {
    "database": DatabaseSettings,
    "flatcar": FlatcarSettings,
    "nvidia": NvidiaSettings,
    "registry": RegistrySettings,
    "http": HttpSettings,
    "kubernetes": KubernetesSettings,
    "kaniko": KanikoSettings,
    "build": BuildSettings,
    "slack": SlackSettings,
    "recipe": RecipeSettings,
    "run": RunSettings,
    "signing": SigningSettings,
    "fleet": FleetSettings,
    "retention": RetentionSettings,
    "web": WebSettings,
}


def _key(section: type[Any], name: str) -> str:
    """The key a user writes for ``section``'s field ``name``."""
    found = next(f for f in fields(section) if f.name == name)
    return str(found.metadata.get("key") or name)


_KANIKO_KEYS = {
    "namespace": "kubernetes.namespace",
    "registry_repository": "registry.repository",
    "registry_ca_configmap": "registry.ca_configmap",
    "registry_auth": "registry.auth",
    "insecure_registry": "registry.insecure",
    "skip_tls_verify": "registry.tls_verify",
    **{
        f.name: f"kaniko.{_key(KanikoSettings, f.name)}"
        for f in fields(KanikoSettings)
        if f.name in {o.name for o in fields(KanikoOptions)}
    },
}
"""The setting behind each ``KanikoOptions`` field, to name it in an error."""
