"""The rules settings follow, one function each, and ``setting`` that binds one to a field.

A rule is ``check(key, value)``: it returns the value (perhaps normalised) or raises
``ConfigError(key, problem)`` with a one-line problem, never repeating a secret. The rules
of the Kaniko options are the builder's own (``builders.kaniko``), wrapped by
``kaniko_rule`` to name the setting's key. Deliberately not here: which field follows which
rule (``config.sections`` says so at each field) and reading files (``config.load``).
"""

from __future__ import annotations

import math
import re
import ssl
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, TypeVar, cast

from releasebot.builders import kaniko
from releasebot.domain.fleet.nodes import FLUO_PREFIX, GATE_VERSION_ANNOTATION
from releasebot.domain.fleet.selectors import LabelSelector
from releasebot.domain.shared.errors import ConfigError, InvalidOptionError
from releasebot.domain.shared.versions import Arch, is_driver_branch
from releasebot.domain.targets.policy import IncompatiblePair, is_flatcar_channel
from releasebot.edge.parse import (
    ValueRefusedError,
    check_path,
    check_regular_file,
    parse_host_name,
    parse_listen_address,
    parse_url,
    read_regular_file,
)
from releasebot.edge.redact import redact
from releasebot.edge.retry import MAX_RETRIES
from releasebot.edge.text import one_line

T = TypeVar("T")
Check = Callable[[str, Any], Any]
"""A rule: ``check(key, value)`` returns the value (perhaps normalised) or raises
``ConfigError(key, problem)``."""

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
    per_unit: int = 1
    """Seconds in one unit of the value written: 86400 for a ``*_days`` key."""

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
        return timedelta(seconds=seconds * self.per_unit)


# -- the rules ---------------------------------------------------------------------------------


def between(low: int, high: int) -> Check:
    def check(key: str, value: int) -> int:
        if not low <= value <= high:
            raise ConfigError(key, f"must be between {low} and {high}, got {value}")
        return value

    return check


keep = between(1, 100)
retries = between(0, MAX_RETRIES)


def redact_url(url: str) -> str:
    """``url`` with every credential (userinfo password, ``?password=``, tokens...) replaced
    by ``***`` (for logs and errors): ``edge.redact``'s forms."""
    return redact(url)


def feed_url(key: str, value: str) -> str:
    shown = ascii(redact_url(value)[:200])
    if any(ord(char) < 33 or ord(char) == 127 for char in value):
        raise ConfigError(key, f"contains spaces or control characters: {shown}")
    try:
        parts = parse_url(value, schemes=("http", "https", "file"))
    except ValueRefusedError as error:
        if "must be a" in str(error):
            error = ValueRefusedError("must be an http://, https:// or file:// URL")
        raise ConfigError(key, f"{error}, got {shown}") from None
    if not (parts.netloc or parts.path):
        raise ConfigError(key, f"must be an http://, https:// or file:// URL, got {shown}")
    leftover = value.replace("{channel}", "")
    if "{" in leftover or "}" in leftover:
        raise ConfigError(key, "the only placeholder allowed is {channel}")
    return value


def http_url(key: str, value: str) -> str:
    checked = feed_url(key, value)
    if not checked.startswith(("http://", "https://")):
        raise ConfigError(key, "must be an http:// or https:// URL")
    return checked


def channels(key: str, value: tuple[str, ...]) -> tuple[str, ...]:
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


def arches(key: str, value: tuple[str, ...]) -> tuple[str, ...]:
    if not value:
        raise ConfigError(key, "must name at least one arch")
    for arch in value:
        if arch not in {a.value for a in Arch}:
            raise ConfigError(key, f"{arch!r} is not an arch (amd64, arm64)")
    return tuple(dict.fromkeys(value))


def branches(key: str, value: tuple[str, ...]) -> tuple[str, ...]:
    for branch in value:
        if not is_driver_branch(branch):
            raise ConfigError(key, f"{branch!r} is not a driver branch (e.g. 580)")
    return tuple(dict.fromkeys(value))


