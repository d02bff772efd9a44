"""``OrasRegistry.tags`` keeps the last walk's pages: on a REAL registry (Debian's
docker-registry, which answers the whole list in one page whatever ``n`` asks), a repeat
walk over an unchanged page decodes nothing, and a tag pushed or deleted changes the page,
which is decoded again, so the answer is always what the registry lists now.
"""

from __future__ import annotations

import httpx
import pytest

from releasebot.registry import OCI_MANIFEST, oras
from releasebot.registry.oras import OrasRegistry
from tests.support.registryserver import RunningRegistry


def test_unchanged_tag_pages_are_not_decoded_again(
    plain_registry: RunningRegistry, registry_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    tags = [f"580.100.01-flatcar5000.2.{n}" for n in range(5)]
    for tag in tags:
        plain_registry.push_image(registry_name, tag, labels={"tag": tag})
    decoded: list[bytes] = []
    parse = oras._parse_tag_page

    def counting(host: str, body: bytes) -> list[str]:
        decoded.append(body)
        return parse(host, body)

    monkeypatch.setattr(oras, "_parse_tag_page", counting)
    registry = OrasRegistry(plain_registry.repository(registry_name), insecure=True, page_size=2)
    try:
        assert registry.tags() == set(tags)
        assert len(decoded) >= 1
        decoded.clear()
        assert registry.tags() == set(tags)
        assert decoded == []

        # A tag pushed: its page is read again.
        pushed = "580.100.01-flatcar5000.2.9"
        plain_registry.push_image(registry_name, pushed, labels={"tag": pushed})
        assert registry.tags() == {*tags, pushed}
        assert decoded != []
        decoded.clear()

        # A tag deleted: likewise.
        with httpx.Client(base_url=plain_registry.base_url, timeout=10) as client:
            path = f"/v2/{registry_name}/manifests/{tags[0]}"
            head = client.head(path, headers={"Accept": OCI_MANIFEST})
            digest = head.raise_for_status().headers["Docker-Content-Digest"]
            client.delete(f"/v2/{registry_name}/manifests/{digest}").raise_for_status()
        assert registry.tags() == {*tags[1:], pushed}
        assert decoded != []
        decoded.clear()
        assert registry.tags() == {*tags[1:], pushed}
        assert decoded == []
    finally:
        registry.close()
