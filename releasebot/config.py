"""The settings tree: one TOML file plus ``RELEASEBOT_<SECTION>_<KEY>`` environment overrides.

Loaded once at start-up by the CLI and handed, piece by piece, to ``wiring``; adapters and
use cases never see it (an import-linter contract says so). Every problem is a
``ConfigError`` naming the key (or the environment variable that set it), so a bad setting
costs one line, not a traceback.

Each field says everything about its setting where it is declared: its default, its rule
(``check``) and, where the key a user writes is not the field's name, that key. Durations
are ``timedelta`` fields read from the documented ``*_seconds`` keys (``run.interval`` is
``interval_seconds`` in the file). A default is written once: here, or where an adapter's
or the lifecycle's own options hold it (``KanikoOptions``, ``LifecycleRules``, the retry
policy), and then taken from there. The rules of the Kaniko options are the builder's own
(``builders.kaniko``), and the options are built once at load, so their cross-field rules
(a request above its limit) are reported here too.

Environment values are strings: lists are comma-separated (``RELEASEBOT_FLATCAR_CHANNELS=
stable,lts``), numbers are decimal. The environment wins over the file.

Defaults, their units and why they are what they are: ``config/releasebot.example.toml``.
"""

from __future__ import annotations

import math
import os
import re
import ssl
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from datetime import timedelta
from pathlib import Path
from typing import Any, TypeVar, cast
from urllib.parse import urlsplit

from releasebot.builders import kaniko
from releasebot.builders.kaniko import DEFAULT_EXECUTOR_IMAGE, KanikoOptions
from releasebot.builders.recipe import CONFIGMAP_NAME
from releasebot.domain.errors import ConfigError, InvalidOptionError
from releasebot.domain.lifecycle import LifecycleRules
from releasebot.domain.policy import DriverPolicy, FlatcarPolicy, Policy, is_flatcar_channel
from releasebot.domain.versions import Arch, is_driver_branch
from releasebot.edge.retry import MAX_RETRIES, RetryPolicy
from releasebot.registry import DEFAULT_TIMEOUT as REGISTRY_TIMEOUT

T = TypeVar("T")
Check = Callable[[str, Any], Any]
"""A rule: ``check(key, value)`` returns the value (perhaps normalised) or raises
``ConfigError(key, problem)``."""

ENV_PREFIX = "RELEASEBOT_"
CONFIG_ENV = "RELEASEBOT_CONFIG"
NVIDIA_BRANCH_TYPES = ("production branch", "lts branch", "new feature branch")


def setting(
    default: T, check: Check | None = None, *, key: str | None = None, secret: bool = False
) -> T:
    """A settings field: its ``default``, the rule its value follows, the ``key`` it is read
    from when that is not the field's name, and whether it is a secret (kept out of repr)."""
    return field(default=default, repr=not secret, metadata={"check": check, "key": key})


@dataclass(frozen=True)
class Seconds:
    """The rule of a duration given in seconds: whole seconds from ``low`` to ``high``, or
    (``whole=False``) any number of seconds above 0 up to ``high``."""

    low: int
    high: int
    whole: bool = True

    @property
    def unit(self) -> type:
        return int if self.whole else float

    def __call__(self, key: str, seconds: float) -> timedelta:
        if not self.whole:
            if not math.isfinite(seconds) or not 0 < seconds <= self.high:
                raise ConfigError(
                    key, f"must be a number of seconds between 0 and {self.high}, got {seconds}"
                )
        elif not self.low <= seconds <= self.high:
            raise ConfigError(key, f"must be between {self.low} and {self.high}, got {seconds}")
        return timedelta(seconds=seconds)


# -- the rules ---------------------------------------------------------------------------------


def _between(low: int, high: int) -> Check:
    def check(key: str, value: int) -> int:
        if not low <= value <= high:
            raise ConfigError(key, f"must be between {low} and {high}, got {value}")
        return value

    return check


