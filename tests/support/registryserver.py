"""A REAL OCI registry for tests (Debian's ``docker-registry``, CNCF distribution 2.8).

``run_registry`` starts it on 127.0.0.1 with a random free port, temp storage and a small
YAML config it writes: plain HTTP without auth, or TLS (a CA and a server certificate for
127.0.0.1/localhost, made here with the ``openssl`` CLI) with htpasswd basic auth (bcrypt
from ``htpasswd -B``, Debian's ``apache2-utils``). It waits until ``/v2/`` answers and, on
exit, kills the process group, so no registry outlives the test session.

``push_image`` plays Kaniko: it uploads a config blob, one small gzipped-tar layer and an
OCI or Docker v2 manifest with plain httpx, exactly as the distribution API asks.

When a tool is missing, tests are skipped on a developer's machine and FAIL in CI (``CI``
set): CI must never pass by skipping the real registry.

Deliberately not here: pytest fixtures (``tests/support/registry_fixtures.py``), anything the
adapter under test does (this module never imports ``releasebot.registry.oras``).
"""

from __future__ import annotations

import base64
import contextlib
import gzip
import hashlib
import io
import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import tarfile
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn
from urllib.parse import urljoin

import httpx
import pytest

from releasebot.registry import DOCKER_MANIFEST, OCI_MANIFEST

START_TIMEOUT = 20.0
"""Seconds the registry gets to answer ``/v2/`` (it takes ~0.1 s; CI machines can be slow)."""

STOP_TIMEOUT = 5.0
"""Seconds between SIGTERM and SIGKILL when stopping it."""


def registry_unavailable(reason: str) -> NoReturn:
    """Skip a real-registry test on a developer's machine; fail it in CI."""
    message = f"real OCI registry not available: {reason}"
    if os.environ.get("CI"):
        pytest.fail(f"{message} (CI is set, so this is an error, not a skip)")
    pytest.skip(message)


def require_tool(name: str, package: str) -> str:
    path = shutil.which(name)
    if path is None:
        registry_unavailable(f"{name} not found (apt-get install {package})")
    return path


@dataclass(frozen=True)
class TlsFiles:
    ca_file: Path
    cert_file: Path
    key_file: Path


@dataclass(frozen=True)
class RunningRegistry:
    """A started registry. ``host`` is ``127.0.0.1:PORT``."""

    host: str
    tls: TlsFiles | None
    username: str | None
    password: str | None
    log_file: Path

    @property
    def base_url(self) -> str:
        return f"{'https' if self.tls else 'http'}://{self.host}"

    @property
    def ca_file(self) -> str | None:
        return str(self.tls.ca_file) if self.tls else None

    @property
    def auth(self) -> tuple[str, str] | None:
        if self.username is None or self.password is None:
            return None
        return (self.username, self.password)

    @property
    def verify(self) -> ssl.SSLContext | bool:
        """What httpx needs to trust this registry."""
        return ssl.create_default_context(cafile=self.ca_file) if self.tls else True

    def repository(self, name: str) -> str:
        return f"{self.host}/{name}"

    def push_image(
        self,
        name: str,
        tag: str,
        *,
        arch: str = "amd64",
        labels: Mapping[str, str] | None = None,
        media_type: str = OCI_MANIFEST,
    ) -> str:
        """``push_image`` on this registry, with its credentials and CA."""
        return push_image(
            self.base_url,
            name,
            tag,
            arch=arch,
            labels=labels,
            media_type=media_type,
            auth=self.auth,
            verify=self.verify,
        )

    def write_docker_config(self, path: Path, *, key: str | None = None) -> Path:
        """A Docker ``config.json`` as Kaniko's Secret holds it (``auths[host].auth``)."""
        auth = self.auth
        assert auth is not None, "this registry has no htpasswd users"
        encoded = _b64(":".join(auth))
        path.write_text(json.dumps({"auths": {key or self.host: {"auth": encoded}}}))
        return path


# -- starting and stopping --------------------------------------------------------------


