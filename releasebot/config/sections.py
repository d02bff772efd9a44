"""The settings tree: one frozen dataclass per section, each field with its rule beside it.

``setting(default, rule, key=...)`` declares a field: its default (written once: here, or
taken from the options that own it, ``KanikoOptions``, ``LifecycleRules``, the retry
policy), the rule its value follows (``config.rules``), and the key users write when that
is not the field's name: durations are ``timedelta`` fields read from their documented
``*_seconds`` keys. The string under every field (its docstring) says what it means, its
unit and why its default is what it is, and each section's class docstring what the
section is for; ``config.example`` writes them out as ``config/releasebot.example.toml``,
so they are the one place to say it (a test fails on a field without one). Deliberately
not here: reading the file and the environment (``config.load``).
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
from releasebot.domain.fleet.nodes import (
    DEFAULT_GATE_ANNOTATION,
    DEFAULT_PROOF_ANNOTATION,
    LIST_PAGE_SIZE,
)
from releasebot.domain.fleet.proof import ProofRules
from releasebot.domain.fleet.retention import DEFAULT_AFTER, DEFAULT_MAX_DELETIONS
from releasebot.domain.fleet.selectors import LabelSelector
from releasebot.domain.shared.errors import ConfigError, InvalidOptionError
from releasebot.domain.shared.versions import Arch
from releasebot.domain.targets.lifecycle import LifecycleRules
from releasebot.domain.targets.policy import DriverPolicy, FlatcarPolicy, IncompatiblePair, Policy
from releasebot.edge.parse import ValueRefusedError, read_secret_file
from releasebot.edge.retry import RetryPolicy
from releasebot.registry import DEFAULT_TIMEOUT as REGISTRY_TIMEOUT

# -- the sections ------------------------------------------------------------------------------


@dataclass(frozen=True)
class DatabaseSettings:
    """The state store: every release, target and build releasebot remembers."""

    url: str = setting("sqlite:///releasebot.db", rules.database_url)
    """SQLAlchemy URL of the state store: ``sqlite:///relative.db``, ``sqlite:////abs.db`` or
    ``postgresql+psycopg://user:pass@host/db`` (``postgresql://`` is read as psycopg 3 too).
    Default: an SQLite file in the working directory (WAL mode): zero set-up for one replica.
    Use PostgreSQL (psycopg 3) when several replicas or a CronJob share the state:
      url = "postgresql+psycopg://releasebot:PASSWORD@postgres:5432/releasebot"
    Prefer passing the password through the environment (``RELEASEBOT_DATABASE_URL`` from a
    Secret) rather than this file."""

    def __repr__(self) -> str:  # the URL may hold a password
        return f"DatabaseSettings(url={redact_url(self.url)!r})"

    def __str__(self) -> str:
        return repr(self)


@dataclass(frozen=True)
class FlatcarSettings:
    """The Flatcar Container Linux releases that must have images: channels, arches, how many."""

    feed_url: str = setting(
        "https://www.flatcar.org/releases-json/releases-{channel}.json", rules.feed_url
    )
    """Where the channel feeds live; ``{channel}`` is replaced by each channel name (it must be
    there when several channels are followed). ``http(s)://`` or ``file://`` (air-gapped sites
    mirror the JSON files). Redirects are followed. Default: Flatcar's own feeds."""
    channels: tuple[str, ...] = setting(("stable", "lts"), rules.channels)
    """Channels to follow: ``stable``, ``beta``, ``alpha``, ``lts`` (all LTS streams) or one
    stream ``lts-YYYY``. Default stable + lts: what production fleets run."""
    arches: tuple[str, ...] = setting(("amd64",), rules.arches)
    """CPU architectures to build (``amd64``, ``arm64``). Default amd64: most GPU nodes; add
    arm64 for Grace-class nodes. A release or driver that does not list an arch is not built
    for it."""
    keep: int = setting(2, rules.keep)
    """Number of newest releases of EACH channel that must have images (a count, 1-100).
    Default 2: the current release plus the one nodes still run during a rolling update."""