_keep = _between(1, 100)
_retries = _between(0, MAX_RETRIES)


def redact_url(url: str) -> str:
    """``url`` with any password replaced by ``***`` (for logs and errors)."""
    try:
        parts = urlsplit(url)
    except ValueError:  # not parseable: hide whatever stands before an '@'
        return re.sub(r"://[^/@]*@", "://***@", url)
    if parts.password is None:
        return url
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@", 1)
    return parts._replace(netloc=netloc).geturl()


def _feed_url(key: str, value: str) -> str:
    shown = redact_url(value)
    try:
        parts = urlsplit(value)
        parts.port  # noqa: B018 - raises ValueError for a port that is not a number
    except ValueError as error:
        raise ConfigError(key, f"is not a valid URL ({error}): {shown!r}") from None
    if parts.scheme not in ("http", "https", "file") or not (parts.netloc or parts.path):
        raise ConfigError(key, f"must be an http://, https:// or file:// URL, got {shown!r}")
    if parts.scheme in ("http", "https") and not parts.hostname:
        raise ConfigError(key, f"has no host: {shown!r}")
    if any(ord(char) < 33 or ord(char) == 127 for char in value):
        raise ConfigError(key, f"contains spaces or control characters: {shown!r}")
    leftover = value.replace("{channel}", "")
    if "{" in leftover or "}" in leftover:
        raise ConfigError(key, "the only placeholder allowed is {channel}")
    return value


def _http_url(key: str, value: str) -> str:
    checked = _feed_url(key, value)
    if not checked.startswith(("http://", "https://")):
        raise ConfigError(key, "must be an http:// or https:// URL")
    return checked


def _channels(key: str, value: tuple[str, ...]) -> tuple[str, ...]:
    if not value:
        raise ConfigError(key, "must name at least one channel")
    for channel in value:
        if not is_flatcar_channel(channel):
            raise ConfigError(
                key, f"{channel!r} is not a channel (stable, beta, alpha, lts or lts-YYYY)"
            )
    if len(set(value)) != len(value):
        raise ConfigError(key, "lists a channel twice")
    return value


def _arches(key: str, value: tuple[str, ...]) -> tuple[str, ...]:
    if not value:
        raise ConfigError(key, "must name at least one arch")
    for arch in value:
        if arch not in {a.value for a in Arch}:
            raise ConfigError(key, f"{arch!r} is not an arch (amd64, arm64)")
    return tuple(dict.fromkeys(value))


def _branches(key: str, value: tuple[str, ...]) -> tuple[str, ...]:
    for branch in value:
        if not is_driver_branch(branch):
            raise ConfigError(key, f"{branch!r} is not a driver branch (e.g. 580)")
    return tuple(dict.fromkeys(value))


def _branch_types(key: str, value: tuple[str, ...]) -> tuple[str, ...]:
    lowered = tuple(dict.fromkeys(item.strip().lower() for item in value))
    for item in lowered:
        if item not in NVIDIA_BRANCH_TYPES:
            raise ConfigError(key, f"{item!r} is not one of {', '.join(NVIDIA_BRANCH_TYPES)}")
    return lowered


def _database_url(key: str, value: str) -> str:
    scheme = value.split(":", 1)[0]
    if scheme in ("postgresql", "postgres"):
        value = "postgresql+psycopg:" + value.split(":", 1)[1]
        scheme = "postgresql+psycopg"
    if scheme not in ("sqlite", "postgresql+psycopg") or "://" not in value:
        raise ConfigError(
            key, f"must be sqlite:///PATH or postgresql+psycopg://..., got {redact_url(value)!r}"
        )
    try:
        urlsplit(value).port  # noqa: B018 - raises ValueError for a port that is not a number
    except ValueError as error:
        raise ConfigError(key, f"is not a valid URL ({error})") from None
    return value


def _existing_file(key: str, value: str) -> str:
    if value and not Path(value).is_file():
        raise ConfigError(key, f"file {value} not found")
    return value


