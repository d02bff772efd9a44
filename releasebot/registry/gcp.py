"""Artifact Registry / GCR tokens from the pod's Google identity, through google-auth
(``registry.auth = "gcp"``).

Why it exists: Artifact Registry takes a Google OAuth2 access token as the password of the
user ``oauth2accesstoken``. google-auth's Application Default Credentials find the pod's
identity (GKE Workload Identity's metadata server, or a credentials file), fetch the token
and tell its expiry (an hour); releasebot writes no OAuth of its own. google-auth sends
through a ``BoundedSession`` (``registry/tokenhttp.py``), so no answer is read past 64 KB.

What it deliberately does not do: cache (``CachedTokenCredentials`` does) or quote the
metadata server's answer beyond a trimmed message.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from releasebot.domain.shared.errors import ConfigError, RegistryAuthError, RegistryUnavailableError
from releasebot.edge.text import one_line
from releasebot.registry.credentials import Token, TokenFetcher
from releasebot.registry.tokenhttp import BoundedSession

GCP_USER = "oauth2accesstoken"
"""The registry user name Artifact Registry and GCR expect with an access token."""

SCOPE = "https://www.googleapis.com/auth/cloud-platform"
"""The scope Artifact Registry documents for access tokens."""


def gcp_fetcher(timeout: timedelta) -> TokenFetcher:
    """A fetcher of access tokens through Application Default Credentials. Raises
    ``ConfigError`` when google-auth is not installed."""
    try:
        import google.auth
        import google.auth.exceptions
        import google.auth.transport.requests
    except ImportError:
        raise ConfigError(
            "registry.auth", "gcp needs google-auth: install releasebot[gcp]"
        ) from None
    seconds = timeout.total_seconds()

    class TimedRequest(google.auth.transport.requests.Request):
        """google-auth's transport with releasebot's timeout (its own default is 120 s)."""

        def __call__(self, *args: Any, **kwargs: Any) -> Any:
            if kwargs.get("timeout") is None:
                kwargs["timeout"] = seconds
            return super().__call__(*args, **kwargs)  # type: ignore[no-untyped-call]

    timed = TimedRequest(session=BoundedSession())
    found: list[Any] = []

    def fetch() -> Token:
        try:
            if not found:
                credentials, _ = google.auth.default(scopes=[SCOPE], request=timed)
                found.append(credentials)
            credentials = found[0]
            credentials.refresh(timed)
            token, expiry = credentials.token, credentials.expiry
        except google.auth.exceptions.DefaultCredentialsError:
            raise RegistryAuthError(
                "gcp: no Google identity found: enable GKE Workload Identity for the node "
                "pool and bind releasebot's service account (see docs/operations.md)"
            ) from None
        except google.auth.exceptions.TransportError as error:
            raise RegistryUnavailableError(
                f"gcp: the metadata server could not be reached or read: {one_line(error)}"
            ) from None
        except google.auth.exceptions.RefreshError as error:
            raise _refused(error) from None
        except google.auth.exceptions.GoogleAuthError as error:
            raise RegistryAuthError(
                f"gcp: cannot obtain an access token: {one_line(error)}"
            ) from None
        except (KeyError, TypeError, ValueError, OverflowError):  # a malformed token answer
            raise RegistryAuthError("gcp: the token answer is malformed") from None
        if not isinstance(token, str) or not isinstance(expiry, datetime):
            raise RegistryAuthError("gcp: the token answer has no access token or expiry")
        # google-auth keeps expiries as naive UTC datetimes.
        expires_at = expiry.replace(tzinfo=UTC) if expiry.tzinfo is None else expiry
        return Token(GCP_USER, token, expires_at.astimezone(UTC))

    return fetch


def _refused(error: Exception) -> RegistryAuthError:
    said = one_line(error)
    if "expired" in said.lower() or "clock" in said.lower():
        return RegistryAuthError(
            f"gcp: the token was refused as expired ({said}): check the node's clock"
        )
    return RegistryAuthError(
        f"gcp: the metadata server refused a token ({said}): bind releasebot's Kubernetes "
        "service account to a Google service account (roles/iam.workloadIdentityUser) "
        "that has Artifact Registry Writer; see docs/operations.md"
    )
