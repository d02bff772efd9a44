"""The settings tree: one TOML file plus ``RELEASEBOT_<SECTION>_<KEY>`` environment overrides.

Loaded once at start-up by the CLI and handed, piece by piece, to ``wiring``; adapters and
use cases never see it (an import-linter contract says so). Every problem is a
``ConfigError`` naming the key, so a bad setting costs one line, not a traceback.

Environment values are strings: lists are comma-separated (``RELEASEBOT_FLATCAR_CHANNELS=
stable,lts``), integers are decimal. The environment wins over the file.

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
from typing import Any
from urllib.parse import urlsplit

from releasebot.domain.errors import ConfigError
from releasebot.domain.policy import DriverPolicy, FlatcarPolicy, Policy, is_flatcar_channel
from releasebot.domain.versions import Arch, is_driver_branch

ENV_PREFIX = "RELEASEBOT_"
CONFIG_ENV = "RELEASEBOT_CONFIG"
NVIDIA_BRANCH_TYPES = ("production branch", "lts branch", "new feature branch")
# host[:port]/path as the OCI distribution spec allows it (path components lower case).
_REPOSITORY_RE = re.compile(
    r"[A-Za-z0-9.-]+(?::[0-9]{1,5})?(?:/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)+"
)


@dataclass(frozen=True)
class DatabaseSettings:
    url: str = "sqlite:///releasebot.db"
    """SQLAlchemy URL. ``sqlite:///relative.db``, ``sqlite:////abs.db`` or
    ``postgresql+psycopg://user:pass@host/db``; ``postgresql://`` is read as psycopg 3."""

    def __repr__(self) -> str:  # the URL may hold a password
        return f"DatabaseSettings(url={redact_url(self.url)!r})"

    def __str__(self) -> str:
        return repr(self)


@dataclass(frozen=True)
class FlatcarSettings:
    feed_url: str = "https://www.flatcar.org/releases-json/releases-{channel}.json"
    channels: tuple[str, ...] = ("stable", "lts")
    arches: tuple[str, ...] = ("amd64",)
    keep: int = 2


@dataclass(frozen=True)
class NvidiaSettings:
    feed_url: str = "https://docs.nvidia.com/datacenter/tesla/drivers/releases.json"
    branches: tuple[str, ...] = ("580",)
    branch_types: tuple[str, ...] = ()
    keep: int = 1


@dataclass(frozen=True)
class RegistrySettings:
    repository: str = "registry.example.com/nvidia/driver"
    insecure: bool = False
    """Plain HTTP (a registry on a private network without TLS)."""
    ca_file: str = ""
    ca_configmap: str = ""
    """ConfigMap (key ``ca.crt``) with the same CA, mounted into the build Jobs."""
    tls_verify: bool = True
    docker_config: str = ""
    """Path to a Docker ``config.json`` (the Secret Kaniko mounts); empty: none."""
    username: str = ""
    password: str = field(default="", repr=False)
    timeout_seconds: float = 30.0
    retries: int = 2

    @property
    def host(self) -> str:
        return self.repository.split("/", 1)[0]

    @property
    def path(self) -> str:
        return self.repository.split("/", 1)[1]


@dataclass(frozen=True)
class KubernetesSettings:
    namespace: str = "releasebot"
    kubeconfig: str = ""
    """Empty: the in-cluster service account, else ``$KUBECONFIG``."""


@dataclass(frozen=True)
class KanikoSettings:
    executor_image: str = "ghcr.io/osscontainertools/kaniko:v1.28.0"
    registry_secret: str = "releasebot-registry"  # noqa: S105 - a Secret's name, no secret
    context: str = ""
    """A git context (``git://host/repo.git#refs/heads/main#<commit>``); empty: the
    ConfigMap ``context_configmap`` mounted as ``dir://``."""
    context_configmap: str = "releasebot-recipe"
    context_sub_path: str = ""
    dockerfile: str = "Dockerfile"
    memory_request: str = "4Gi"
    memory_limit: str = "8Gi"
    ephemeral_storage_request: str = "10Gi"
    ephemeral_storage_limit: str = "20Gi"
    cpu_request: str = "1"
    active_deadline_seconds: int = 3600
    ttl_seconds_after_finished: int = 86400
    push_retry: int = 3
    user_namespace: bool = False


@dataclass(frozen=True)
class SlackSettings:
    bot_token: str = field(default="", repr=False)
    """``xoxb-…``; empty: no notifications. Prefer ``bot_token_file`` or the environment."""
    bot_token_file: str = ""
    signing_secret: str = field(default="", repr=False)
    signing_secret_file: str = ""
    app_token: str = field(default="", repr=False)
    """``xapp-…`` for Socket Mode; empty: the HTTP endpoint only."""
    app_token_file: str = ""
    channel: str = ""
    """Channel ID (``C…``) notifications go to."""
    allowed_users: tuple[str, ...] = ()
    allowed_channels: tuple[str, ...] = ()
    base_url: str = "https://slack.com/api/"
    feed_alert_after_seconds: int = 21600
    timeout_seconds: float = 10.0

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
    flatcar_base_url: str = "https://{channel}.release.flatcar-linux.net"
    """Where Flatcar's build artefacts live; ``{channel}`` is replaced (mirrors work)."""
    nvidia_base_url: str = "https://us.download.nvidia.com/tesla"
    flatcar_key_fingerprint: str = "F88CFEDEFF29A5B4D9523864E25D9AED0593B34A"
    flatcar_key_url: str = (
        "https://www.flatcar.org/security/image-signing-key/Flatcar_Image_Signing_Key.asc"
    )
    check_inputs: bool = True
    """HEAD the inputs before launching (targets wait instead of failing)."""