@contextlib.contextmanager
def run_registry(
    workdir: Path,
    *,
    tls: bool = False,
    users: Mapping[str, str] | None = None,
    delete: bool = True,
) -> Iterator[RunningRegistry]:
    """Start a registry in ``workdir`` (storage, config, log), yield it, stop it; with
    ``delete=False`` it refuses manifest deletes (``storage.delete.enabled: false``)."""
    binary = require_tool("docker-registry", "docker-registry")
    workdir.mkdir(parents=True, exist_ok=True)
    tls_files = make_tls_files(workdir / "tls") if tls else None
    htpasswd = make_htpasswd(workdir / "htpasswd", users) if users else None
    username, password = next(iter(users.items())) if users else (None, None)
    log_file = workdir / "registry.log"
    for _ in range(3):  # another process may grab the free port between probe and bind
        port = free_port()
        config = _write_config(workdir, port, tls_files, htpasswd, delete=delete)
        running = RunningRegistry(f"127.0.0.1:{port}", tls_files, username, password, log_file)
        with log_file.open("ab") as log:
            process = subprocess.Popen(
                [binary, "serve", str(config)],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # its own process group: stop() kills it all
            )
        try:
            if _wait_ready(process, running):
                yield running
                return
        finally:
            _stop(process)
    tail = log_file.read_text(errors="replace")[-2000:]
    pytest.fail(f"docker-registry did not start; log tail:\n{tail}")


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _write_config(
    workdir: Path, port: int, tls: TlsFiles | None, htpasswd: Path | None, *, delete: bool = True
) -> Path:
    # JSON strings are valid YAML scalars: no quoting surprises from paths.
    lines = [
        "version: 0.1",
        "log:",
        "  level: warn",
        "  accesslog:",
        "    disabled: true",
        "storage:",
        "  filesystem:",
        f"    rootdirectory: {json.dumps(str(workdir / 'storage'))}",
        "  delete:",
        f"    enabled: {'true' if delete else 'false'}",
        "  maintenance:",
        "    uploadpurging:",
        "      enabled: false",
        "http:",
        f"  addr: 127.0.0.1:{port}",
        "  secret: releasebot-test-only",
    ]
    if tls is not None:
        lines += [
            "  tls:",
            f"    certificate: {json.dumps(str(tls.cert_file))}",
            f"    key: {json.dumps(str(tls.key_file))}",
        ]
    if htpasswd is not None:
        lines += [
            "auth:",
            "  htpasswd:",
            "    realm: releasebot-test",
            f"    path: {json.dumps(str(htpasswd))}",
        ]
    config = workdir / "config.yml"
    config.write_text("\n".join(lines) + "\n")
    return config


def _wait_ready(process: subprocess.Popen[bytes], running: RunningRegistry) -> bool:
    """True once ``/v2/`` answers (200, or 401 with auth); False if the process died."""
    deadline = time.monotonic() + START_TIMEOUT
    with httpx.Client(verify=running.verify, timeout=1.0) as client:
        while time.monotonic() < deadline:
            if process.poll() is not None:
                return False
            try:
                status = client.get(f"{running.base_url}/v2/").status_code
            except httpx.TransportError:
                status = 0
            if status in (200, 401):
                return True
            # Not a sleep: waiting on the process notices at once if it dies.
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=0.05)
    return False


def _stop(process: subprocess.Popen[bytes]) -> None:
    for sig in (signal.SIGTERM, signal.SIGKILL):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, sig)
        try:
            process.wait(timeout=STOP_TIMEOUT)
            return
        except subprocess.TimeoutExpired:
            continue


# -- TLS and htpasswd -------------------------------------------------------------------


def make_tls_files(directory: Path) -> TlsFiles:
    """A throwaway CA and a server certificate it signed, for 127.0.0.1 and localhost."""
    openssl = require_tool("openssl", "openssl")
    directory.mkdir(parents=True, exist_ok=True)
    ca_key, ca_file = directory / "ca.key", directory / "ca.pem"
    key, csr, cert = directory / "server.key", directory / "server.csr", directory / "server.pem"
    ext = directory / "server.ext"
    ext.write_text(
        "basicConstraints=critical,CA:FALSE\n"
        "keyUsage=critical,digitalSignature,keyEncipherment\n"
        "extendedKeyUsage=serverAuth\n"
        "subjectAltName=IP:127.0.0.1,DNS:localhost\n"
        "authorityKeyIdentifier=keyid\n"
        "subjectKeyIdentifier=hash\n"
    )
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    _run(
        openssl, "req", "-x509", *ec, "-keyout", ca_key, "-out", ca_file, "-days", "2",
        "-subj", "/CN=releasebot test CA",
        "-addext", "basicConstraints=critical,CA:TRUE",
        "-addext", "keyUsage=critical,keyCertSign,cRLSign",
    )  # fmt: skip
    _run(openssl, "req", *ec, "-keyout", key, "-out", csr, "-subj", "/CN=127.0.0.1")
    _run(
        openssl, "x509", "-req", "-in", csr, "-CA", ca_file, "-CAkey", ca_key,
        "-CAcreateserial", "-out", cert, "-days", "2", "-extfile", ext,
    )  # fmt: skip
    return TlsFiles(ca_file, cert, key)


