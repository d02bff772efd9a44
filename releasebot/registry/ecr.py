"""ECR registry tokens from the pod's AWS identity, through boto3 (``registry.auth = "ecr"``).

Why it exists: an ECR password is the 12-hour token of ``ecr:GetAuthorizationToken``. boto3
finds the pod's identity the way every AWS tool does (IRSA's web identity token file, EKS
Pod Identity's container credentials endpoint, the environment, instance metadata), signs
the call and parses the answer; releasebot writes no request signing of its own. The
endpoint can be moved with AWS's own ``AWS_ENDPOINT_URL_ECR`` (a VPC endpoint, or an
emulator in tests).

What it deliberately does not do: cache (``credentials.CachedTokenCredentials`` does),
retry more than boto3's two attempts (the cycle retries), or quote AWS's answer beyond its
error code and a trimmed message. boto3 reads the whole answer: an ECR answer is a few KB,
and the fields read from it are bounded and checked here and in ``check_token``.
"""

from __future__ import annotations

import base64
import binascii
import re
from datetime import UTC, datetime, timedelta
from typing import Any

from releasebot.domain.shared.errors import ConfigError, RegistryAuthError, RegistryUnavailableError
from releasebot.edge.text import one_line
from releasebot.registry.credentials import MAX_TOKEN_CHARS, Token, TokenFetcher

ECR_HOST = re.compile(
    r"(?P<account>[0-9]{12})\.dkr[.-]ecr(?:-fips)?\.(?P<region>[a-z0-9-]+)"
    r"\.(?:amazonaws\.com(?:\.cn)?|on\.aws)"
)
"""An ECR registry's host name (IPv4 ``.dkr.ecr.…amazonaws.com``, dual-stack
``.dkr-ecr.….on.aws``): the account that owns it and its region."""

_DENIED = {
    "AccessDenied",
    "AccessDeniedException",
    "UnauthorizedOperation",
    "UnrecognizedClientException",
    "InvalidClientTokenId",
    "InvalidIdentityToken",
    "IDPRejectedClaim",
}
_EXPIRED = {"ExpiredToken", "ExpiredTokenException", "RequestExpired", "InvalidSignatureException"}


def ecr_fetcher(host: str, region: str, timeout: timedelta) -> TokenFetcher:
    """A fetcher of ECR tokens for ``host``: the region is ``region``, else the host's
    (``<account>.dkr.ecr.<region>.amazonaws.com``), else boto3's own (``AWS_REGION``).
    Raises ``ConfigError`` when boto3 is not installed."""
    try:
        import boto3.session
        import botocore.config
        import botocore.exceptions
    except ImportError:
        raise ConfigError("registry.auth", "ecr needs boto3: install releasebot[aws]") from None
    found = ECR_HOST.fullmatch(host.split(":", 1)[0])
    account = found.group("account") if found else None
    region = region or (found.group("region") if found else "")
    seconds = timeout.total_seconds()
    config = botocore.config.Config(
        connect_timeout=seconds,
        read_timeout=seconds,
        retries={"mode": "standard", "max_attempts": 2},
        user_agent_extra="releasebot",
    )

    clients: list[Any] = []  # one client, made on first use: its credentials refresh

    def fetch() -> Token:
        try:
            if not clients:
                clients.append(
                    boto3.session.Session().client("ecr", region_name=region or None, config=config)
                )
            answer = clients[0].get_authorization_token(
                **({"registryIds": [account]} if account else {})
            )
        except botocore.exceptions.NoRegionError:
            raise RegistryAuthError(
                "ecr: no AWS region: set registry.aws_region (or AWS_REGION) when the "
                "registry's host does not name it"
            ) from None
        except (
            botocore.exceptions.NoCredentialsError,
            botocore.exceptions.PartialCredentialsError,
        ):
            raise RegistryAuthError(
                "ecr: no AWS credentials found: give releasebot's service account an IAM "
                "role (IRSA's eks.amazonaws.com/role-arn annotation or an EKS Pod Identity "
                "association); see docs/operations.md"
            ) from None
        except botocore.exceptions.ClientError as error:
            raise _client_error(error.response, error.operation_name) from None
        except (
            botocore.exceptions.ConnectionError,
            botocore.exceptions.HTTPClientError,
        ) as error:
            raise RegistryUnavailableError(
                f"ecr: the AWS endpoint is unreachable: {one_line(type(error).__name__)} "
                f"({one_line(error)})"
            ) from None
        except botocore.exceptions.BotoCoreError as error:  # credential endpoints, config
            raise RegistryAuthError(
                f"ecr: cannot obtain AWS credentials: {one_line(error)}"
            ) from None
        return parse_authorization(answer)

    return fetch


def parse_authorization(answer: Any) -> Token:
    """The token in a ``GetAuthorizationToken`` answer (its first ``authorizationData``):
    ``authorizationToken`` is base64 ``AWS:<password>``, ``expiresAt`` a datetime."""
    data = answer.get("authorizationData") if isinstance(answer, dict) else None
    if not isinstance(data, list) or not data or not isinstance(data[0], dict):
        raise RegistryAuthError("ecr: GetAuthorizationToken answered no authorization data")
    encoded, expires_at = data[0].get("authorizationToken"), data[0].get("expiresAt")
    if not isinstance(encoded, str) or len(encoded) > 2 * MAX_TOKEN_CHARS:
        raise RegistryAuthError("ecr: GetAuthorizationToken answered no usable token")
    try:
        decoded = base64.b64decode(encoded, validate=True).decode("ascii")
    except (binascii.Error, UnicodeDecodeError):
        raise RegistryAuthError(
            "ecr: the authorization token is not base64 of user:password"
        ) from None
    username, colon, password = decoded.partition(":")
    if not colon:
        raise RegistryAuthError("ecr: the authorization token is not base64 of user:password")
    if not isinstance(expires_at, datetime):
        raise RegistryAuthError("ecr: GetAuthorizationToken answered no expiry")
    if expires_at.tzinfo is None:  # botocore parses timestamps as aware; be sure anyway
        expires_at = expires_at.replace(tzinfo=UTC)
    return Token(username, password, expires_at.astimezone(UTC))


def _client_error(response: Any, operation: str) -> RegistryAuthError | RegistryUnavailableError:
    error = response.get("Error", {}) if isinstance(response, dict) else {}
    code = one_line(error.get("Code", ""), 60) if isinstance(error, dict) else ""
    message = one_line(error.get("Message", "")) if isinstance(error, dict) else ""
    said = f"{operation}: {code} {message}".strip()
    if code in _EXPIRED or "expired" in message.lower() or "signature" in message.lower():
        return RegistryAuthError(
            f"ecr: AWS refused the request as expired ({said}): check the node's clock "
            "(time sync) and that the projected service account token is being refreshed"
        )
    metadata = response.get("ResponseMetadata", {}) if isinstance(response, dict) else {}
    status = metadata.get("HTTPStatusCode") if isinstance(metadata, dict) else None
    if code in _DENIED or status in (401, 403):
        return RegistryAuthError(
            f"ecr: AWS denied it ({said}): allow ecr:GetAuthorizationToken to releasebot's "
            "role, and let its trust policy accept the service account; see docs/operations.md"
        )
    if code in ("ThrottlingException", "ServiceUnavailable", "InternalFailure"):
        return RegistryUnavailableError(f"ecr: AWS could not answer now ({said})")
    return RegistryAuthError(f"ecr: AWS refused it ({said})")