def _ca_file(key: str, value: str) -> str:
    """A readable PEM bundle of CA certificates (checked now, not at the first request)."""
    _existing_file(key, value)
    if value:
        try:
            ssl.create_default_context(cafile=value)
        except (ssl.SSLError, OSError, ValueError) as error:
            raise ConfigError(key, f"{value} is not a PEM CA bundle ({error})") from None
    return value


def _printable(most: int, *, empty: bool) -> Check:
    def check(key: str, value: str) -> str:
        if not value and empty:
            return value
        if not value or not value.isascii() or not value.isprintable() or len(value) > most:
            raise ConfigError(key, f"must be printable ASCII, 1-{most} characters")
        return value

    return check


def _kaniko(rule: Callable[[str, Any], Any], *, optional: bool = False) -> Check:
    """A rule of ``builders.kaniko`` (the options' own), naming the setting's key."""

    def check(key: str, value: Any) -> Any:
        if optional and not value:
            return value
        try:
            rule(key, value)
        except InvalidOptionError as error:
            raise ConfigError(key, error.problem) from None
        return value

    return check


def _git_context(key: str, value: str) -> str:
    if value and not value.startswith("git://"):
        raise ConfigError(key, "must be a git:// context (git://host/repo.git#ref#commit) or empty")
    return cast(str, _kaniko(kaniko.check_git_context, optional=True)(key, value))


def _sub_path(key: str, value: str) -> str:
    if value.startswith("/") or ".." in value.split("/"):
        raise ConfigError(key, f"{value!r} must be a relative path inside the context")
    return cast(str, _kaniko(kaniko.check_relative_path, optional=True)(key, value))


_SLACK_ID_RE = re.compile(r"[A-Z0-9]{2,20}")


def _slack_ids(key: str, value: tuple[str, ...]) -> tuple[str, ...]:
    for item in value:
        if _SLACK_ID_RE.fullmatch(item) is None:
            raise ConfigError(key, f"{item!r} is not a Slack ID (e.g. U024BE7LH or C024BE91L)")
    return value


def _optional_slack_id(key: str, value: str) -> str:
    if value:
        _slack_ids(key, (value,))
    return value


def _api_base_url(key: str, value: str) -> str:
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.hostname or not value.endswith("/"):
        raise ConfigError(key, f"must be an http(s) URL ending in '/', got {redact_url(value)!r}")
    return value


def _token(prefix: str) -> Check:
    def check(key: str, value: str) -> str:
        if value and not value.startswith(prefix):
            raise ConfigError(key, f"must start with {prefix!r} (value not shown)")
        return value

    return check


def _listen(key: str, value: str) -> str:
    host, _, port = value.rpartition(":")
    host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    if not host or not port.isdigit() or int(port) > 65535 or any(c in host for c in "/ @"):
        raise ConfigError(key, f"must be HOST:PORT (e.g. 0.0.0.0:8080 or [::]:8080), got {value!r}")
    return value


def _one_of(*choices: str) -> Check:
    def check(key: str, value: str) -> str:
        if value not in choices:
            raise ConfigError(key, f"must be one of {', '.join(choices)}, got {value!r}")
        return value

    return check


_FINGERPRINT_RE = re.compile(r"[0-9A-F]{40}")


def _fingerprint(key: str, value: str) -> str:
    if _FINGERPRINT_RE.fullmatch(value) is None:
        raise ConfigError(key, "must be a 40-character upper-case hex OpenPGP fingerprint")
    return value


# -- the sections ------------------------------------------------------------------------------


@dataclass(frozen=True)
class DatabaseSettings:
    url: str = setting("sqlite:///releasebot.db", _database_url)
    """SQLAlchemy URL. ``sqlite:///relative.db``, ``sqlite:////abs.db`` or
    ``postgresql+psycopg://user:pass@host/db``; ``postgresql://`` is read as psycopg 3."""

    def __repr__(self) -> str:  # the URL may hold a password
        return f"DatabaseSettings(url={redact_url(self.url)!r})"

    def __str__(self) -> str:
        return repr(self)


