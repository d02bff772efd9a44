"""The settings tree: one TOML file plus ``RELEASEBOT_<SECTION>_<KEY>`` environment overrides.

Loaded once at start-up by the CLI and handed, piece by piece, to ``wiring``; adapters and
use cases never see it (an import-linter contract says so). Every problem is a
``ConfigError`` naming the key, so a bad setting costs one line, not a traceback.

Environment values are strings: lists are comma-separated (``RELEASEBOT_FLATCAR_CHANNELS=
stable,lts``), integers are decimal. The environment wins over the file.

Defaults, their units and why they are what they are: ``config/releasebot.example.toml``.
"""

from __future__ import annotations

import os
import re
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
class Settings:
    database: DatabaseSettings = field(default_factory=DatabaseSettings)
    flatcar: FlatcarSettings = field(default_factory=FlatcarSettings)
    nvidia: NvidiaSettings = field(default_factory=NvidiaSettings)
    registry: RegistrySettings = field(default_factory=RegistrySettings)
    http: HttpSettings = field(default_factory=HttpSettings)

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
}


def redact_url(url: str) -> str:
    """``url`` with any password replaced by ``***`` (for logs and errors)."""
    parts = urlsplit(url)
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
        if section not in _SECTIONS or not key:
            raise ConfigError(name, "unknown setting in the environment")
        raw.setdefault(section, {})[key] = _EnvText(value)


class _EnvText(str):
    """A value that came from the environment: converted to the field's type on build."""

    __slots__ = ()


def _build_section(name: str, values: Mapping[str, Any]) -> Any:
    cls = _SECTIONS[name]
    known = {f.name: f for f in fields(cls)}
    kwargs: dict[str, Any] = {}
    for key, value in values.items():
        dotted = f"{name}.{key}"
        if key not in known:
            raise ConfigError(dotted, f"unknown key (known: {', '.join(known)})")
        kwargs[key] = _convert(dotted, value, type(getattr(cls(), key)))
    section = cls(**kwargs)
    for key in known:
        check = _CHECKS.get(f"{name}.{key}")
        if check is not None:
            normalised = check(f"{name}.{key}", getattr(section, key))
            object.__setattr__(section, key, normalised)
    return section


def _convert(key: str, value: Any, kind: type) -> Any:
    if isinstance(value, _EnvText):
        return _convert_env(key, str(value), kind)
    if kind is tuple:
        if not isinstance(value, list):
            raise ConfigError(key, f"must be a list, got {type(value).__name__}")
        return tuple(str(item) if isinstance(item, int | str) else item for item in value)
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if not isinstance(value, kind) or isinstance(value, bool) != (kind is bool):
        raise ConfigError(key, f"must be {kind.__name__}, got {type(value).__name__}")
    return value


def _convert_env(key: str, text: str, kind: type) -> Any:
    if kind is tuple:
        return tuple(item.strip() for item in text.split(",") if item.strip())
    if kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            raise ConfigError(key, f"must be a number, got {text!r}") from None
    return text


def _positive(key: str, value: int | float) -> int | float:
    if value <= 0:
        raise ConfigError(key, f"must be greater than 0, got {value}")
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
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https", "file") or not (parts.netloc or parts.path):
        raise ConfigError(key, f"must be an http://, https:// or file:// URL, got {value!r}")
    if parts.scheme in ("http", "https") and not parts.hostname:
        raise ConfigError(key, f"has no host: {value!r}")
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
        return "postgresql+psycopg:" + value.split(":", 1)[1]
    if scheme not in ("sqlite", "postgresql+psycopg") or "://" not in value:
        raise ConfigError(
            key, f"must be sqlite:///PATH or postgresql+psycopg://..., got {redact_url(value)!r}"
        )
    return value


def _repository(key: str, value: str) -> str:
    if _REPOSITORY_RE.fullmatch(value) is None:
        raise ConfigError(
            key, f"{value!r} is not a repository like registry.example.com/nvidia/driver"
        )
    return value


def _ca_bundle(key: str, value: str) -> str:
    if value and not Path(value).is_file():
        raise ConfigError(key, f"file {value} not found")
    return value


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
}


def _check_cross_field(settings: Settings) -> None:
    if "{channel}" not in settings.flatcar.feed_url and len(settings.flatcar.channels) > 1:
        raise ConfigError(
            "flatcar.feed_url",
            "must contain {channel} when several channels are configured",
        )
    if not settings.nvidia.branches and not settings.nvidia.branch_types:
        raise ConfigError("nvidia.branches", "select at least one branch or branch type")
    _ca_bundle("http.ca_bundle", settings.http.ca_bundle)
