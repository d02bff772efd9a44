"""``HttpMaterialSource``: the inputs a build downloaded, with their digests, for provenance.

For one (Flatcar release, driver, arch) it names every file the recipe fetches, at the same
URLs the readiness gate checks (``HttpArtifactSource``'s rule, mirrors included), with the
SHA512 that the release's ``<file>.DIGESTS`` states. The recipe refuses a file whose
``.DIGESTS`` differs from the OpenPGP-signed ``.DIGESTS.asc``, so a published image was
built from exactly these hashes; this module does not check the signature again (the bot
has no OpenPGP keyring), it reads what the build verified. The NVIDIA runfile is named with
no digest: NVIDIA publishes none, and the build's own SHA-256 of it is only known when a
pin (``NVIDIA_RUNFILE_SHA256``) was passed.

Deliberately not here: downloading the artefacts themselves (gigabytes), caching.
"""

from __future__ import annotations

import re

import httpx

from releasebot.domain.shared.errors import TemporaryError
from releasebot.domain.shared.versions import Arch
from releasebot.domain.targets.attestation import Material
from releasebot.domain.targets.models import Target
from releasebot.sources.artifacts import FLATCAR_FILES, HttpArtifactSource

MAX_DIGESTS_BYTES = 64 * 1024
"""A DIGESTS file is three hashes per file: well under a kilobyte."""
_SHA512_LINE = re.compile(r"^([0-9a-fA-F]{128})\s+\*?(\S+)\s*$")


def parse_sha512(text: str, name: str) -> str | None:
    """The one SHA512 the ``# SHA512 HASH`` section of a DIGESTS file gives ``name``."""
    section = ""
    found: list[str] = []
    for line in text.splitlines():
        if line.startswith("#"):
            section = line.upper()
            continue
        match = _SHA512_LINE.match(line)
        if "SHA512" in section and match and match.group(2) == name:
            found.append(match.group(1).lower())
    return found[0] if len(found) == 1 else None


class HttpMaterialSource:
    """``MaterialSource`` over HTTP with an injected client and the artefact URL rule."""

    def __init__(self, client: httpx.Client, artifacts: HttpArtifactSource) -> None:
        self._client = client
        self._artifacts = artifacts

    def materials(self, target: Target, arch: Arch) -> tuple[Material, ...]:
        found = []
        for name in FLATCAR_FILES:
            url = self._artifacts.flatcar_url(target, arch, name)
            digest = parse_sha512(self._text(f"{url}.DIGESTS"), name)
            if digest is None:
                raise TemporaryError(f"materials: {url}.DIGESTS has no single SHA512 for {name}")
            found.append(Material(url, (("sha512", digest),)))
        found.append(Material(self._artifacts.runfile_url(target, arch), ()))
        return tuple(found)

    def _text(self, url: str) -> str:
        try:
            response = self._client.get(url, follow_redirects=True)
        except httpx.HTTPError as error:
            raise TemporaryError(f"materials: {url}: {type(error).__name__}") from error
        if not response.is_success:
            raise TemporaryError(f"materials: {url} answered {response.status_code}")
        if len(response.content) > MAX_DIGESTS_BYTES:
            raise TemporaryError(f"materials: {url} is larger than a DIGESTS file can be")
        return response.content.decode("utf-8", errors="replace")
