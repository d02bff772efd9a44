"""Layered images in a real registry, pushed as Kaniko pushes a driver base and an image
built FROM it.

A base is a few small gzip layers and a config with labels. An image built FROM a base
pinned by digest reads that base's manifest and config from the registry, keeps its layer
descriptors (the same blobs, so the same digests, in the same order), appends ONE new
layer, and extends the config's ``rootfs.diff_ids``: what Kaniko does with ``FROM
${DRIVER_BASE}`` and one ``COPY`` (and what ``crane append`` does in the registry).
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import tarfile
from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import urljoin

import httpx

from releasebot.registry import OCI_MANIFEST
from tests.support.registryserver import RunningRegistry

OCI_CONFIG = "application/vnd.oci.image.config.v1+json"
OCI_LAYER = "application/vnd.oci.image.layer.v1.tar+gzip"


def digest_of(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def tar_of(files: Mapping[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as archive:
        for name, content in sorted(files.items()):
            info = tarfile.TarInfo(name)
            info.size = len(content)
            info.mode = 0o644
            archive.addfile(info, io.BytesIO(content))
    return buffer.getvalue()


def _client(registry: RunningRegistry) -> httpx.Client:
    return httpx.Client(
        base_url=registry.base_url, auth=registry.auth, verify=registry.verify, timeout=10.0
    )


def _upload(client: httpx.Client, repo: str, blob: bytes) -> None:
    if client.head(f"/v2/{repo}/blobs/{digest_of(blob)}").status_code == 200:
        return  # the registry has it: Kaniko skips a layer that exists too
    started = client.post(f"/v2/{repo}/blobs/uploads/")
    assert started.status_code == 202, (started.status_code, started.text)
    location = urljoin(str(started.url), started.headers["Location"])
    separator = "&" if "?" in location else "?"
    done = client.put(
        f"{location}{separator}digest={digest_of(blob)}",
        content=blob,
        headers={"Content-Type": "application/octet-stream"},
    )
    assert done.status_code == 201, (done.status_code, done.text)


def read_manifest(registry: RunningRegistry, repo: str, reference: str) -> dict[str, Any]:
    with _client(registry) as client:
        answer = client.get(f"/v2/{repo}/manifests/{reference}", headers={"Accept": OCI_MANIFEST})
        answer.raise_for_status()
        manifest: dict[str, Any] = answer.json()
        return manifest


def _read_config(client: httpx.Client, repo: str, digest: str) -> dict[str, Any]:
    answer = client.get(f"/v2/{repo}/blobs/{digest}", follow_redirects=True)
    answer.raise_for_status()
    config: dict[str, Any] = answer.json()
    return config


def push_layered(
    registry: RunningRegistry,
    repo: str,
    tag: str,
    *,
    arch: str,
    labels: Mapping[str, str],
    layers: Sequence[Mapping[str, bytes]],
    base: str | None = None,
) -> str:
    """Push ``layers`` (each a set of files) as an image under ``tag``; with ``base`` (a
    ``<repository>@sha256:…`` reference in this registry) on top of that image's layers.
    Returns the manifest digest."""
    with _client(registry) as client:
        descriptors: list[dict[str, Any]] = []
        diff_ids: list[str] = []
        if base is not None:
            base_repo = base.split("@", 1)[0].split("/", 1)[1]
            base_digest = base.split("@", 1)[1]
            answer = client.get(
                f"/v2/{base_repo}/manifests/{base_digest}", headers={"Accept": OCI_MANIFEST}
            )
            answer.raise_for_status()
            parent = answer.json()
            descriptors = list(parent["layers"])
            diff_ids = list(
                _read_config(client, base_repo, parent["config"]["digest"])["rootfs"]["diff_ids"]
            )
        for files in layers:
            tar = tar_of(files)
            layer = gzip.compress(tar, mtime=0)
            _upload(client, repo, layer)
            descriptors.append(
                {"mediaType": OCI_LAYER, "digest": digest_of(layer), "size": len(layer)}
            )
            diff_ids.append(digest_of(tar))
        config = json.dumps(
            {
                "architecture": arch,
                "os": "linux",
                "config": {"Labels": dict(labels)},
                "rootfs": {"type": "layers", "diff_ids": diff_ids},
            },
            sort_keys=True,
        ).encode()
        _upload(client, repo, config)
        manifest = json.dumps(
            {
                "schemaVersion": 2,
                "mediaType": OCI_MANIFEST,
                "config": {
                    "mediaType": OCI_CONFIG,
                    "digest": digest_of(config),
                    "size": len(config),
                },
                "layers": descriptors,
            },
            sort_keys=True,
        ).encode()
        answer = client.put(
            f"/v2/{repo}/manifests/{tag}", content=manifest, headers={"Content-Type": OCI_MANIFEST}
        )
        answer.raise_for_status()
    return digest_of(manifest)
