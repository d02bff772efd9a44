"""``HttpArtifactSource``: are a build's inputs on Flatcar's and NVIDIA's servers yet?

For one (target, arch) it HEADs the Flatcar release files the recipe downloads (and their
signed digests), GETs the small kernel config to learn the compiler major
(``CONFIG_GCC_VERSION``), and HEADs the NVIDIA runfile. Base URLs are settings, so mirrors
work. It decides nothing: a 404 is reported as missing; the service decides how long to
wait and when a missing runfile becomes permanent.

Deliberately not here: downloading or verifying the artefacts (the recipe does that inside
the build, with the signing key), or caching across cycles.
"""

from __future__ import annotations

from collections.abc import Callable

import httpx

from releasebot.domain.shared.errors import TemporaryError
from releasebot.domain.shared.versions import Arch
from releasebot.domain.targets.models import Target
from releasebot.domain.targets.readiness import Readiness, gcc_major
from releasebot.edge.redirects import REDIRECT_CODES, RedirectPolicy, RedirectRefusedError

FLATCAR_FILES = (
    "flatcar-container.tar.gz",
    "flatcar_production_image.vmlinuz",
    "flatcar_production_image_kernel_config.txt",
)
"""What the recipe downloads; each comes with ``.DIGESTS`` and ``.DIGESTS.asc``."""
KERNEL_CONFIG = "flatcar_production_image_kernel_config.txt"
MAX_KERNEL_CONFIG_BYTES = 4 * 1024 * 1024


def _bounded(url: str, response: httpx.Response, limit: int) -> bytes:
    chunks: list[bytes] = []
    size = 0
    for chunk in response.iter_bytes():
        size += len(chunk)
        if size > limit:
            raise TemporaryError(f"artefacts: {url} is larger than a kernel config can be")
        chunks.append(chunk)
    return b"".join(chunks)


class HttpArtifactSource:
    """Checks the inputs over HTTP with an injected ``httpx.Client`` (redirects followed, by
    the one redirect policy of ``edge.redirects``)."""

    def __init__(
        self,
        client: httpx.Client,
        *,
        flatcar_base_url: str,
        nvidia_base_url: str,
        redirects: Callable[[str], RedirectPolicy] = RedirectPolicy,
    ) -> None:
        self._client = client
        self._redirects = redirects
        self._flatcar = flatcar_base_url.rstrip("/")
        self._nvidia = nvidia_base_url.rstrip("/")

    def flatcar_url(self, target: Target, arch: Arch, name: str) -> str:
        base = self._flatcar.replace("{channel}", target.flatcar_channel)
        return f"{base}/{arch.flatcar_board}/{target.flatcar_version}/{name}"

    def runfile_url(self, target: Target, arch: Arch) -> str:
        version = target.driver_version.text
        return f"{self._nvidia}/{version}/NVIDIA-Linux-{arch.nvidia_name}-{version}.run"

    def readiness(self, target: Target, arch: Arch) -> Readiness:
        missing = []
        for name in FLATCAR_FILES:
            for suffix in ("", ".DIGESTS", ".DIGESTS.asc"):
                url = self.flatcar_url(target, arch, name + suffix)
                if not self._exists(url):
                    missing.append(url)
        runfile = self.runfile_url(target, arch)
        runfile_missing = not self._exists(runfile)
        if runfile_missing:
            missing.append(runfile)
        args: tuple[tuple[str, str], ...] = ()
        config_url = self.flatcar_url(target, arch, KERNEL_CONFIG)
        if config_url not in missing:
            major = gcc_major(self._text(config_url))
            if major is None:
                missing.append(f"{config_url} (no CONFIG_GCC_VERSION in it)")
            else:
                args = (("GCC_MAJOR", str(major)),)
        return Readiness(tuple(missing), runfile_missing, args)

    def _exists(self, url: str) -> bool:
        response = self._request("HEAD", url)
        if response.status_code == 405:  # a mirror without HEAD: ask for one byte instead
            response = self._request("GET", url, headers={"Range": "bytes=0-0"})
        if response.status_code in (404, 410):
            return False
        if response.is_success:
            return True
        raise TemporaryError(f"artefacts: {url} answered {response.status_code}")

    def _text(self, url: str) -> str:
        response = self._request("GET", url, limit=MAX_KERNEL_CONFIG_BYTES)
        if not response.is_success:
            raise TemporaryError(f"artefacts: {url} answered {response.status_code}")
        return response.content.decode("utf-8", errors="replace")

    def _request(
        self,
        method: str,
        url: str,
        headers: dict[str, str] | None = None,
        *,
        limit: int = 0,
    ) -> httpx.Response:
        """One request, its redirects followed under ``edge.redirects``' policy, reading at
        most ``limit`` bytes of a successful answer's body (none when 0)."""
        policy = self._redirects(url)
        current = url
        try:
            while True:
                request = self._client.build_request(method, current, headers=headers)
                response = self._client.send(request, stream=True, follow_redirects=False)
                try:
                    if response.status_code in REDIRECT_CODES and "Location" in response.headers:
                        current = policy.follow(current, response.headers["Location"])
                        continue
                    if limit and response.is_success:
                        response._content = _bounded(url, response, limit)
                    return response
                finally:
                    response.close()
        except RedirectRefusedError as error:
            raise TemporaryError(f"artefacts: {url}: {error}") from None
        except httpx.HTTPError as error:
            raise TemporaryError(f"artefacts: {url}: {type(error).__name__}") from error