@dataclass(frozen=True)
class BuildSettings:
    max_concurrent_builds: int = 2
    max_attempts: int = 3
    retry_base_seconds: int = 300
    retry_cap_seconds: int = 21600


@dataclass(frozen=True)
class HttpSettings:
    timeout_seconds: float = 30.0
    retries: int = 2
    user_agent: str = "releasebot"
    ca_bundle: str = ""
    """Path to a PEM bundle for feeds behind a TLS-intercepting proxy; empty = system store."""

    @property
    def timeout(self) -> timedelta:
        return timedelta(seconds=self.timeout_seconds)


@dataclass(frozen=True)
class RunSettings:
    """``releasebot run``: the scheduler, leader election and the HTTP endpoints."""

    interval_seconds: int = 300
    jitter_seconds: int = 30
    listen: str = "0.0.0.0:8080"
    """``host:port`` of the one HTTP server (probes, metrics, Slack commands)."""
    lease_name: str = "releasebot-leader"
    lease_seconds: int = 30
    identity: str = ""
    """This replica's name in the Lease; empty: ``$POD_NAME``, else the host name."""
    leader_election: str = "kubernetes"
    log_format: str = "auto"


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
    cls = _SECTIONS[name]
    known = {f.name: f for f in fields(cls)}
    kwargs: dict[str, Any] = {}
    sources: dict[str, str] = {}
    for key, value in values.items():
        dotted = f"{name}.{key}"
        if isinstance(value, _EnvText):
            dotted = sources[key] = value.source
        if key not in known:
            raise ConfigError(dotted, f"unknown key (known: {', '.join(known)})")
        kwargs[key] = _convert(dotted, value, type(getattr(cls(), key)))
    section = cls(**kwargs)
    for key in known:
        check = _CHECKS.get(f"{name}.{key}")
        if check is not None:
            normalised = check(sources.get(key, f"{name}.{key}"), getattr(section, key))
            object.__setattr__(section, key, normalised)
    return section


def _convert(key: str, value: Any, kind: type) -> Any:
    if isinstance(value, _EnvText):
        return _convert_env(key, str(value), kind)
    if kind is tuple:
        if not isinstance(value, list):
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


def _positive(key: str, value: float) -> float:
    if not math.isfinite(value) or not 0 < value <= 3600:
        raise ConfigError(key, f"must be a number of seconds between 0 and 3600, got {value}")
    return value


def _keep(key: str, value: int) -> int:
    if not 1 <= value <= 100:
        raise ConfigError(key, f"must be between 1 and 100, got {value}")
    return value


def _not_negative(key: str, value: int) -> int:
    if not 0 <= value <= 10:
        raise ConfigError(key, f"must be between 0 and 10, got {value}")
    return value


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


def _repository(key: str, value: str) -> str:
    if _REPOSITORY_RE.fullmatch(value) is None:
        raise ConfigError(
            key, f"{value!r} is not a repository like registry.example.com/nvidia/driver"
        )
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


def _user_agent(key: str, value: str) -> str:
    if not value or not value.isascii() or not value.isprintable() or len(value) > 200:
        raise ConfigError(key, "must be printable ASCII, 1-200 characters")
    return value


_K8S_NAME_RE = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
_QUANTITY_RE = re.compile(r"[0-9]+(\.[0-9]+)?(m|k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei)?")
_IMAGE_RE = re.compile(
    r"[a-z0-9.-]+(:[0-9]+)?(/[a-z0-9._-]+)+(:[A-Za-z0-9_.-]{1,128})?(@sha256:[0-9a-f]{64})?"
)


def _k8s_name(key: str, value: str) -> str:
    if _K8S_NAME_RE.fullmatch(value) is None:
        raise ConfigError(key, f"{value!r} is not a Kubernetes name (lower case, digits, '-')")
    return value


def _optional_k8s_name(key: str, value: str) -> str:
    return _k8s_name(key, value) if value else value


def _quantity(key: str, value: str) -> str:
    if _QUANTITY_RE.fullmatch(value) is None:
        raise ConfigError(key, f"{value!r} is not a Kubernetes quantity (e.g. 8Gi, 500m)")
    return value


def _image(key: str, value: str) -> str:
    if _IMAGE_RE.fullmatch(value) is None or (
        "@" not in value and ":" not in value.rsplit("/", 1)[-1]
    ):
        raise ConfigError(key, f"{value!r} is not an image reference with a tag or digest")
    return value