@dataclass(frozen=True)
class NvidiaSettings:
    """The NVIDIA datacenter drivers to build: branches, how many, and pairs known to fail."""

    feed_url: str = setting(
        "https://docs.nvidia.com/datacenter/tesla/drivers/releases.json", rules.feed_url
    )
    """NVIDIA's machine-readable datacenter driver list; ``http(s)://`` or ``file://`` (a
    mirror). Default: NVIDIA's own."""
    branches: tuple[str, ...] = setting(("580",), rules.branches)
    """Driver branches to build, by number. Default 580: the current long-term support branch.
    Empty only with ``branch_types`` set: something must be selected."""
    branch_types: tuple[str, ...] = setting((), rules.branch_types)
    """And/or every branch of these types (case-insensitive): ``"production branch"``,
    ``"lts branch"``, ``"new feature branch"``. Default none: new branches are opted into by
    hand."""
    keep: int = setting(1, rules.keep)
    """Number of newest driver versions of EACH selected branch (a count, 1-100).
    Default 1: the newest driver of a branch supersedes the older ones."""
    incompatible: tuple[str, ...] = setting((), rules.incompatible_pairs)
    """Known-bad pairs, ``"DRIVER:KERNEL"`` with shell patterns matched against the driver
    version and the release's kernel: never planned (``plan`` shows each one skipped and why),
    e.g. ``["535.*:6.12.97*", "550.*:6.12.97*", "570.*:6.12.97*"]`` (kernel 6.12.97 broke
    those compiles). Default none: a pair whose compile fails is found by its build, recorded
    as ``incompatible``, told once and not retried."""


REGISTRY_AUTHS = ("dockerconfig", "ecr", "gcp", "azure")
"""The values of ``registry.auth``."""


@dataclass(frozen=True)
class RegistrySettings:
    """The registry releasebot pushes the images to and the GPU Operator pulls them from, and
    how releasebot logs in to it."""

    repository: str = setting(
        "registry.example.com/nvidia/driver", rules.kaniko_rule(kaniko.check_repository)
    )
    """The image repository the GPU Operator pulls from (``host[:port]/path``, no tag). Its
    driver spec must name the same repository. The default is a placeholder: set yours."""
    insecure: bool = setting(False)
    """Plain HTTP instead of HTTPS. Default false: true only for a registry on a private
    network without TLS."""
    ca_file: str = setting("")
    """PEM CA bundle for a registry with a private CA; empty: the system's CA store."""
    ca_configmap: str = setting("", rules.kaniko_rule(kaniko.check_name, optional=True))
    """The same CA for the build Jobs: a ConfigMap in the build namespace with key ``ca.crt``,
    mounted into the Jobs and handed to Kaniko with ``--registry-certificate``. Empty: Kaniko
    uses its own CA store."""
    tls_verify: bool = setting(True)
    """Check the registry's TLS certificate. Default true; false is for tests, never
    production."""
    docker_config: str = setting("")
    """Path to a Docker ``config.json`` with the registry's credentials: the same
    ``kubernetes.io/dockerconfigjson`` Secret the Kaniko Jobs mount, mounted into releasebot
    too. Empty: anonymous, or ``username`` and ``password``."""
    username: str = setting("")
    """Basic-auth user name, with ``password``, instead of ``docker_config``. Empty: none."""
    password: str = setting("", secret=True)
    """Basic-auth password; needs ``username``. Give it through the environment
    (``RELEASEBOT_REGISTRY_PASSWORD`` from a Secret), never in this file."""
    timeout: timedelta = setting(
        REGISTRY_TIMEOUT, Seconds(0, 3600, whole=False), key="timeout_seconds"
    )
    """Timeout of one registry request, in seconds (above 0, at most 3600). Default 30 s:
    short blips are absorbed, outages wait for the next cycle."""
    retries: int = setting(RetryPolicy.retries, rules.retries)
    """Extra attempts after a timeout, 429 or 5xx (0-10). Default 2: short blips are
    absorbed, outages wait for the next cycle."""
    auth: str = setting("dockerconfig", rules.one_of(*REGISTRY_AUTHS))
    """Where the registry password comes from. ``dockerconfig`` (the default, as before any
    cloud support): the lasting password of ``docker_config`` or ``username``/``password``.
    ``ecr``, ``gcp``, ``azure``: a short-lived token from the pod's workload identity
    (IRSA / EKS Pod Identity, GKE Workload Identity, Azure Workload Identity), renewed
    5 minutes before it expires and once more when the registry refuses it; ``username``,
    ``password`` and ``docker_config`` stay empty then. The build Jobs get the same. Needs
    ``releasebot[aws]``, ``[gcp]`` or ``[azure]`` (the image has all three).
    docs/operations.md says what to create in each cloud, one section per cloud."""
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
    """The cluster the build Jobs run in."""

    namespace: str = setting("releasebot", rules.kaniko_rule(kaniko.check_dns_label))
    """Namespace where the build Jobs run (and where the registry Secret and the recipe live).
    Default ``releasebot``: the namespace the manifests in config/ install into (they set
    ``RELEASEBOT_KUBERNETES_NAMESPACE`` to the Pod's own)."""
    kubeconfig: str = setting("")
    """Path to a kubeconfig. Empty: ``$KUBECONFIG`` when set, else the in-cluster service
    account (the setting wins over the environment: ``config/pod.py``)."""


