"""Settings into the signing objects: the key file, the attestor, ``releasebot verify``.

The lowest module of the wiring (``core`` builds the registry and calls in here), so it
takes the registry and the HTTP client it signs with as arguments.

Signing is on exactly when ``signing.key_file`` is set. The key is loaded once here, so a
missing file, a wrong password or a foreign key type stop the start with a ``ConfigError``
naming the setting; afterwards ``KeyFile`` re-reads it when the mounted Secret changes.
Imports of cryptography, NaCl and the SBOM/provenance libraries happen only in here, only
when called, so ``releasebot --help`` and ``demo`` do not pay for them.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

import httpx

from releasebot import __version__
from releasebot.config import Settings
from releasebot.domain.errors import ConfigError, SigningError
from releasebot.domain.ports import Attestor, Registry
from releasebot.domain.versions import is_oci_tag
from releasebot.edge.text import one_line

if TYPE_CHECKING:
    from releasebot.domain.attestation import Verification
    from releasebot.signing.keys import VerifyingKey

log = logging.getLogger("releasebot.signing")


def make_attestor(settings: Settings, registry: Registry, http: httpx.Client) -> Attestor | None:
    """The attestor for ``registry``; ``None`` (and one warning) when signing is off."""
    signing = settings.signing
    if not signing.enabled:
        log.warning(
            "images are published UNSIGNED: no signing key is configured (signing.key_file)"
        )
        return None
    from releasebot.registry.artifacts import OrasArtifacts
    from releasebot.registry.oras import OrasRegistry
    from releasebot.signing.attestor import RegistryAttestor
    from releasebot.signing.documents import Builder
    from releasebot.signing.keys import KeyFile
    from releasebot.sources.artifacts import HttpArtifactSource
    from releasebot.sources.materials import HttpMaterialSource

    if not isinstance(registry, OrasRegistry):
        return None  # an in-memory registry (demo): nothing to attach to
    key_file = KeyFile(signing.key_file, signing.password_bytes)
    public = check_signing_key(settings)
    artifacts = HttpArtifactSource(
        http,
        flatcar_base_url=settings.recipe.flatcar_base_url,
        nvidia_base_url=settings.recipe.nvidia_base_url,
    )
    log.info("images are signed with key %s", public.fingerprint)
    return RegistryAttestor(
        OrasArtifacts(registry),
        key=key_file.load,
        public=public,
        builder=Builder(__version__, settings.kaniko.executor_image, settings.kaniko.context),
        # The inputs' digests come from where the readiness gate found them; a recipe that
        # fetches from elsewhere (check_inputs off) gets a provenance without them.
        materials=HttpMaterialSource(http, artifacts) if settings.recipe.check_inputs else None,
    )


def verify_published(settings: Settings, registry: Registry, tag: str) -> Verification:
    """``releasebot verify TAG``: re-read the tag's attachments in ``registry`` and check
    them against the public key; ``VerificationError`` says what does not check out."""
    from releasebot.registry.artifacts import OrasArtifacts
    from releasebot.registry.oras import OrasRegistry
    from releasebot.signing.attestor import RegistryAttestor
    from releasebot.signing.documents import Builder
    from releasebot.signing.keys import KeyFile

    if not is_oci_tag(tag):
        raise ConfigError("TAG", f"{one_line(tag, 130)!r} is not an image tag")
    signing = settings.signing
    public = _public_key(settings)
    if public is None:
        if not signing.key_file:
            raise ConfigError(
                "signing.public_key_file", "set it (cosign.pub) or signing.key_file to verify"
            )
        try:
            public = KeyFile(signing.key_file, signing.password_bytes).load().public
        except SigningError as error:
            raise ConfigError("signing.key_file", str(error)) from None
    if not isinstance(registry, OrasRegistry):
        raise ConfigError("registry.repository", "releasebot verify needs a real registry")

    def no_signing() -> NoReturn:
        raise SigningError("releasebot verify never signs")

    attestor = RegistryAttestor(
        OrasArtifacts(registry),
        key=no_signing,
        public=public,
        builder=Builder(__version__, settings.kaniko.executor_image),
    )
    return attestor.verify(tag)


def check_signing_key(settings: Settings) -> VerifyingKey:
    """Load ``signing.key_file`` (and ``public_key_file``, which must be its public half):
    the public key, or ``ConfigError`` naming the setting. No I/O beyond the two files, so
    ``run`` checks it before it starts anything."""
    from releasebot.signing.keys import KeyFile

    signing = settings.signing
    try:
        key = KeyFile(signing.key_file, signing.password_bytes).load()
    except SigningError as error:
        raise ConfigError("signing.key_file", str(error)) from None
    public = _public_key(settings) or key.public
    if public.fingerprint != key.public.fingerprint:
        raise ConfigError(
            "signing.public_key_file",
            f"is {public.fingerprint}, not the public half of signing.key_file "
            f"({key.public.fingerprint})",
        )
    return public


def _public_key(settings: Settings) -> VerifyingKey | None:
    from releasebot.signing.keys import load_verifying_key

    path = settings.signing.public_key_file
    if not path:
        return None
    try:
        return load_verifying_key(Path(path).read_bytes()[: 64 * 1024], source=path)
    except OSError as error:
        raise ConfigError(
            "signing.public_key_file", f"cannot read {path}: {error.strerror}"
        ) from None
    except SigningError as error:
        raise ConfigError("signing.public_key_file", str(error)) from None