def incompatible_pairs(key: str, value: tuple[str, ...]) -> tuple[str, ...]:
    if len(value) > 100:
        raise ConfigError(key, "lists more than 100 pairs")
    for item in value:
        try:
            IncompatiblePair.parse(item)
        except ValueError as error:
            raise ConfigError(key, str(error)) from None
    return tuple(dict.fromkeys(item.strip() for item in value))


def branch_types(key: str, value: tuple[str, ...]) -> tuple[str, ...]:
    lowered = tuple(dict.fromkeys(item.strip().lower() for item in value))
    for item in lowered:
        if item not in NVIDIA_BRANCH_TYPES:
            raise ConfigError(key, f"{item!r} is not one of {', '.join(NVIDIA_BRANCH_TYPES)}")
    return lowered


def database_url(key: str, value: str) -> str:
    scheme = value.split(":", 1)[0]
    if scheme in ("postgresql", "postgres"):
        value = "postgresql+psycopg:" + value.split(":", 1)[1]
        scheme = "postgresql+psycopg"
    if scheme not in ("sqlite", "postgresql+psycopg") or "://" not in value:
        raise ConfigError(
            key, f"must be sqlite:///PATH or postgresql+psycopg://..., got {redact_url(value)!r}"
        )
    try:
        parse_url(value, schemes=("sqlite", "postgresql+psycopg"), any_path=True)
    except ValueRefusedError as error:
        raise ConfigError(key, f"is not a valid URL: {error}") from None
    return value


def existing_file(key: str, value: str) -> str:
    """Empty, or a regular file this process can read (checked the way it is read later:
    a FIFO, a directory or an unreadable file is named as such, not as "not found")."""
    try:
        check_path(value)
    except ValueRefusedError as error:
        raise ConfigError(key, f"is not a usable path: {error}") from None
    if value:
        try:
            check_regular_file(value)
        except ValueRefusedError as error:
            raise ConfigError(key, str(error)) from None
    return value


MAX_CA_BUNDLE_BYTES = 4 * 1024 * 1024
"""Debian's whole bundle of public CAs is about 220 KiB; a private CA is a few KiB."""


def ca_file(key: str, value: str) -> str:
    """A readable PEM bundle of CA certificates (checked now, not at the first request),
    read within ``MAX_CA_BUNDLE_BYTES`` (OpenSSL would read a wrong path whole)."""
    existing_file(key, value)
    if value:
        try:
            pem = read_regular_file(value, MAX_CA_BUNDLE_BYTES).decode("ascii")
            if "-----BEGIN CERTIFICATE-----" not in pem:  # cadata="" loads nothing, quietly
                raise ValueError("no certificate in it")
            ssl.create_default_context(cadata=pem)
        except ValueRefusedError as error:
            raise ConfigError(key, str(error)) from None
        except (ssl.SSLError, ValueError) as error:  # UnicodeDecodeError is a ValueError
            raise ConfigError(
                key, f"{value} is not a PEM CA bundle ({one_line(str(error), 120)})"
            ) from None
    return value


def printable(most: int, *, empty: bool) -> Check:
    def check(key: str, value: str) -> str:
        if not value and empty:
            return value
        if not value or not value.isascii() or not value.isprintable() or len(value) > most:
            raise ConfigError(key, f"must be printable ASCII, 1-{most} characters")
        return value

    return check


def kaniko_rule(rule: Callable[[str, Any], Any], *, optional: bool = False) -> Check:
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


def git_context(key: str, value: str) -> str:
    if value and not value.startswith("git://"):
        raise ConfigError(key, "must be a git:// context (git://host/repo.git#ref#commit) or empty")
    return cast(str, kaniko_rule(kaniko.check_git_context, optional=True)(key, value))