def _git_context(key: str, value: str) -> str:
    if value and not value.startswith("git://"):
        raise ConfigError(key, "must be a git:// context (git://host/repo.git#ref#commit) or empty")
    return value


def _sub_path(key: str, value: str) -> str:
    if value.startswith("/") or ".." in value.split("/"):
        raise ConfigError(key, f"{value!r} must be a relative path inside the context")
    return value


def _range(low: int, high: int) -> Callable[[str, int], int]:
    def check(key: str, value: int) -> int:
        if not low <= value <= high:
            raise ConfigError(key, f"must be between {low} and {high}, got {value}")
        return value

    return check


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


def _token(prefix: str) -> Callable[[str, str], str]:
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


def _one_of(*choices: str) -> Callable[[str, str], str]:
    def check(key: str, value: str) -> str:
        if value not in choices:
            raise ConfigError(key, f"must be one of {', '.join(choices)}, got {value!r}")
        return value

    return check


def _identity(key: str, value: str) -> str:
    if value and (len(value) > 128 or not value.isascii() or not value.isprintable()):
        raise ConfigError(key, "must be printable ASCII, at most 128 characters")
    return value


_FINGERPRINT_RE = re.compile(r"[0-9A-F]{40}")


def _fingerprint(key: str, value: str) -> str:
    if _FINGERPRINT_RE.fullmatch(value) is None:
        raise ConfigError(key, "must be a 40-character upper-case hex OpenPGP fingerprint")
    return value


def _http_url(key: str, value: str) -> str:
    checked = _feed_url(key, value)
    if not checked.startswith(("http://", "https://")):
        raise ConfigError(key, "must be an http:// or https:// URL")
    return checked


_CHECKS: dict[str, Callable[[str, Any], Any]] = {
    "database.url": _database_url,
    "flatcar.feed_url": _feed_url,
    "flatcar.channels": _channels,
    "flatcar.arches": _arches,
    "flatcar.keep": _keep,
    "nvidia.feed_url": _feed_url,
    "nvidia.branches": _branches,
    "nvidia.branch_types": _branch_types,
    "nvidia.keep": _keep,
    "registry.repository": _repository,
    "http.timeout_seconds": _positive,
    "http.retries": _not_negative,
    "http.user_agent": _user_agent,
    "registry.timeout_seconds": _positive,
    "registry.ca_configmap": _optional_k8s_name,
    "registry.retries": _not_negative,
    "kubernetes.namespace": _k8s_name,
    "kaniko.executor_image": _image,
    "kaniko.registry_secret": _k8s_name,
    "kaniko.context": _git_context,
    "kaniko.context_configmap": _optional_k8s_name,
    "kaniko.context_sub_path": _sub_path,
    "kaniko.dockerfile": _sub_path,
    "kaniko.memory_request": _quantity,
    "kaniko.memory_limit": _quantity,
    "kaniko.ephemeral_storage_request": _quantity,
    "kaniko.ephemeral_storage_limit": _quantity,
    "kaniko.cpu_request": _quantity,
    "kaniko.active_deadline_seconds": _range(60, 86400),
    "kaniko.ttl_seconds_after_finished": _range(0, 30 * 86400),
    "kaniko.push_retry": _range(0, 10),
    "build.max_concurrent_builds": _range(1, 100),
    "build.max_attempts": _range(1, 20),
    "build.retry_base_seconds": _range(1, 86400),
    "build.retry_cap_seconds": _range(1, 7 * 86400),
    "slack.bot_token": _token("xoxb-"),
    "slack.app_token": _token("xapp-"),
    "slack.channel": _optional_slack_id,
    "slack.allowed_users": _slack_ids,
    "slack.allowed_channels": _slack_ids,
    "slack.base_url": _api_base_url,
    "slack.feed_alert_after_seconds": _range(60, 30 * 86400),
    "slack.timeout_seconds": _positive,
    "recipe.flatcar_base_url": _http_url,
    "recipe.nvidia_base_url": _http_url,
    "recipe.flatcar_key_fingerprint": _fingerprint,
    "recipe.flatcar_key_url": _http_url,
    "run.interval_seconds": _range(1, 86400),
    "run.jitter_seconds": _range(0, 3600),
    "run.listen": _listen,
    "run.lease_name": _k8s_name,
    "run.lease_seconds": _range(2, 600),
    "run.identity": _identity,
    "run.leader_election": _one_of("kubernetes", "none"),
    "run.log_format": _one_of("auto", "json", "text"),
}


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
    for name in ("bot_token", "signing_secret", "app_token"):
        _existing_file(f"slack.{name}_file", str(getattr(settings.slack, f"{name}_file")))
    if settings.build.retry_cap_seconds < settings.build.retry_base_seconds:
        raise ConfigError("build.retry_cap_seconds", "must not be less than retry_base_seconds")
    if settings.run.jitter_seconds * 2 > settings.run.interval_seconds:
        raise ConfigError("run.jitter_seconds", "must be at most half of run.interval_seconds")