@dataclass(frozen=True)
class KanikoSettings:
    """The build Jobs' shape; the defaults (and rules) are ``KanikoOptions``'s.

    The resources of one build are Kubernetes quantities. Compiling the modules and
    snapshotting layers peaks around 3 GiB of memory; the Flatcar tarball, the runfile and
    their unpacked trees need scratch disk. Too little ends in OOMKilled or eviction, which
    releasebot retries but cannot fix. A request may not exceed its limit. No CPU limit on
    purpose: throttling only slows builds down."""

    executor_image: str = setting(DEFAULT_EXECUTOR_IMAGE, rules.kaniko_rule(kaniko.check_image))
    """The Kaniko executor image. GoogleContainerTools/kaniko is archived; the default is a
    maintained fork. Pin it by digest in production:
    ``"ghcr.io/osscontainertools/kaniko:v1.28.0@sha256:…"``."""
    registry_secret: str = setting("releasebot-registry", rules.kaniko_rule(kaniko.check_name))
    """The ``kubernetes.io/dockerconfigjson`` Secret mounted at ``/kaniko/.docker`` for
    pushing. Default ``releasebot-registry``: the name config/secrets gives it."""
    service_account: str = setting("", rules.kaniko_rule(kaniko.check_name, optional=True))
    """The build Pods' service account; empty: the namespace's ``default``. With
    ``registry.auth = "ecr"`` or ``"gcp"`` name the one bound to the cloud identity that may
    push (Kaniko's credential helper logs in with it); its API token is still not mounted.
    Unused by ``dockerconfig`` and ``azure``."""
    context: str = setting("", rules.git_context)
    """Build context: a git context ``git://host/repo.git#refs/heads/main#<commit>`` (pin the
    commit). Empty (default): the ConfigMap ``context_configmap`` mounted into the Job as
    ``dir://``."""
    context_configmap: str = setting(
        CONFIGMAP_NAME, rules.kaniko_rule(kaniko.check_name, optional=True)
    )
    """ConfigMap holding the recipe (Dockerfile and scripts) when ``context`` is empty.
    Default ``releasebot-recipe``: the one ``releasebot recipe configmap`` prints."""
    context_sub_path: str = setting("", rules.sub_path)
    """Sub-directory of the context that holds the Dockerfile; relative. Empty: the
    context's top."""
    dockerfile: str = setting(KanikoOptions.dockerfile, rules.sub_path)
    """Dockerfile path inside the context; relative. Default: the shipped recipe's."""
    memory_request: str = setting(
        KanikoOptions.memory_request, rules.kaniko_rule(kaniko.check_quantity)
    )
    """Memory one build requests. Default 4Gi: above the ~3 GiB peak."""
    memory_limit: str = setting(
        KanikoOptions.memory_limit, rules.kaniko_rule(kaniko.check_quantity)
    )
    """Memory one build may use; above it the build is OOMKilled. Default 8Gi: room above
    the peak for a larger driver."""
    ephemeral_storage_request: str = setting(
        KanikoOptions.ephemeral_storage_request, rules.kaniko_rule(kaniko.check_quantity)
    )
    """Scratch disk one build requests: the Flatcar tarball, the runfile and their unpacked
    trees. Default 10Gi."""
    ephemeral_storage_limit: str = setting(
        KanikoOptions.ephemeral_storage_limit, rules.kaniko_rule(kaniko.check_quantity)
    )
    """Scratch disk one build may use; above it the build's Pod is evicted. Default 20Gi,
    twice the request."""
    cpu_request: str = setting(KanikoOptions.cpu_request, rules.kaniko_rule(kaniko.check_quantity))
    """CPU one build requests. Default 1; no limit (throttling only slows builds down)."""
    active_deadline: timedelta = setting(
        KanikoOptions.active_deadline, Seconds(60, 86400), key="active_deadline_seconds"
    )
    """A build that runs longer than this (seconds, 60-86400) is stopped. Default 1 h: a hung
    build does not hold one of ``build.max_concurrent_builds`` for long."""
    ttl_after_finished: timedelta = setting(
        KanikoOptions.ttl_after_finished, Seconds(0, 30 * 86400), key="ttl_seconds_after_finished"
    )
    """Finished Jobs are deleted after this many seconds (0-2592000). Default 1 day: time to
    read the logs of a failure."""
    push_retry: int = setting(KanikoOptions.push_retry, rules.kaniko_rule(kaniko.check_push_retry))
    """Kaniko's own push retries (0-10). Default 3: registries drop pushes now and then."""
    user_namespace: bool = setting(KanikoOptions.user_namespace)
    """Run builds in a user namespace (``hostUsers: false``): UID 0 in the build is an
    unprivileged UID on the node. Needs Kubernetes >= 1.33 nodes with idmapped mounts; off by
    default because other nodes cannot start such Pods."""


