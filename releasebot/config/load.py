"""Loading the settings: the TOML file, then ``RELEASEBOT_<SECTION>_<KEY>`` overrides.

Every key must be known; every value is converted to its field's type (environment values
are strings: lists are comma-separated, numbers decimal) and checked by its field's rule,
defaults included; then the rules between fields run, the Kaniko options' own among them.
A problem is one ``ConfigError`` naming the key, or the variable that set it.
"""

from __future__ import annotations

import math
import os
import tomllib
from collections.abc import Mapping
from dataclasses import fields
from datetime import timedelta
from pathlib import Path
from typing import Any

from releasebot.builders.recipe import CONFIGMAP_NAME
from releasebot.config.rules import Seconds, ca_file, existing_file
from releasebot.config.sections import SECTIONS, Settings
from releasebot.domain.shared.errors import ConfigError
from releasebot.edge.parse import ValueRefusedError, parse_int, read_regular_file

ENV_PREFIX = "RELEASEBOT_"
CONFIG_ENV = "RELEASEBOT_CONFIG"
MAX_CONFIG_BYTES = 1024 * 1024
"""The largest config file read: a full one is a few kilobytes; a FIFO, ``/dev/zero`` or a
wrong path to a big file is refused before it hangs or fills memory."""


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
    sections = {name: _build_section(name, raw.get(name, {})) for name in SECTIONS}
    settings = Settings(**sections)
    _check_cross_field(settings)
    return settings


def _read_toml(path: Path) -> dict[str, dict[str, Any]]:
    try:
        raw = read_regular_file(path, MAX_CONFIG_BYTES)
    except ValueRefusedError as error:
        problem = str(error)
        if not problem.endswith("not found"):
            problem += " (give the path of a TOML file)"
        raise ConfigError("--config", problem) from None
    try:
        data = tomllib.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as error:
        shown = ascii(str(path)[:120])
        raise ConfigError("--config", f"{shown} is not UTF-8 text (byte {error.start})") from None
    except tomllib.TOMLDecodeError as error:
        raise ConfigError("--config", f"{path} is not valid TOML: {error}") from None
    for name, value in data.items():
        if name not in SECTIONS:
            raise ConfigError(name, f"unknown section (known: {', '.join(SECTIONS)})")
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
        if section not in SECTIONS or not key:
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
    cls = SECTIONS[name]
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
                value = check.unit(value.total_seconds() / check.per_unit)
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
        shown = ascii(text[:40])
        if not text.isascii() or "_" in text or len(text) > 40:  # int() takes "١٢" and "1_0"
            raise ConfigError(key, f"must be a number of ASCII digits, got {shown}")
        try:
            number = parse_int(text, key, minimum=-(10**18)) if kind is int else float(text)
        except ValueError:
            raise ConfigError(key, f"must be a number, got {shown}") from None
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
    ca_file("http.ca_bundle", settings.http.ca_bundle)
    ca_file("registry.ca_file", settings.registry.ca_file)
    existing_file("registry.docker_config", settings.registry.docker_config)
    existing_file("kubernetes.kubeconfig", settings.kubernetes.kubeconfig)
    if not settings.kaniko.context and not settings.kaniko.context_configmap:
        raise ConfigError("kaniko.context", "set a git:// context or kaniko.context_configmap")
    if (
        not settings.recipe.bases
        and not settings.kaniko.context
        and settings.kaniko.context_configmap == CONFIGMAP_NAME
    ):
        raise ConfigError(
            "recipe.bases",
            f"false cannot build with the shipped recipe (ConfigMap {CONFIGMAP_NAME}): its "
            "Dockerfile builds FROM a driver base (DRIVER_BASE); set recipe.bases = true, or "
            "point kaniko.context or kaniko.context_configmap at a single-Dockerfile recipe",
        )
    if settings.registry.password and not settings.registry.username:
        raise ConfigError("registry.username", "is needed when registry.password is set")
    registry = settings.registry
    if registry.auth != "dockerconfig" and (
        registry.username or registry.password or registry.docker_config
    ):
        raise ConfigError(
            "registry.auth",
            f"{registry.auth} obtains the registry token itself: leave registry.username, "
            "registry.password and registry.docker_config empty",
        )
    if settings.build.retry_cap < settings.build.retry_base:
        raise ConfigError("build.retry_cap_seconds", "must not be less than retry_base_seconds")
    fleet = settings.fleet
    if fleet.gate_requires_proof and not (fleet.gate and fleet.proof):
        raise ConfigError(
            "fleet.gate_requires_proof", "needs fleet.gate and fleet.proof both set to true"
        )
    if fleet.proof and fleet.proof_annotation == fleet.gate_annotation:
        raise ConfigError(
            "fleet.proof_annotation", "must differ from fleet.gate_annotation (FLUO waits on each)"
        )
    if settings.run.jitter * 2 > settings.run.interval:
        raise ConfigError("run.jitter_seconds", "must be at most half of run.interval_seconds")
    settings.kaniko_options()  # the options' rules between fields, against their keys
