"""Local emulators of the clouds' token endpoints, and a registry that requires their tokens.

- ``ecr_emulator``: moto in server mode (``ThreadedMotoServer``, real HTTP, botocore's real
  signing and parsing). moto's ``GetAuthorizationToken`` answers the same password for
  ever (``<account>-auth-token``) with ``expiresAt`` fixed in 2015, which no real ECR does;
  its handler is replaced, in this process, by one that answers as ECR does: a new random
  password per call, base64 ``AWS:<password>``, expiring ``lifetime`` after issue. Denial is
  moto's own IAM enforcement (``/moto-api/reset-auth``): a user without a policy is refused.
- ``gcp_metadata``: the GCE metadata server as google-auth reaches it (``GCE_METADATA_HOST``,
  ``GCE_METADATA_IP``): the ``Metadata-Flavor: Google`` ping, the project ID, and
  ``/computeMetadata/v1/instance/service-accounts/default/token``.
- ``azure_endpoints``: Microsoft Entra ID's token endpoint as azure-identity's
  ``WorkloadIdentityCredential`` calls it (over TLS: azure-identity refuses an http
  authority), checking the federated assertion and client ID; and ACR's
  ``/oauth2/exchange``, served by the token gate.
- ``token_gate``: the REAL registry (Debian's docker-registry) behind a proxy that answers
  401 with a ``Basic`` challenge unless the request carries a user and password one of the
  emulators issued and that has not expired (on this machine's clock); or, with
  ``bearer``, as Artifact Registry and ACR do: a ``Bearer`` challenge whose token service
  takes the cloud token as basic credentials. docker-registry's own htpasswd cannot take a
  password that changes per call, hence the proxy.

Every token issued goes into a ``TokenBook``, so a test can revoke one or read how many
were issued.
"""

from __future__ import annotations

import base64
import json
import secrets
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

import httpx

from tests.support.servers import QuietHandler, serving

ECR_ACCOUNT = "123456789012"


@dataclass
class TokenBook:
    """Every (user, password) an emulator issued, with its expiry; thread-safe."""

    issued: dict[tuple[str, str], datetime] = field(default_factory=dict)
    refused: int = 0
    accepted: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def issue(self, user: str, lifetime: timedelta) -> tuple[str, datetime]:
        password = secrets.token_urlsafe(24)
        expires_at = datetime.now(UTC) + lifetime
        with self.lock:
            self.issued[(user, password)] = expires_at
        return password, expires_at

    def valid(self, user: str, password: str) -> bool:
        with self.lock:
            expires_at = self.issued.get((user, password))
            ok = expires_at is not None and datetime.now(UTC) < expires_at
            if ok:
                self.accepted += 1
            else:
                self.refused += 1
            return ok

    def revoke_all(self) -> None:
        with self.lock:
            self.issued.clear()

    def count(self, user: str) -> int:
        with self.lock:
            return sum(1 for issued_user, _ in self.issued if issued_user == user)

    def passwords(self) -> list[str]:
        with self.lock:
            return [password for _, password in self.issued]


# -- the registry that requires a token ---------------------------------------------------

_HOP = {"connection", "keep-alive", "transfer-encoding", "content-length", "date", "server"}


@dataclass
class Gate:
    host: str
    book: TokenBook
    exchange: Any = None
    """``callable(form) -> (status, body)`` serving ``POST /oauth2/exchange`` (ACR)."""
    bearer: bool = False
    """Answer as Artifact Registry and ACR do: a ``Bearer`` challenge naming ``/token``,
    which takes the live cloud token as basic credentials and hands out a registry token
    (valid until ``revoke_bearer``)."""
    bearer_tokens: set[str] = field(default_factory=set)
    token_requests: int = 0

    def revoke_bearer(self) -> None:
        self.bearer_tokens.clear()

    def repository(self, name: str) -> str:
        return f"{self.host}/{name}"