@dataclass(frozen=True)
class SlackSettings:
    """Notifications and the ``/releasebot`` command. Everything is off while ``channel`` or
    the bot token is empty. Secrets: give each one either directly through the environment
    (``RELEASEBOT_SLACK_BOT_TOKEN``, ``RELEASEBOT_SLACK_SIGNING_SECRET``,
    ``RELEASEBOT_SLACK_APP_TOKEN`` from a Secret) or as a ``*_file`` path to a mounted
    Secret. Never put them in this file."""

    bot_token: str = setting("", rules.token("xoxb-"), secret=True)
    """``xoxb-…``; empty: no notifications. Prefer ``bot_token_file`` or the environment."""
    bot_token_file: str = setting("", rules.existing_file)
    """File holding the bot token (a mounted Secret), read when ``bot_token`` is empty."""
    signing_secret: str = setting("", secret=True)
    """Verifies every slash-command request (HMAC of the raw body, 5-minute replay window).
    Empty, with no app token either: no ``/releasebot`` command."""
    signing_secret_file: str = setting("", rules.existing_file)
    """File holding the signing secret, read when ``signing_secret`` is empty."""
    app_token: str = setting("", rules.token("xapp-"), secret=True)
    """``xapp-…`` app-level token: enables Socket Mode (no ingress needed; only the leader
    connects). Empty: the HTTP endpoint only."""
    app_token_file: str = setting("", rules.existing_file)
    """File holding the app-level token, read when ``app_token`` is empty."""
    channel: str = setting("", rules.optional_slack_id)
    """Channel ID (``C…``) that receives build messages; one message per build, edited in
    place."""
    allowed_users: tuple[str, ...] = setting((), rules.slack_ids)
    """Slack user IDs (``U…``) allowed to run commands that change anything (build, retry,
    pause, resume). Everyone may run status, plan, missing and help. Default none: nobody
    changes anything from Slack until named here or in ``allowed_channels``."""
    allowed_channels: tuple[str, ...] = setting((), rules.slack_ids)
    """Slack channel IDs (``C…``) in which everyone may run those commands. Default none."""
    base_url: str = setting("https://slack.com/api/", rules.api_base_url)
    """Web API base URL (slack-sdk's ``base_url``): for a proxy. Must end with ``/``."""
    feed_alert_after: timedelta = setting(
        timedelta(hours=6), Seconds(60, 30 * 86400), key="feed_alert_after_seconds"
    )
    """Tell the channel when a feed has failed for this long (seconds, 60-2592000). Default
    6 h: feeds lag and blip; half a day without Flatcar news deserves a look."""
    timeout: timedelta = setting(
        timedelta(seconds=10), Seconds(0, 3600, whole=False), key="timeout_seconds"
    )
    """Timeout of one Web API call, in seconds (above 0, at most 3600). Default 10: Slack
    answers within a second or two, and a message whose call timed out is sent again from
    the outbox later, never lost."""

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
    """The driver image recipe's inputs. The recipe downloads them at build time from these
    servers; releasebot checks they are published before launching a build (a target waits
    until they are)."""

    flatcar_base_url: str = setting("https://{channel}.release.flatcar-linux.net", rules.http_url)
    """Where Flatcar's build artefacts live; ``{channel}`` is replaced by the release's
    channel. Point it at a mirror if you have one."""
    nvidia_base_url: str = setting("https://us.download.nvidia.com/tesla", rules.http_url)
    """Where NVIDIA's driver runfiles live. Default: NVIDIA's download server; point it at a
    mirror if you have one."""
    flatcar_key_fingerprint: str = setting(
        "F88CFEDEFF29A5B4D9523864E25D9AED0593B34A", rules.fingerprint
    )
    """The Flatcar image signing key's PRIMARY fingerprint (signing subkeys rotate). Every
    downloaded artefact is checked against it. Default: Flatcar's key."""
    flatcar_key_url: str = setting(
        "https://www.flatcar.org/security/image-signing-key/Flatcar_Image_Signing_Key.asc",
        rules.http_url,
    )
    """Where the recipe fetches the Flatcar image signing key. Default: Flatcar's site."""
    check_inputs: bool = setting(True)
    """HEAD the inputs before launching a build (targets wait instead of failing). Default
    true: a build started before its inputs exist only fails; turn it off for a recipe that
    fetches from elsewhere."""
    module_types: str = setting("both", rules.one_of("proprietary", "open", "both"))
    """Kernel module flavours each image holds (``MODULE_TYPES``): ``proprietary``,
    ``open`` or ``both``. Both by default, so a node can pick either at start
    (``KERNEL_MODULE_TYPE``), and either flavour failing to compile fails the image whole;
    one alone keeps a flavour that does not compile for a kernel from failing the other's
    image."""
    bases: bool = setting(True)
    """Build a driver base, the part of the image that does not depend on the kernel, once
    per (driver, arch, recipe revision, base OS images) with ``Dockerfile.base`` (tag
    ``<driver>-base-<arch>-r<rev>-<os>``) and every ``<driver>-flatcar<version>`` image FROM
    it (``DRIVER_BASE=<repository>@<digest>``), so a Flatcar update pulls only the kernel
    layer. On by default: the shipped recipe is built so (its Dockerfile needs
    ``DRIVER_BASE``), and false with its ConfigMap is a settings error. Off only for a
    recipe of one's own with a single Dockerfile (docs/recipe.md)."""
    runtime_image: str = setting("", rules.kaniko_rule(kaniko.check_image, optional=True))
    """The base OS image of the driver image (``RUNTIME_IMAGE``), pinned as
    ``image:tag@sha256:…`` in production. Empty: the recipe's default. A change builds
    new bases (it is part of their tag), once per driver and arch."""
    builder_image: str = setting("", rules.kaniko_rule(kaniko.check_image, optional=True))
    """The image the recipe compiles in (``BUILDER_IMAGE``), pinned as ``runtime_image`` is.
    Empty: the recipe's default. A change builds new bases, as ``runtime_image`` does."""