@dataclass(frozen=True)
class FlatcarSettings:
    feed_url: str = setting(
        "https://www.flatcar.org/releases-json/releases-{channel}.json", _feed_url
    )
    channels: tuple[str, ...] = setting(("stable", "lts"), _channels)
    arches: tuple[str, ...] = setting(("amd64",), _arches)
    keep: int = setting(2, _keep)


@dataclass(frozen=True)
class NvidiaSettings:
    feed_url: str = setting(
        "https://docs.nvidia.com/datacenter/tesla/drivers/releases.json", _feed_url
    )
    branches: tuple[str, ...] = setting(("580",), _branches)
    branch_types: tuple[str, ...] = setting((), _branch_types)
    keep: int = setting(1, _keep)


@dataclass(frozen=True)
class RegistrySettings:
    repository: str = setting(
        "registry.example.com/nvidia/driver", _kaniko(kaniko.check_repository)
    )
    insecure: bool = setting(False)
    """Plain HTTP (a registry on a private network without TLS)."""
    ca_file: str = setting("")
    ca_configmap: str = setting("", _kaniko(kaniko.check_name, optional=True))
    """ConfigMap (key ``ca.crt``) with the same CA, mounted into the build Jobs."""
    tls_verify: bool = setting(True)
    docker_config: str = setting("")
    """Path to a Docker ``config.json`` (the Secret Kaniko mounts); empty: none."""
    username: str = setting("")
    password: str = setting("", secret=True)
    timeout: timedelta = setting(
        REGISTRY_TIMEOUT, Seconds(0, 3600, whole=False), key="timeout_seconds"
    )
    retries: int = setting(RetryPolicy.retries, _retries)

    @property
    def host(self) -> str:
        return self.repository.split("/", 1)[0]

    @property
    def path(self) -> str:
        return self.repository.split("/", 1)[1]


@dataclass(frozen=True)
class KubernetesSettings:
    namespace: str = setting("releasebot", _kaniko(kaniko.check_dns_label))
    kubeconfig: str = setting("")
    """Empty: the in-cluster service account, else ``$KUBECONFIG``."""


@dataclass(frozen=True)
class KanikoSettings:
    """The build Jobs' shape; the defaults (and rules) are ``KanikoOptions``'s."""

    executor_image: str = setting(DEFAULT_EXECUTOR_IMAGE, _kaniko(kaniko.check_image))
    registry_secret: str = setting("releasebot-registry", _kaniko(kaniko.check_name))
    context: str = setting("", _git_context)
    """A git context (``git://host/repo.git#refs/heads/main#<commit>``); empty: the
    ConfigMap ``context_configmap`` mounted as ``dir://``."""
    context_configmap: str = setting(CONFIGMAP_NAME, _kaniko(kaniko.check_name, optional=True))
    context_sub_path: str = setting("", _sub_path)
    dockerfile: str = setting(KanikoOptions.dockerfile, _sub_path)
    memory_request: str = setting(KanikoOptions.memory_request, _kaniko(kaniko.check_quantity))
    memory_limit: str = setting(KanikoOptions.memory_limit, _kaniko(kaniko.check_quantity))
    ephemeral_storage_request: str = setting(
        KanikoOptions.ephemeral_storage_request, _kaniko(kaniko.check_quantity)
    )
    ephemeral_storage_limit: str = setting(
        KanikoOptions.ephemeral_storage_limit, _kaniko(kaniko.check_quantity)
    )
    cpu_request: str = setting(KanikoOptions.cpu_request, _kaniko(kaniko.check_quantity))
    active_deadline: timedelta = setting(
        KanikoOptions.active_deadline, Seconds(60, 86400), key="active_deadline_seconds"
    )
    ttl_after_finished: timedelta = setting(
        KanikoOptions.ttl_after_finished, Seconds(0, 30 * 86400), key="ttl_seconds_after_finished"
    )
    push_retry: int = setting(KanikoOptions.push_retry, _kaniko(kaniko.check_push_retry))
    user_namespace: bool = setting(KanikoOptions.user_namespace)