def make_htpasswd(path: Path, users: Mapping[str, str]) -> Path:
    """An htpasswd file with bcrypt hashes, the only kind distribution accepts."""
    htpasswd = require_tool("htpasswd", "apache2-utils")
    path.unlink(missing_ok=True)
    for username, password in users.items():
        create = ["-c"] if not path.exists() else []
        # -i reads the password from stdin, so it never shows in a process listing.
        subprocess.run(
            [htpasswd, "-B", "-i", *create, str(path), username],
            input=password.encode(),
            check=True,
            capture_output=True,
        )
    return path


def _run(*argv: str | Path) -> None:
    result = subprocess.run([str(arg) for arg in argv], capture_output=True, check=False)
    if result.returncode != 0:
        raise RuntimeError(f"{argv[0]} failed: {result.stderr.decode(errors='replace')[-500:]}")


# -- pushing a tiny real image ----------------------------------------------------------


def push_image(
    base_url: str,
    repo: str,
    tag: str,
    *,
    arch: str = "amd64",
    labels: Mapping[str, str] | None = None,
    media_type: str = OCI_MANIFEST,
    auth: tuple[str, str] | None = None,
    verify: ssl.SSLContext | bool = True,
) -> str:
    """Push a one-layer image for ``arch`` under ``tag`` as Kaniko would; its digest.

    ``media_type`` is ``OCI_MANIFEST`` or ``DOCKER_MANIFEST`` (config and layer media types
    follow). The same arguments give the same bytes, hence the same digest.
    """
    if media_type not in (OCI_MANIFEST, DOCKER_MANIFEST):
        raise ValueError(f"not an image manifest media type: {media_type}")
    docker = media_type == DOCKER_MANIFEST
    tar = _tar({"etc/releasebot-test": f"{repo}:{tag} {arch}\n".encode()})
    layer = gzip.compress(tar, mtime=0)
    config = json.dumps(
        {
            "architecture": str(arch),
            "os": "linux",
            "config": {"Labels": dict(labels or {})},
            "rootfs": {"type": "layers", "diff_ids": [_digest(tar)]},
        },
        sort_keys=True,
    ).encode()
    manifest = json.dumps(
        {
            "schemaVersion": 2,
            "mediaType": media_type,
            "config": {
                "mediaType": "application/vnd.docker.container.image.v1+json"
                if docker
                else "application/vnd.oci.image.config.v1+json",
                "digest": _digest(config),
                "size": len(config),
            },
            "layers": [
                {
                    "mediaType": "application/vnd.docker.image.rootfs.diff.tar.gzip"
                    if docker
                    else "application/vnd.oci.image.layer.v1.tar+gzip",
                    "digest": _digest(layer),
                    "size": len(layer),
                }
            ],
        },
        sort_keys=True,
    ).encode()
    with httpx.Client(base_url=base_url, auth=auth, verify=verify, timeout=10.0) as client:
        for blob in (layer, config):
            _upload_blob(client, repo, blob)
        answer = client.put(
            f"/v2/{repo}/manifests/{tag}",
            content=manifest,
            headers={"Content-Type": media_type},
        )
        answer.raise_for_status()
    digest = _digest(manifest)
    assert answer.headers.get("Docker-Content-Digest") == digest, answer.headers
    return digest


def _upload_blob(client: httpx.Client, repo: str, blob: bytes) -> None:
    """Monolithic upload: POST opens an upload session, PUT ?digest= closes it with the data."""
    started = client.post(f"/v2/{repo}/blobs/uploads/")
    assert started.status_code == 202, (started.status_code, started.text)
    location = urljoin(str(started.url), started.headers["Location"])
    separator = "&" if "?" in location else "?"
    done = client.put(
        f"{location}{separator}digest={_digest(blob)}",
        content=blob,
        headers={"Content-Type": "application/octet-stream"},
    )
    assert done.status_code == 201, (done.status_code, done.text)


def _tar(files: Mapping[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as archive:
        for name, content in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(content)
            info.mode = 0o644
            archive.addfile(info, io.BytesIO(content))
    return buffer.getvalue()


def _digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()