@dataclass(frozen=True)
class SigningSettings:
    """Signatures, SBOM and provenance for every image releasebot publishes: cosign's format
    (the ``sha256-<digest>.sig`` tag, plus an OCI 1.1 referrer where the registry has the
    referrers API), a CycloneDX SBOM and an in-toto/SLSA v1 provenance statement. Off while
    no key is configured: images are then published unsigned, and releasebot says so once at
    start. With a key, a target is only called published (and Slack only told) after the
    signatures, SBOM and provenance were read back from the registry and verified against
    the public key."""

    key_file: str = setting("", rules.existing_file)
    """The private key: cosign's ``cosign.key`` (ENCRYPTED SIGSTORE/COSIGN PRIVATE KEY, from
    any cosign) or a PKCS #8 PEM, ECDSA P-256, mounted from the Secret
    ``releasebot-signing`` (config/components/signing). Read with the password and public
    key files as one set before every signature: a rotated Secret is taken once all three
    belong together, the old pair signing meanwhile (``signing/keyfiles.py``). Empty
    (default): images are not signed."""
    password_file: str = setting("", rules.existing_file)
    """File holding the key's password (``cosign.password`` in a Secret made by
    ``cosign generate-key-pair k8s://…``); or set ``RELEASEBOT_SIGNING_PASSWORD``. An
    unencrypted PEM needs neither. Never in this file."""
    password: str = setting("", secret=True)
    """The key's password itself: give it as ``RELEASEBOT_SIGNING_PASSWORD`` (from a Secret)
    or use ``password_file``, never this file."""
    public_key_file: str = setting("", rules.existing_file)
    """``cosign.pub``: what ``releasebot verify TAG`` and the check before publishing trust.
    Empty (default): derived from ``key_file``. Set it for ``releasebot verify`` on a
    workstation."""

    @property
    def enabled(self) -> bool:
        return bool(self.key_file)