def sub_path(key: str, value: str) -> str:
    if value.startswith("/") or ".." in value.split("/"):
        raise ConfigError(key, f"{value!r} must be a relative path inside the context")
    return cast(str, kaniko_rule(kaniko.check_relative_path, optional=True)(key, value))


_SLACK_ID_RE = re.compile(r"[A-Z0-9]{2,20}")


def slack_ids(key: str, value: tuple[str, ...]) -> tuple[str, ...]:
    for item in value:
        if _SLACK_ID_RE.fullmatch(item) is None:
            raise ConfigError(key, f"{item!r} is not a Slack ID (e.g. U024BE7LH or C024BE91L)")
    return value


def optional_slack_id(key: str, value: str) -> str:
    if value:
        slack_ids(key, (value,))
    return value


def api_base_url(key: str, value: str) -> str:
    try:
        parts = parse_url(value)
    except ValueRefusedError:
        parts = None
    if parts is None or not value.endswith("/"):
        raise ConfigError(key, f"must be an http(s) URL ending in '/', got {redact_url(value)!r}")
    return value


def token(prefix: str) -> Check:
    def check(key: str, value: str) -> str:
        if value and not value.startswith(prefix):
            raise ConfigError(key, f"must start with {prefix!r} (value not shown)")
        return value

    return check


def listen(key: str, value: str) -> str:
    try:
        parse_listen_address(value)
    except ValueRefusedError as error:
        raise ConfigError(key, str(error)) from None
    return value


MAX_ALLOWED_HOSTS = 32
"""Host names in ``web.allowed_hosts`` at most: an Ingress or two, not a directory."""


def host_names(key: str, value: tuple[str, ...]) -> tuple[str, ...]:
    """DNS names or IP addresses without a port or scheme, canonical (lower case, no
    trailing dot); what a request's ``Host`` is compared with."""
    if len(value) > MAX_ALLOWED_HOSTS:
        raise ConfigError(key, f"lists more than {MAX_ALLOWED_HOSTS} names")
    names = []
    for item in value:
        try:
            names.append(parse_host_name(item, port=False))
        except ValueRefusedError as error:
            raise ConfigError(
                key,
                f"{error} (a name as the Ingress serves it, e.g. releasebot.example.com: "
                "no scheme, port, path or wildcard)",
            ) from None
    return tuple(names)


def listen_or_empty(key: str, value: str) -> str:
    """``HOST:PORT``, or empty for "the same server as another setting says"."""
    return value if value == "" else listen(key, value)


def one_of(*choices: str) -> Check:
    def check(key: str, value: str) -> str:
        if value not in choices:
            raise ConfigError(key, f"must be one of {', '.join(choices)}, got {value!r}")
        return value

    return check


def label_selector(key: str, value: str) -> str:
    """A Kubernetes label selector (``kubectl -l`` syntax); empty selects every node."""
    LabelSelector.parse(value, key=key)
    return value


_QUALIFIED_NAME_RE = re.compile(
    r"(?:[a-z0-9](?:[-a-z0-9.]{0,251}[a-z0-9])?/)?[A-Za-z0-9](?:[-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?"
)


def annotation_key(key: str, value: str) -> str:
    """An annotation name (``prefix/name``) that is releasebot's to write on Nodes."""
    if _QUALIFIED_NAME_RE.fullmatch(value) is None or len(value) > 253 + 1 + 63:
        raise ConfigError(key, f"{value!r} is not an annotation name (e.g. example.com/ready)")
    if value == GATE_VERSION_ANNOTATION or value.startswith(FLUO_PREFIX):
        raise ConfigError(key, f"{value!r} is not releasebot's to set")
    return value


_FINGERPRINT_RE = re.compile(r"[0-9A-F]{40}")


def fingerprint(key: str, value: str) -> str:
    if _FINGERPRINT_RE.fullmatch(value) is None:
        raise ConfigError(key, "must be a 40-character upper-case hex OpenPGP fingerprint")
    return value