@dataclass(frozen=True)
class SlackSettings:
    bot_token: str = setting("", _token("xoxb-"), secret=True)
    """``xoxb-…``; empty: no notifications. Prefer ``bot_token_file`` or the environment."""
    bot_token_file: str = setting("", _existing_file)
    signing_secret: str = setting("", secret=True)
    signing_secret_file: str = setting("", _existing_file)
    app_token: str = setting("", _token("xapp-"), secret=True)
    """``xapp-…`` for Socket Mode; empty: the HTTP endpoint only."""
    app_token_file: str = setting("", _existing_file)
    channel: str = setting("", _optional_slack_id)
    """Channel ID (``C…``) notifications go to."""
    allowed_users: tuple[str, ...] = setting((), _slack_ids)
    allowed_channels: tuple[str, ...] = setting((), _slack_ids)
    base_url: str = setting("https://slack.com/api/", _api_base_url)
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
            return Path(path).read_text(encoding="utf-8").strip()
        except OSError as error:
            raise ConfigError(
                f"slack.{name}_file", f"cannot read {path}: {error.strerror}"
            ) from None

    @property
    def enabled(self) -> bool:
        return bool(self.channel and (self.bot_token or self.bot_token_file))


@dataclass(frozen=True)
class RecipeSettings:
    flatcar_base_url: str = setting("https://{channel}.release.flatcar-linux.net", _http_url)
    """Where Flatcar's build artefacts live; ``{channel}`` is replaced (mirrors work)."""
    nvidia_base_url: str = setting("https://us.download.nvidia.com/tesla", _http_url)
    flatcar_key_fingerprint: str = setting("F88CFEDEFF29A5B4D9523864E25D9AED0593B34A", _fingerprint)
    flatcar_key_url: str = setting(
        "https://www.flatcar.org/security/image-signing-key/Flatcar_Image_Signing_Key.asc",
        _http_url,
    )
    check_inputs: bool = setting(True)
    """HEAD the inputs before launching (targets wait instead of failing)."""


@dataclass(frozen=True)
class BuildSettings:
    """The lifecycle's numbers; their defaults are ``LifecycleRules``'s."""

    max_concurrent_builds: int = setting(LifecycleRules.max_concurrent_builds, _between(1, 100))
    max_attempts: int = setting(LifecycleRules.max_attempts, _between(1, 20))
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
    retries: int = setting(RetryPolicy.retries, _retries)
    user_agent: str = setting("releasebot", _printable(200, empty=False))
    ca_bundle: str = setting("")
    """Path to a PEM bundle for feeds behind a TLS-intercepting proxy; empty = system store."""