@dataclass(frozen=True)
class BuildSettings:
    """The lifecycle's numbers; their defaults are ``LifecycleRules``'s."""

    max_concurrent_builds: int = setting(
        LifecycleRules.max_concurrent_builds, rules.between(1, 100)
    )
    """Build Jobs at once across all targets (1-100); each arch is one Job. Default 2: builds
    are heavy (see ``[kaniko]``) and new Flatcar releases come a few at a time."""
    max_attempts: int = setting(LifecycleRules.max_attempts, rules.between(1, 20))
    """Attempts per target before a transient failure (OOMKilled, evicted, deadline, lost
    Job) is given up and handed to a human (1-20). Default 3. A person's build or retry
    starts a full budget again."""
    retry_base: timedelta = setting(
        LifecycleRules.retry_base, Seconds(1, 86400), key="retry_base_seconds"
    )
    """Backoff before the next attempt, in seconds (1-86400): ``retry_base * 2^(attempt-1)``,
    capped by ``retry_cap_seconds``. Default 300 s: a blip is retried soon."""
    retry_cap: timedelta = setting(
        LifecycleRules.retry_cap, Seconds(1, 7 * 86400), key="retry_cap_seconds"
    )
    """The longest backoff, in seconds (1-604800, not less than ``retry_base_seconds``).
    Default 6 h: a real outage does not spin."""


@dataclass(frozen=True)
class HttpSettings:
    """The HTTP client that reads the Flatcar and NVIDIA feeds."""

    timeout: timedelta = setting(
        timedelta(seconds=30), Seconds(0, 3600, whole=False), key="timeout_seconds"
    )
    """Timeout of one HTTP request to a feed, in seconds (above 0, at most 3600). Default 30:
    the feeds are up to ~1 MB and answer in well under a second; 30 s rides out a slow proxy
    without stalling a cycle."""
    retries: int = setting(RetryPolicy.retries, rules.retries)
    """Extra attempts after a failed request (timeout, 5xx, 429), 0-10, with a capped
    backoff. Default 2: a blip is retried at once; a real outage is left to the next
    cycle."""
    user_agent: str = setting("releasebot", rules.printable(200, empty=False))
    """User-Agent sent to the feeds (printable, up to 200 characters)."""
    ca_bundle: str = setting("")
    """Path to a PEM bundle for feeds behind a TLS-intercepting proxy; empty: the system's CA
    store."""


