"""Registry credentials from a Docker ``config.json`` (the Secret Kaniko mounts too).

Only ``auth`` and ``username``/``password`` entries are read; credential helpers and
identity tokens are refused with a message naming the file (never a secret).
"""

from __future__ import annotations

import base64
import binascii
from urllib.parse import urlsplit

from releasebot.domain.shared.errors import RegistryAuthError
from releasebot.edge.json import JsonRefusedError, decode_json
from releasebot.edge.parse import ValueRefusedError, read_regular_file

MAX_DOCKER_CONFIG_BYTES = 1024 * 1024
"""A Docker config.json holds a few credentials; a bigger file (or a FIFO) is refused."""


def read_docker_config(path: str, host: str) -> str | None:
    """The base64 ``user:password`` for ``host`` in a Docker ``config.json``; ``None`` when
    it has no entry for the host (anonymous access).

    Keys may be a bare host or a URL (``https://host/v1/``). Raises ``RegistryAuthError``
    naming the file (never a secret) when it cannot be used.
    """
    try:
        body = read_regular_file(path, MAX_DOCKER_CONFIG_BYTES)
    except ValueRefusedError as exc:
        raise RegistryAuthError(
            f"registry {host}: cannot read docker config {path}: {exc}"
        ) from None
    try:
        document = decode_json(body)
    except JsonRefusedError as exc:
        raise RegistryAuthError(f"registry {host}: docker config {path} is not JSON") from exc
    auths = document.get("auths") if isinstance(document, dict) else None
    if not isinstance(auths, dict):
        return None
    for key, entry in auths.items():
        if not isinstance(key, str) or _config_host(key) != host.lower():
            continue
        if not isinstance(entry, dict):
            break
        auth, username, password = entry.get("auth"), entry.get("username"), entry.get("password")
        if isinstance(auth, str) and auth:
            try:
                decoded = base64.b64decode(auth, validate=True).decode("utf-8")
            except (binascii.Error, UnicodeDecodeError):
                decoded = ""
            if ":" not in decoded:
                raise RegistryAuthError(
                    f"registry {host}: docker config {path}: auths[{key!r}].auth is not "
                    "base64 of user:password"
                )
            return encode_basic(*decoded.split(":", 1))
        if isinstance(username, str) and isinstance(password, str):
            return encode_basic(username, password)
        if entry.get("identitytoken"):
            raise RegistryAuthError(
                f"registry {host}: docker config {path}: identitytoken is not supported; "
                "use auth or username/password"
            )
        break
    return None


def _config_host(key: str) -> str:
    if "://" in key:
        return urlsplit(key).netloc.lower()
    return key.split("/", 1)[0].lower()


def encode_basic(username: str, password: str) -> str:
    """The base64 ``user:password`` token of HTTP basic auth (without the scheme)."""
    return base64.b64encode(f"{username}:{password}".encode()).decode("ascii")
