"""Registry credentials: static ones, and short-lived cloud tokens cached until near expiry.

Why it exists: ECR, Artifact Registry and ACR take no lasting password; the pod's workload
identity buys a token that lasts hours (ECR 12 h, a Google access token 1 h, an ACR refresh
token 3 h). ``OrasRegistry`` asks ``RegistryCredentials.basic()`` for the ``user:password``
to answer a challenge with, and calls ``renew`` once when the registry refused what it sent,
so a long ``releasebot run`` keeps working across any number of expiries. The per-cloud
fetchers (``registry/ecr.py``, ``gcp.py``, ``azure.py``) obtain a ``Token``; this module
decides when to ask again, and judges what came back (``check_token``).

What it deliberately does not do: talk to any cloud, or log. A token's password never
appears in a ``repr``, a message or an exception chain (``Token.__repr__`` hides it).
"""

from __future__ import annotations

import base64
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Protocol

from releasebot.domain.shared.errors import RegistryAuthError

REFRESH_MARGIN = timedelta(minutes=5)
"""A cached token is replaced this long before it expires (or at half its lifetime when that
is shorter). Five minutes outlasts one cycle's registry calls (a 30 s timeout, retried), so
a token is never sent just as it dies, and absorbs the few minutes a node's clock may be
off from the cloud's; it is a twelfth of the shortest lifetime here (Google's hour)."""

MAX_LIFETIME = timedelta(hours=12)
"""The longest a token is kept, whatever its endpoint claims: ECR's own lifetime, the
longest of the three clouds. A later expiry is believed only up to this."""

MAX_TOKEN_CHARS = 16 * 1024
"""A registry password longer than this is not a token (ECR's is about 2,000 characters,
a Google access token a few hundred, an ACR refresh token a JWT of about 2,000)."""


class RegistryCredentials(Protocol):
    """What ``OrasRegistry`` sends: the base64 ``user:password`` of basic auth, or ``None``
    for anonymous access."""

    @property
    def kind(self) -> str:
        """Shown in ``repr`` and errors: ``basic``, ``anonymous``, ``ecr``, ``gcp``, ``azure``."""
        ...

    def basic(self) -> str | None:
        """The credentials to send now (a fresh token when the cached one is near expiry)."""
        ...

    def renew(self, refused: str) -> str | None:
        """The registry refused ``refused``: new credentials to try once, or ``None`` when
        nothing new can be had (static credentials)."""
        ...


@dataclass(frozen=True)
class StaticCredentials:
    """A password from the settings or a Docker ``config.json``: never renewed."""

    encoded: str | None = field(repr=False)

    @property
    def kind(self) -> str:
        return "anonymous" if self.encoded is None else "basic"

    def basic(self) -> str | None:
        return self.encoded

    def renew(self, refused: str) -> str | None:
        return None


@dataclass(frozen=True)
class Token:
    """A short-lived registry login: ``username``, the secret ``password`` and when the
    issuer says it expires (aware UTC)."""

    username: str
    password: str = field(repr=False)
    expires_at: datetime

    def encoded(self) -> str:
        return base64.b64encode(f"{self.username}:{self.password}".encode()).decode("ascii")


TokenFetcher = Callable[[], Token]
"""Obtains a new token from the cloud; raises ``RegistryAuthError`` (a human must fix
something) or ``RegistryUnavailableError`` (the endpoint could not answer now)."""


def check_token(cloud: str, token: Token, now: datetime) -> Token:
    """``token`` if it is usable at ``now``, its expiry capped at ``MAX_LIFETIME``; raises
    ``RegistryAuthError`` naming what is wrong (never the token)."""
    password = token.password
    if not password or len(password) > MAX_TOKEN_CHARS or not password.isascii():
        raise RegistryAuthError(f"{cloud}: the token endpoint sent no usable registry token")
    if not password.isprintable() or any(c.isspace() for c in password):
        raise RegistryAuthError(f"{cloud}: the token endpoint sent no usable registry token")
    if not token.username or ":" in token.username or not token.username.isprintable():
        raise RegistryAuthError(f"{cloud}: the token endpoint sent no usable registry user")
    if token.expires_at.tzinfo is None:
        raise RegistryAuthError(f"{cloud}: the token's expiry has no time zone")
    if token.expires_at <= now:
        raise RegistryAuthError(
            f"{cloud}: the token endpoint handed out a token that expired at "
            f"{token.expires_at:%Y-%m-%dT%H:%M:%SZ}, and this machine's clock says "
            f"{now:%Y-%m-%dT%H:%M:%SZ}: check the node's time synchronisation"
        )
    if token.expires_at > now + MAX_LIFETIME:
        return Token(token.username, password, now + MAX_LIFETIME)
    return token


def refresh_at(fetched_at: datetime, expires_at: datetime) -> datetime:
    """When a token fetched at ``fetched_at`` is replaced: ``REFRESH_MARGIN`` before it
    expires, or half-way through its life when that is shorter than twice the margin."""
    margin = min(REFRESH_MARGIN, (expires_at - fetched_at) / 2)
    return expires_at - margin


class CachedTokenCredentials:
    """``RegistryCredentials`` from a ``TokenFetcher``: one token at a time, fetched on
    first use, again at ``refresh_at`` (on ``clock``), and at once when the registry refuses
    it. Thread-safe: concurrent callers wait for one fetch."""

    def __init__(self, kind: str, fetch: TokenFetcher, clock: Callable[[], datetime]) -> None:
        self._kind = kind
        self._fetch = fetch
        self._clock = clock
        self._lock = threading.Lock()
        self._token: Token | None = None
        self._refresh_at: datetime | None = None
        self.fetch_count = 0
        """Tokens obtained so far (for tests and the benchmark; never the token)."""

    @property
    def kind(self) -> str:
        return self._kind

    def __repr__(self) -> str:
        expires = "none" if self._token is None else f"{self._token.expires_at:%H:%M:%SZ}"
        return f"CachedTokenCredentials({self.kind!r}, expires={expires})"

    def basic(self) -> str | None:
        with self._lock:
            now = self._clock()
            if self._token is None or self._refresh_at is None or now >= self._refresh_at:
                self._replace(now)
            assert self._token is not None
            return self._token.encoded()

    def renew(self, refused: str) -> str | None:
        with self._lock:
            if self._token is not None and self._token.encoded() != refused:
                return self._token.encoded()  # another thread renewed it meanwhile
            self._replace(self._clock())
            assert self._token is not None
            fresh = self._token.encoded()
            return None if fresh == refused else fresh

    def _replace(self, now: datetime) -> None:
        token = check_token(self.kind, self._fetch(), now)
        self.fetch_count += 1
        self._token = token
        self._refresh_at = refresh_at(now, token.expires_at)