@dataclass(frozen=True)
class RunSettings:
    """``releasebot run``, the long-running mode (a Deployment): the scheduler, leader
    election and the HTTP endpoints. ``reconcile --once`` ignores this."""

    interval: timedelta = setting(timedelta(minutes=5), Seconds(1, 86400), key="interval_seconds")
    """Seconds between reconcile cycles (1-86400). Default 300: Flatcar and NVIDIA publish a
    few times a month, a 5-minute delay is invisible, and an unchanged cycle costs a few
    conditional requests; builds take far longer than that anyway."""
    jitter: timedelta = setting(timedelta(seconds=30), Seconds(0, 3600), key="jitter_seconds")
    """Up to this many seconds (0-3600, at most half of ``interval_seconds``) are added at
    random to each cycle's start. Default 30: several installations never poll the upstreams
    in lockstep."""
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
    """``host:port`` of the one HTTP server: ``/healthz``, ``/readyz``, ``/metrics`` and
    ``POST /slack/commands`` (and the page, see ``[web]``). Default all interfaces on 8080:
    the Service and the kubelet's probes reach it."""
    lease_name: str = setting("releasebot-leader", rules.kaniko_rule(kaniko.check_dns_label))
    """Name of the ``coordination.k8s.io/v1`` Lease that elects the one replica running
    cycles, in the Pod's own namespace (``$POD_NAMESPACE`` from the Downward API; else
    ``kubernetes.namespace``). Only replicas sharing a name compete with each other."""
    lease: timedelta = setting(timedelta(seconds=30), Seconds(2, 600), key="lease_seconds")
    """Lease duration in seconds (2-600): a leader that dies is replaced within about this
    long; the leader renews every third of it. Default 30: a minute of missed cycles at
    worst, and an API server blip of up to 20 s does not cost leadership."""
    identity: str = setting("", rules.printable(128, empty=True))
    """This replica's name in the Lease; empty: ``$POD_NAME`` (set it from the Downward
    API), else the host name, which is the Pod's name in Kubernetes too."""
    leader_election: str = setting("kubernetes", rules.one_of("kubernetes", "none"))
    """``kubernetes``: replicas elect a leader through the Lease (needs get/create/update on
    leases). ``none``: this process always leads; only for a single replica outside a
    cluster. The database guard still keeps two cycles from ever writing at once."""
    log_format: str = setting("auto", rules.one_of("auto", "json", "text"))
    """Log lines: ``json`` (one object per line, for log collectors), ``text``, or ``auto``
    (default): JSON unless stderr is a terminal. ``--log-format`` overrides it."""


@dataclass(frozen=True)
class WebSettings:
    """The coverage page at ``/`` (the driver x Flatcar matrix, each GPU node's coverage, feed
    health) and its JSON API at ``/api/...`` (schema: ``/api/openapi.json``), read-only,
    served by ``releasebot run``. It shows no secret, token or credential, but has no
    authentication of its own: it is cluster-internal; expose it only behind your ingress's
    auth."""

    enabled: bool = setting(True)
    """Serve the page and its API. Default true: it costs nothing until somebody opens it."""
    listen: str = setting("", rules.listen_or_empty)
    """``host:port`` of its own server. Empty (default): the same server and port as
    ``run.listen``, so the existing Service reaches it; set it to keep the page off the
    probes' port."""
    allowed_hosts: tuple[str, ...] = setting((), rules.host_names)
    """Host names a request's ``Host`` header may say, on every HTTP server of
    ``releasebot run`` (page, API, metrics, probes, ``/slack/commands``): the names of the
    Ingress that routes to releasebot (e.g. ``["releasebot.acme.example"]``), no scheme,
    port or wildcard. Always answered besides: ``localhost``, loopback addresses, the
    listen address, and any IP address when listening on all (``0.0.0.0`` or ``::``, so
    the kubelet's probes and Prometheus, which send the pod's IP, keep working). Any other
    name gets 421 Misdirected Request: a web page re-pointing its own name at a port-forward
    (DNS rebinding) reads nothing. Default empty: port-forward and in-cluster access need
    nothing."""


