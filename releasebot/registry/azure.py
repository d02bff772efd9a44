"""ACR tokens from the pod's Azure identity: azure-identity, then ACR's documented
``/oauth2/exchange`` (``registry.auth = "azure"``).

Why it exists: ACR takes an ACR refresh token as the password of the user
``00000000-0000-0000-0000-000000000000``. azure-identity's ``WorkloadIdentityCredential``
(``AZURE_CLIENT_ID``, ``AZURE_TENANT_ID``, ``AZURE_FEDERATED_TOKEN_FILE`` and
``AZURE_AUTHORITY_HOST``, written into the pod by the Azure Workload Identity webhook)
buys a Microsoft Entra access token; the registry's ``POST /oauth2/exchange`` trades it for
a refresh token (about three hours). Both go through a ``BoundedSession``.

What it deliberately does not do: verify the refresh token's signature (the registry does;
its ``exp`` claim is read only to know when to ask again), or follow redirects.
"""

from __future__ import annotations

import base64
import binascii
import os
from datetime import UTC, datetime, timedelta

import requests

from releasebot.domain.shared.errors import ConfigError, RegistryAuthError, RegistryUnavailableError
from releasebot.edge.json import JsonRefusedError, decode_json
from releasebot.edge.text import one_line
from releasebot.registry.credentials import MAX_TOKEN_CHARS, Token, TokenFetcher
from releasebot.registry.tokenhttp import (
    MAX_TOKEN_ANSWER_BYTES,
    AnswerTooLargeError,
    BoundedSession,
)

ACR_USER = "00000000-0000-0000-0000-000000000000"
"""The registry user name ACR expects with a refresh token (its documented null GUID)."""

SCOPE = "https://management.azure.com/.default"
"""The Entra scope ACR's ``/oauth2/exchange`` documents for the access token it takes."""


def azure_fetcher(registry_url: str, verify: bool | str, timeout: timedelta) -> TokenFetcher:
    """A fetcher of ACR refresh tokens for the registry at ``registry_url``
    (``https://name.azurecr.io``). Raises ``ConfigError`` when azure-identity is not
    installed."""
    try:
        from azure.core.exceptions import ClientAuthenticationError, ServiceRequestError
        from azure.core.pipeline.transport import RequestsTransport
        from azure.identity import CredentialUnavailableError, WorkloadIdentityCredential
    except ImportError:
        raise ConfigError(
            "registry.auth", "azure needs azure-identity: install releasebot[azure]"
        ) from None
    seconds = timeout.total_seconds()
    host = registry_url.split("://", 1)[1]
    session = BoundedSession()
    found: list[WorkloadIdentityCredential] = []

    def aad_token() -> tuple[str, str]:
        """The Entra access token and the tenant it is for."""
        try:
            if not found:
                transport = RequestsTransport(
                    session=session,
                    session_owner=False,
                    connection_timeout=seconds,
                    read_timeout=seconds,
                )
                found.append(WorkloadIdentityCredential(transport=transport))
            credential = found[0]
            return credential.get_token(SCOPE).token, os.environ.get("AZURE_TENANT_ID", "")
        except ValueError as error:  # the webhook's variables are missing
            raise RegistryAuthError(
                f"azure: no workload identity: {one_line(error)}; label releasebot's pod "
                "azure.workload.identity/use=true and annotate its service account with "
                "the client ID (see docs/operations.md)"
            ) from None
        except CredentialUnavailableError as error:
            raise RegistryAuthError(f"azure: no workload identity: {one_line(error)}") from None
        except ClientAuthenticationError as error:
            raise _denied(error) from None
        except ServiceRequestError as error:
            raise RegistryUnavailableError(
                f"azure: Microsoft Entra ID is unreachable: {one_line(error)}"
            ) from None

    def fetch() -> Token:
        access, tenant = aad_token()
        form = {"grant_type": "access_token", "service": host, "access_token": access}
        if tenant:
            form["tenant"] = tenant
        try:
            answer = session.post(
                f"{registry_url}/oauth2/exchange", data=form, timeout=seconds, verify=verify
            )
        except AnswerTooLargeError:
            raise RegistryAuthError(
                f"azure: {host}/oauth2/exchange answered more than {MAX_TOKEN_ANSWER_BYTES} "
                "bytes; a token answer is a few KB"
            ) from None
        except (requests.exceptions.ConnectionError, requests.exceptions.Timeout) as error:
            raise RegistryUnavailableError(
                f"azure: {host}/oauth2/exchange is unreachable ({type(error).__name__})"
            ) from None
        except requests.exceptions.RequestException as error:
            raise RegistryAuthError(
                f"azure: {host}/oauth2/exchange failed ({type(error).__name__})"
            ) from None
        if answer.status_code in (401, 403):
            raise RegistryAuthError(
                f"azure: {host} refused the Entra token ({answer.status_code}): grant "
                "releasebot's managed identity AcrPush on the registry; see docs/operations.md"
            )
        if answer.status_code >= 500 or answer.status_code == 429:
            raise RegistryUnavailableError(
                f"azure: {host}/oauth2/exchange answered {answer.status_code}"
            )
        if answer.status_code != 200:
            raise RegistryAuthError(f"azure: {host}/oauth2/exchange answered {answer.status_code}")
        return Token(ACR_USER, _refresh_token(answer.content), _expiry(answer.content))

    return fetch


def _refresh_token(body: bytes) -> str:
    try:
        document = decode_json(body)
    except JsonRefusedError:
        raise RegistryAuthError("azure: /oauth2/exchange answered no JSON") from None
    token = document.get("refresh_token") if isinstance(document, dict) else None
    if not isinstance(token, str) or not token or len(token) > MAX_TOKEN_CHARS:
        raise RegistryAuthError("azure: /oauth2/exchange answered no refresh token")
    return token


def _expiry(body: bytes) -> datetime:
    """The refresh token's ``exp`` claim (read, not verified: only to know when to ask
    again); three hours from now when it has none, ACR's documented lifetime."""
    token = _refresh_token(body)
    parts = token.split(".")
    if len(parts) == 3:
        try:
            padded = parts[1] + "=" * (-len(parts[1]) % 4)
            claims = decode_json(base64.urlsafe_b64decode(padded))
            exp = claims.get("exp") if isinstance(claims, dict) else None
            if isinstance(exp, int) and not isinstance(exp, bool) and 0 < exp < 2**34:
                return datetime.fromtimestamp(exp, UTC)
        except (binascii.Error, JsonRefusedError, ValueError):
            pass
    return datetime.now(UTC) + timedelta(hours=3)


def _denied(error: Exception) -> RegistryAuthError:
    said = one_line(getattr(error, "message", None) or error)
    if "AADSTS700024" in said or "expired" in said.lower():
        return RegistryAuthError(
            f"azure: Entra ID refused the federated token as expired ({said}): check the "
            "node's clock and that the projected service account token is refreshed"
        )
    return RegistryAuthError(
        f"azure: Entra ID denied the workload identity ({said}): create the federated "
        "credential for releasebot's service account (issuer, subject); see docs/operations.md"
    )