@dataclass(frozen=True)
class RunSettings:
    """``releasebot run``: the scheduler, leader election and the HTTP endpoints."""

    interval: timedelta = setting(timedelta(minutes=5), Seconds(1, 86400), key="interval_seconds")
    jitter: timedelta = setting(timedelta(seconds=30), Seconds(0, 3600), key="jitter_seconds")
    listen: str = setting("0.0.0.0:8080", _listen)
    """``host:port`` of the one HTTP server (probes, metrics, Slack commands)."""
    lease_name: str = setting("releasebot-leader", _kaniko(kaniko.check_dns_label))
    lease: timedelta = setting(timedelta(seconds=30), Seconds(2, 600), key="lease_seconds")
    identity: str = setting("", _printable(128, empty=True))
    """This replica's name in the Lease; empty: ``$POD_NAME``, else the host name."""
    leader_election: str = setting("kubernetes", _one_of("kubernetes", "none"))
    log_format: str = setting("auto", _one_of("auto", "json", "text"))


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
        )

    def flatcar_feed_url(self, channel: str) -> str:
        return self.flatcar.feed_url.replace("{channel}", channel)

    def kaniko_options(self) -> KanikoOptions:
        """How every build Job is shaped; ``ConfigError`` naming the key of a rule broken
        between fields (a request above its limit, a sub-path without a git context)."""
        kaniko, registry = self.kaniko, self.registry
        try:
            return KanikoOptions(
                namespace=self.kubernetes.namespace,
                registry_repository=registry.repository,
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
                active_deadline=kaniko.active_deadline,
                ttl_after_finished=kaniko.ttl_after_finished,
                push_retry=kaniko.push_retry,
                insecure_registry=registry.insecure,
                skip_tls_verify=not registry.tls_verify,
                registry_ca_configmap=registry.ca_configmap or None,
                user_namespace=kaniko.user_namespace,
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


_SECTIONS: dict[str, type[Any]] = {
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
}


def _key(section: type[Any], name: str) -> str:
    """The key a user writes for ``section``'s field ``name``."""
    found = next(f for f in fields(section) if f.name == name)
    return str(found.metadata.get("key") or name)


_KANIKO_KEYS = {
    "namespace": "kubernetes.namespace",
    "registry_repository": "registry.repository",
    "registry_ca_configmap": "registry.ca_configmap",
    "insecure_registry": "registry.insecure",
    "skip_tls_verify": "registry.tls_verify",
    **{
        f.name: f"kaniko.{_key(KanikoSettings, f.name)}"
        for f in fields(KanikoSettings)
        if f.name in {o.name for o in fields(KanikoOptions)}
    },
}
"""The setting behind each ``KanikoOptions`` field, to name it in an error."""


# -- loading -----------------------------------------------------------------------------------


def load_settings(
    path: str | os.PathLike[str] | None = None, environ: Mapping[str, str] | None = None
) -> Settings:
    """Read ``path`` (or ``$RELEASEBOT_CONFIG``, or nothing), apply the environment, validate."""
    environ = os.environ if environ is None else environ
    raw: dict[str, dict[str, Any]] = {}
    if path is None and environ.get(CONFIG_ENV):
        path = environ[CONFIG_ENV]
    if path is not None:
        raw = _read_toml(Path(path))
    _apply_environment(raw, environ)
    sections = {name: _build_section(name, raw.get(name, {})) for name in _SECTIONS}
    settings = Settings(**sections)
    _check_cross_field(settings)
    return settings


def _read_toml(path: Path) -> dict[str, dict[str, Any]]:
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError("--config", f"file {path} not found") from None
    except (OSError, UnicodeDecodeError) as error:
        raise ConfigError("--config", f"cannot read {path}: {error}") from None
    except tomllib.TOMLDecodeError as error:
        raise ConfigError("--config", f"{path} is not valid TOML: {error}") from None
    for name, value in data.items():
        if name not in _SECTIONS:
            raise ConfigError(name, f"unknown section (known: {', '.join(_SECTIONS)})")
        if not isinstance(value, dict):
            raise ConfigError(name, "must be a [table]")
    return data


def _apply_environment(raw: dict[str, dict[str, Any]], environ: Mapping[str, str]) -> None:
    for name, value in environ.items():
        if not name.startswith(ENV_PREFIX) or name == CONFIG_ENV:
            continue
        section, _, key = name[len(ENV_PREFIX) :].lower().partition("_")
        if section in ("service", "port"):
            # Kubernetes injects RELEASEBOT_SERVICE_HOST, RELEASEBOT_PORT_8080_TCP… for a
            # Service named releasebot: not settings, never an error.
            continue
        if section not in _SECTIONS or not key:
            raise ConfigError(name, "unknown setting in the environment")
        text = _EnvText(value)
        text.source = name
        raw.setdefault(section, {})[key] = text


class _EnvText(str):
    """A value that came from the environment: converted to the field's type on build.

    ``source`` is the variable's name, so an error names what the user actually set.
    """

    source: str = ""


def _build_section(name: str, values: Mapping[str, Any]) -> Any:
    """The section ``name`` from its raw ``values``: every key known, every value of its
    field's type and following its field's rule (defaults included)."""
    cls = _SECTIONS[name]
    by_key = {str(f.metadata.get("key") or f.name): f for f in fields(cls)}
    given: dict[str, tuple[Any, str]] = {}
    for key, value in values.items():
        source = value.source if isinstance(value, _EnvText) else f"{name}.{key}"
        if key not in by_key:
            raise ConfigError(source, f"unknown key (known: {', '.join(by_key)})")
        given[by_key[key].name] = (value, source)
    kwargs: dict[str, Any] = {}
    for key, spec in by_key.items():
        check = spec.metadata.get("check")
        value, source = given.get(spec.name, (spec.default, f"{name}.{key}"))
        if isinstance(check, Seconds):  # given in seconds, kept as a timedelta
            if isinstance(value, timedelta):
                value = check.unit(value.total_seconds())
            kwargs[spec.name] = check(source, _convert(source, value, check.unit))
            continue
        value = _convert(source, value, type(spec.default))
        kwargs[spec.name] = value if check is None else check(source, value)
    return cls(**kwargs)


def _convert(key: str, value: Any, kind: type) -> Any:
    if isinstance(value, _EnvText):
        return _convert_env(key, str(value), kind)
    if kind is tuple:
        if not isinstance(value, list | tuple):
            raise ConfigError(key, f"must be a list, got {type(value).__name__}")
        items = []
        for item in value:
            if isinstance(item, bool) or not isinstance(item, int | str):
                raise ConfigError(key, f"must be a list of strings, got {item!r}")
            items.append(str(item))
        return tuple(items)
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if not isinstance(value, kind) or isinstance(value, bool) != (kind is bool):
        raise ConfigError(key, f"must be {kind.__name__}, got {type(value).__name__}")
    return value


def _convert_env(key: str, text: str, kind: type) -> Any:
    if kind is bool:
        lowered = text.strip().lower()
        if lowered not in ("true", "false", "1", "0", "yes", "no"):
            raise ConfigError(key, f"must be true or false, got {text!r}")
        return lowered in ("true", "1", "yes")
    if kind is tuple:
        return tuple(item.strip() for item in text.split(",") if item.strip())
    if kind in (int, float):
        try:
            number = kind(text)
        except ValueError:
            raise ConfigError(key, f"must be a number, got {text!r}") from None
        if not math.isfinite(number):
            raise ConfigError(key, f"must be a finite number, got {text!r}")
        return number
    return text


def _check_cross_field(settings: Settings) -> None:
    if "{channel}" not in settings.flatcar.feed_url and len(settings.flatcar.channels) > 1:
        raise ConfigError(
            "flatcar.feed_url",
            "must contain {channel} when several channels are configured",
        )
    if not settings.nvidia.branches and not settings.nvidia.branch_types:
        raise ConfigError("nvidia.branches", "select at least one branch or branch type")
    _ca_file("http.ca_bundle", settings.http.ca_bundle)
    _ca_file("registry.ca_file", settings.registry.ca_file)
    _existing_file("registry.docker_config", settings.registry.docker_config)
    _existing_file("kubernetes.kubeconfig", settings.kubernetes.kubeconfig)
    if not settings.kaniko.context and not settings.kaniko.context_configmap:
        raise ConfigError("kaniko.context", "set a git:// context or kaniko.context_configmap")
    if settings.registry.password and not settings.registry.username:
        raise ConfigError("registry.username", "is needed when registry.password is set")
    if settings.build.retry_cap < settings.build.retry_base:
        raise ConfigError("build.retry_cap_seconds", "must not be less than retry_base_seconds")
    if settings.run.jitter * 2 > settings.run.interval:
        raise ConfigError("run.jitter_seconds", "must be at most half of run.interval_seconds")
    settings.kaniko_options()  # the options' rules between fields, against their keys