@dataclass(frozen=True)
class FleetSettings:
    """The GPU nodes, read from the cluster every cycle; the optional reboot gate and
    after-reboot proof."""

    enabled: bool = setting(False)
    """Read the cluster's Nodes (and the GPU Operator's ClusterPolicy and NVIDIADriver
    objects) every cycle and build an image for every Flatcar version a GPU node runs or will
    reboot into (FLUO's new-version), whatever ``[flatcar]`` selects. Needs get/list on nodes
    and list on the two nvidia.com kinds (the ClusterRole ``releasebot-node-reader`` in
    config/base). Default false: a workstation running ``releasebot plan`` has no cluster;
    the manifests turn it on (config/base/releasebot.toml)."""
    node_selector: str = setting("", rules.label_selector)
    """Which Nodes to read, as ``kubectl -l`` writes a selector. Empty (default): every node;
    releasebot tells GPU nodes by their labels. With the reboot gate on, keep every node FLUO
    reboots in here: a node releasebot never sees never gets its annotation."""
    page_size: int = setting(LIST_PAGE_SIZE, rules.between(10, 5000))
    """Nodes per list request (10-5000). Default 500, kubectl's chunk: 5,000 nodes in 10
    calls."""
    gate: bool = setting(False)
    """The reboot gate: for nodes FLUO labels ``before-reboot=true``, set ``gate_annotation``
    to ``"true"`` only once the images for the version the node reboots into are verified
    (and remove it when that version changes). Start FLUO with
    ``--before-reboot-annotations=<gate_annotation>``. Default false: it patches Nodes,
    which needs the component config/components/reboot-gate."""
    gate_annotation: str = setting(DEFAULT_GATE_ANNOTATION, rules.annotation_key)
    """The Node annotation the reboot gate sets, the one FLUO waits for before a reboot."""
    proof: bool = setting(False)
    """The after-reboot proof: for nodes FLUO labels ``after-reboot=true``, set
    ``proof_annotation`` to ``"true"`` only once the GPU Operator proved the driver on the
    node (the verified image runs, driver and validator pods Ready, the GPUs it had) for
    ``proof_soak_seconds``; a crash loop, upgrade-failed or no proof within
    ``proof_deadline_seconds`` refuses the image and halts the rollout at that node. Start
    FLUO with ``--after-reboot-annotations=<proof_annotation>``. Default false: it reads
    pods and logs in ``operator_namespace`` and patches Nodes, which needs the component
    config/components/after-reboot-proof."""
    proof_annotation: str = setting(DEFAULT_PROOF_ANNOTATION, rules.annotation_key)
    """The Node annotation the after-reboot proof sets, the one FLUO waits for after a
    reboot; it must differ from ``gate_annotation``."""
    proof_soak: timedelta = setting(ProofRules.soak, Seconds(0, 86400), key="proof_soak_seconds")
    """How long everything must hold before a node counts as proven, in seconds (0-86400):
    2 minutes rides out a driver pod that turns Ready and then crashes."""
    proof_deadline: timedelta = setting(
        ProofRules.deadline, Seconds(60, 7 * 86400), key="proof_deadline_seconds"
    )
    """No proof within this long after the reboot is a refusal, in seconds (60-604800):
    30 minutes is longer than the GPU Operator's ~21 minute startup window for the driver
    pod."""
    gate_requires_proof: bool = setting(False)
    """The before-reboot gate opens for an image only once one node proved it (the first
    node of each image, the canary, is let through alone): needs ``gate`` and ``proof``."""
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
    """Deleting the registry tags of Flatcar releases nothing needs any more (opt-in): no GPU
    node runs or will reboot into the release (nor ran it within ``after_days``), every
    Flatcar feed stopped listing it more than ``after_days`` ago, and no current target is
    the tag. Only tags of releasebot's shape (``<driver>-flatcar<version>``, and their
    per-arch tags) in ``registry.repository``, with their signatures and attestations. Never
    while the fleet view is unsure (``fleet.enabled`` false, Nodes unreadable, a GPU node
    without a readable version). Try ``releasebot retention`` (a dry run) first."""

    enabled: bool = setting(False)
    """Let ``releasebot run`` run retention daily, and ``releasebot retention --apply``
    delete (deletes need the registry's delete permission). Default false: nothing is ever
    deleted."""
    dry_run: bool = setting(True)
    """The daily run in ``releasebot run`` only logs what it would delete. Default true; set
    false once ``releasebot retention`` shows what you expect.
    (``releasebot retention --apply`` deletes whenever ``enabled`` is true.)"""
    after: timedelta = setting(DEFAULT_AFTER, Seconds(1, 3650, per_unit=86400), key="after_days")
    """Days a release must have been out of every Flatcar feed (and off every GPU node)
    first (1-3650). Default 30: a month to notice a node pool that still needs it."""
    max_deletions: int = setting(DEFAULT_MAX_DELETIONS, rules.between(1, 1000))
    """Tags deleted per run at most (1-1000); the rest wait for the next run, the next day.
    Default 50: a mistake costs a bounded number of tags a day."""


@dataclass(frozen=True)
class Settings:
    """releasebot settings. Every key is optional; the values below are the defaults.

    Any key can be overridden from the environment as RELEASEBOT_<SECTION>_<KEY>, e.g.
      RELEASEBOT_DATABASE_URL=postgresql+psycopg://releasebot@db/releasebot
      RELEASEBOT_FLATCAR_CHANNELS=stable,lts-2024      (lists are comma-separated)
    The environment wins over the file. The file itself is chosen with --config PATH or
    RELEASEBOT_CONFIG=PATH. An unknown section or key is an error, so a typo never silently
    falls back to a default."""

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
