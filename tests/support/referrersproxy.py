"""A registry WITH the OCI 1.1 referrers API, for tests: the real registry behind a proxy.

Debian's docker-registry (distribution 2.8) has no referrers API. Registries that do
(distribution 3, Harbor, Zot, GHCR…) index each pushed manifest's ``subject``, say so with
the ``OCI-Subject`` header on the PUT answer, and serve ``GET /v2/<name>/referrers/<digest>``
as an image index of descriptors (with ``artifactType`` and ``annotations``). This proxy
adds exactly that over real HTTP and forwards everything else, byte for byte, to the real
registry (rewriting ``Location`` to itself), so blobs, manifests and tags stay real.

Deliberately not here: the ``artifactType`` filter query, pagination of referrers.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import httpx

from tests.support.servers import QuietHandler, serving

OCI_INDEX = "application/vnd.oci.image.index.v1+json"
_HOP = {"connection", "keep-alive", "transfer-encoding", "content-length", "date", "server"}


class ReferrersProxy:
    """Started by ``run_referrers_proxy``; ``host`` is ``127.0.0.1:PORT``."""

    def __init__(self, upstream: str) -> None:
        self.upstream = upstream
        self.host = ""
        self.referrers: dict[str, list[dict[str, object]]] = {}
        self.lock = threading.Lock()

    def repository(self, name: str) -> str:
        return f"{self.host}/{name}"


@contextmanager
def run_referrers_proxy(upstream_base_url: str) -> Iterator[ReferrersProxy]:
    proxy = ReferrersProxy(upstream_base_url)
    client = httpx.Client(base_url=upstream_base_url, timeout=10.0)

    class Handler(QuietHandler):
        def do_GET(self) -> None:
            if "/referrers/" in self.path:
                self._referrers()
            else:
                self._forward()

        def do_HEAD(self) -> None:
            self._forward()

        def do_POST(self) -> None:
            self._forward()

        def do_PUT(self) -> None:
            self._forward()

        def do_DELETE(self) -> None:
            self._forward()

        def _body(self) -> bytes:
            length = int(self.headers.get("Content-Length") or 0)
            return self.rfile.read(length) if length else b""

        def _referrers(self) -> None:
            digest = self.path.split("/referrers/", 1)[1].split("?", 1)[0]
            with proxy.lock:
                entries = list(proxy.referrers.get(digest, []))
            body = json.dumps({"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": entries})
            self.answer(200, {"Content-Type": OCI_INDEX}, body.encode())

        def _forward(self) -> None:
            body = self._body()
            headers = {k: v for k, v in self.headers.items() if k.lower() not in _HOP | {"host"}}
            answer = client.request(self.command, self.path, headers=headers, content=body)
            out = {k: v for k, v in answer.headers.items() if k.lower() not in _HOP}
            if "location" in {k.lower() for k in out}:
                key = next(k for k in out if k.lower() == "location")
                out[key] = out[key].replace(proxy.upstream, f"http://{proxy.host}")
            if self.command == "PUT" and "/manifests/" in self.path and answer.is_success:
                subject = self._index(body, answer.headers.get("Docker-Content-Digest", ""))
                if subject:
                    out["OCI-Subject"] = subject
            length = int(answer.headers.get("Content-Length") or len(answer.content))
            content = b"" if self.command == "HEAD" else answer.content
            self.answer(answer.status_code, out, content, length=length)

        def _index(self, body: bytes, digest: str) -> str | None:
            try:
                document = json.loads(body)
            except ValueError:
                return None
            subject = document.get("subject") if isinstance(document, dict) else None
            if not isinstance(subject, dict) or not digest:
                return None
            entry: dict[str, object] = {
                "mediaType": document.get("mediaType"),
                "digest": digest,
                "size": len(body),
            }
            for key in ("artifactType", "annotations"):
                if document.get(key):
                    entry[key] = document[key]
            with proxy.lock:
                listed = proxy.referrers.setdefault(str(subject["digest"]), [])
                if all(item["digest"] != digest for item in listed):
                    listed.append(entry)
            return str(subject["digest"])

    try:
        with serving(Handler) as host:
            proxy.host = host
            yield proxy
    finally:
        client.close()