@contextmanager
def token_gate(upstream_base_url: str, book: TokenBook) -> Iterator[Gate]:
    """The registry at ``upstream_base_url`` behind a proxy that requires a live token."""
    client = httpx.Client(base_url=upstream_base_url, timeout=10.0)
    gate = Gate("", book)

    class Handler(QuietHandler):
        def do_GET(self) -> None:
            if gate.bearer and self.path.startswith("/token?"):
                self._token()
                return
            self._forward()

        def do_HEAD(self) -> None:
            self._forward()

        def do_PUT(self) -> None:
            self._forward()

        def _token(self) -> None:
            gate.token_requests += 1
            if not self._basic_ok():
                self.answer(401, {"Content-Type": "application/json"}, b'{"errors":[]}')
                return
            token = "registry-" + secrets.token_urlsafe(16)
            gate.bearer_tokens.add(token)
            body = json.dumps({"token": token, "expires_in": 300}).encode()
            self.answer(200, {"Content-Type": "application/json"}, body)

        def do_POST(self) -> None:
            if self.path == "/oauth2/exchange" and gate.exchange is not None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                form = {k: v[0] for k, v in parse_qs(body.decode()).items()}
                status, answer = gate.exchange(form)
                self.answer(status, {"Content-Type": "application/json"}, answer)
                return
            self._forward()

        def do_DELETE(self) -> None:
            self._forward()

        def _authorized(self) -> bool:
            if gate.bearer:
                header = self.headers.get("Authorization", "")
                return header.startswith("Bearer ") and header[7:] in gate.bearer_tokens
            return self._basic_ok()

        def _basic_ok(self) -> bool:
            header = self.headers.get("Authorization", "")
            if not header.startswith("Basic "):
                return False
            try:
                user, _, password = base64.b64decode(header[6:]).decode().partition(":")
            except ValueError:
                return False
            return book.valid(user, password)

        def _forward(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            if not self._authorized():
                challenge = {"WWW-Authenticate": 'Basic realm="cloud"'}
                if gate.bearer:
                    realm = f"http://{gate.host}/token"
                    scope = "repository:nvidia/driver:pull,push"  # not checked here
                    challenge = {
                        "WWW-Authenticate": f'Bearer realm="{realm}",service="cloud",'
                        f'scope="{scope}"'
                    }
                error = b'{"errors":[{"code":"UNAUTHORIZED","message":"authentication required"}]}'
                self.answer(401, {**challenge, "Content-Type": "application/json"}, error)
                return
            headers = {
                k: v
                for k, v in self.headers.items()
                if k.lower() not in _HOP | {"host", "authorization"}
            }
            answer = client.request(self.command, self.path, headers=headers, content=body)
            out = {k: v for k, v in answer.headers.items() if k.lower() not in _HOP}
            for key in [k for k in out if k.lower() == "location"]:
                out[key] = out[key].replace(upstream_base_url, f"http://{gate.host}")
            length = int(answer.headers.get("Content-Length") or len(answer.content))
            content = b"" if self.command == "HEAD" else answer.content
            self.answer(answer.status_code, out, content, length=length)

    try:
        with serving(Handler) as host:
            gate.host = host
            yield gate
    finally:
        client.close()


# -- AWS: moto ------------------------------------------------------------------------------


@dataclass
class EcrEmulator:
    url: str
    book: TokenBook
    lifetime: timedelta

    def env(self) -> dict[str, str]:
        """What a pod with an AWS identity has, pointed at the emulator."""
        return {
            "AWS_ENDPOINT_URL_ECR": self.url,
            "AWS_ACCESS_KEY_ID": "AKIAEMULATOREXAMPLE",
            "AWS_SECRET_ACCESS_KEY": "emulator-secret",
            "AWS_REGION": "us-east-1",
            "AWS_CONFIG_FILE": "/nonexistent/aws-config",
            "AWS_SHARED_CREDENTIALS_FILE": "/nonexistent/aws-credentials",
            "AWS_EC2_METADATA_DISABLED": "true",
        }

    def enforce_iam(self, free_actions: int) -> None:
        """moto's IAM enforcement from the next ``free_actions`` requests on."""
        httpx.post(f"{self.url}/moto-api/reset-auth", content=str(free_actions).encode())

    def reset(self) -> None:
        httpx.post(f"{self.url}/moto-api/reset")


@contextmanager
def ecr_emulator(lifetime: timedelta = timedelta(hours=12)) -> Iterator[EcrEmulator]:
    """moto's server on loopback, answering ``GetAuthorizationToken`` as ECR does."""
    from moto.core.responses import ActionResult
    from moto.ecr.responses import ECRResponse
    from moto.server import ThreadedMotoServer

    book = TokenBook()
    emulator = EcrEmulator("", book, lifetime)
    original = ECRResponse.get_authorization_token

    def get_authorization_token(self: Any) -> Any:
        registry_ids = self._get_param("registryIds") or [self.current_account]
        data = []
        for registry_id in registry_ids:
            password, expires_at = emulator.book.issue("AWS", emulator.lifetime)
            data.append(
                {
                    "authorizationToken": base64.b64encode(f"AWS:{password}".encode()).decode(),
                    "expiresAt": expires_at,
                    "proxyEndpoint": f"https://{registry_id}.dkr.ecr.{self.region}.amazonaws.com",
                }
            )
        return ActionResult({"authorizationData": data})

    ECRResponse.get_authorization_token = get_authorization_token  # type: ignore[method-assign]
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    try:
        host, port = server.get_host_and_port()
        emulator.url = f"http://{host}:{port}"
        yield emulator
    finally:
        server.stop()
        ECRResponse.get_authorization_token = original  # type: ignore[method-assign]


# -- Google: the metadata server ------------------------------------------------------------


@dataclass
class Metadata:
    host: str
    book: TokenBook
    lifetime: timedelta
    deny: bool = False
    token_requests: int = 0

    def env(self) -> dict[str, str]:
        return {"GCE_METADATA_HOST": self.host, "GCE_METADATA_IP": self.host}


@contextmanager
def gcp_metadata(lifetime: timedelta = timedelta(hours=1)) -> Iterator[Metadata]:
    metadata = Metadata("", TokenBook(), lifetime)

    class Handler(QuietHandler):
        def do_GET(self) -> None:
            flavor = {"Metadata-Flavor": "Google"}
            if self.headers.get("Metadata-Flavor") != "Google":
                self.answer(403, flavor, b"Missing Metadata-Flavor header")
                return
            path = self.path.split("?", 1)[0].replace(
                "/releasebot@gpu-fleet.iam.gserviceaccount.com/", "/default/"
            )
            if path in ("", "/"):
                self.answer(200, flavor, b"computeMetadata/\n")
            elif path == "/computeMetadata/v1/project/project-id":
                self.answer(200, {**flavor, "Content-Type": "text/plain"}, b"gpu-fleet")
            elif path == "/computeMetadata/v1/instance/service-accounts/default/":
                # google-auth reads the account's email and scopes first (?recursive=true).
                info = {
                    "aliases": ["default"],
                    "email": "releasebot@gpu-fleet.iam.gserviceaccount.com",
                    "scopes": ["https://www.googleapis.com/auth/cloud-platform"],
                }
                self.answer(
                    200, {**flavor, "Content-Type": "application/json"}, json.dumps(info).encode()
                )
            elif path == "/computeMetadata/v1/instance/service-accounts/default/token":
                metadata.token_requests += 1
                if metadata.deny:
                    # What GKE's metadata server says when the Kubernetes service account
                    # is not bound to a Google service account.
                    body = b"Unable to generate access token; IAM returned 403 Forbidden"
                    self.answer(403, {**flavor, "Content-Type": "text/plain"}, body)
                    return
                password, _ = metadata.book.issue("oauth2accesstoken", metadata.lifetime)
                seconds = int(metadata.lifetime.total_seconds())
                body = json.dumps(
                    {"access_token": password, "expires_in": seconds, "token_type": "Bearer"}
                ).encode()
                self.answer(200, {**flavor, "Content-Type": "application/json"}, body)
            else:
                self.answer(404, flavor, b"not found")

    with serving(Handler) as host:
        metadata.host = host
        yield metadata


# -- Azure: Entra ID and ACR's exchange ---------------------------------------------------

ACR_USER = "00000000-0000-0000-0000-000000000000"


@dataclass
class Entra:
    url: str
    tenant: str
    client_id: str
    token_file: Path
    book: TokenBook
    lifetime: timedelta
    aad_tokens: dict[str, datetime] = field(default_factory=dict)
    deny: bool = False
    denial: str = (
        "AADSTS70021: No matching federated identity record found for presented assertion."
    )
    """The ``error_description`` of a denial (a test may make it hostile)."""
    token_requests: int = 0

    def env(self, ca_file: str) -> dict[str, str]:
        return {
            "AZURE_AUTHORITY_HOST": self.url,
            "AZURE_TENANT_ID": self.tenant,
            "AZURE_CLIENT_ID": self.client_id,
            "AZURE_FEDERATED_TOKEN_FILE": str(self.token_file),
            "REQUESTS_CA_BUNDLE": ca_file,
        }

    def exchange(self, form: Mapping[str, str]) -> tuple[int, bytes]:
        """ACR's ``POST /oauth2/exchange``: an Entra access token for an ACR refresh token."""
        expires = self.aad_tokens.get(form.get("access_token", ""))
        if form.get("grant_type") != "access_token" or expires is None:
            return 401, b'{"errors":[{"code":"UNAUTHORIZED","message":"bad access token"}]}'
        if form.get("tenant") != self.tenant:
            return 400, b'{"errors":[{"code":"INVALID","message":"tenant"}]}'
        expires_at = datetime.now(UTC) + self.lifetime
        # A JWT-shaped refresh token whose exp claim says when it expires, as ACR's does.
        claims = {"exp": int(expires_at.timestamp()), "grant_type": "refresh_token"}
        payload = base64.urlsafe_b64encode(json.dumps(claims).encode()).decode().rstrip("=")
        token = f"eyJhbGciOiJub25lIn0.{payload}.{secrets.token_urlsafe(24)}"
        with self.book.lock:
            self.book.issued[(ACR_USER, token)] = expires_at
        return 200, json.dumps({"refresh_token": token}).encode()


@contextmanager
def azure_endpoints(
    tls_cert: Path, tls_key: Path, token_file: Path, lifetime: timedelta = timedelta(hours=3)
) -> Iterator[Entra]:
    """Entra ID's token endpoint on ``https://127.0.0.1:PORT`` with the given certificate."""
    import ssl
    from http.server import ThreadingHTTPServer

    assertion = "federated-" + secrets.token_urlsafe(12)
    token_file.write_text(assertion)
    entra = Entra("", secrets.token_hex(8), secrets.token_hex(8), token_file, TokenBook(), lifetime)

    class Handler(QuietHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            form = {k: v[0] for k, v in parse_qs(body.decode()).items()}
            if self.path != f"/{entra.tenant}/oauth2/v2.0/token":
                self._error(404, "invalid_request", "AADSTS90002: Tenant not found")
                return
            entra.token_requests += 1
            ok = (
                form.get("client_assertion") == assertion
                and form.get("client_id") == entra.client_id
                and form.get("grant_type") == "client_credentials"
            )
            if entra.deny or not ok:
                self._error(400, "invalid_client", entra.denial)
                return
            access = "aad-" + secrets.token_urlsafe(24)
            entra.aad_tokens[access] = datetime.now(UTC) + timedelta(hours=1)
            answer = {"token_type": "Bearer", "expires_in": 3600, "access_token": access}
            self.answer(200, {"Content-Type": "application/json"}, json.dumps(answer).encode())

        def _error(self, status: int, error: str, description: str) -> None:
            body = json.dumps({"error": error, "error_description": description}).encode()
            self.answer(status, {"Content-Type": "application/json"}, body)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(tls_cert, tls_key)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        entra.url = f"https://127.0.0.1:{server.server_address[1]}"
        yield entra
    finally:
        server.shutdown()
        server.server_close()
