"""Settings into the signing objects: the key file, the attestor, ``releasebot verify``.

The lowest module of the wiring (``core`` builds the registry and calls in here), so it
takes the registry and the HTTP client it signs with as arguments.

Signing is on exactly when ``signing.key_file`` is set. The key files are read once here,
so a missing or unreadable file, a wrong password, a foreign key type or a public key that
is not the key's half stop the start with a ``ConfigError`` naming the setting; afterwards
``KeyFiles`` reads them as one set before every signature and takes a rotated set once it
belongs together.
Imports of cryptography, NaCl and the SBOM/provenance libraries happen only in here, only
when called, so ``releasebot --help`` and ``demo`` do not pay for them.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import httpx

from releasebot import __version__
from releasebot.config import Settings
from releasebot.domain.ports import Attestor, Registry
from releasebot.domain.shared.errors import ConfigError, SigningError
from releasebot.domain.shared.versions import is_oci_tag
from releasebot.edge.parse import ValueRefusedError, read_regular_file
from releasebot.edge.text import one_line

if TYPE_CHECKING:
    from releasebot.domain.targets.attestation import Verification
    from releasebot.signing.keyfiles import KeyFiles
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
    from releasebot.signing.keyfiles import KeyFileError
    from releasebot.sources.artifacts import HttpArtifactSource
    from releasebot.sources.materials import HttpMaterialSource

    if not isinstance(registry, OrasRegistry):
        return None  # an in-memory registry (demo): nothing to attach to
    keys = key_files(settings)
    try:
        pair = keys.load()
    except KeyFileError as error:
        raise ConfigError(error.setting, str(error)) from None
    artifacts = HttpArtifactSource(
        http,
        flatcar_base_url=settings.recipe.flatcar_base_url,
        nvidia_base_url=settings.recipe.nvidia_base_url,
    )
    log.info("images are signed with key %s", pair.fingerprint)
    return RegistryAttestor(
        OrasArtifacts(registry),
        keys=keys.load,
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
    from releasebot.signing.keyfiles import KeyFileError
    from releasebot.signing.verifier import SignatureVerifier

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
            public = key_files(settings).load().public
        except KeyFileError as error:
            raise ConfigError(error.setting, str(error)) from None
    if not isinstance(registry, OrasRegistry):
        raise ConfigError("registry.repository", "releasebot verify needs a real registry")
    return SignatureVerifier(OrasArtifacts(registry), public).verify(tag)


def key_files(settings: Settings) -> KeyFiles:
    """The ``[signing]`` files as one set (``signing/keyfiles.py``)."""
    from releasebot.signing.keyfiles import KeyFiles

    signing = settings.signing
    return KeyFiles(
        signing.key_file,
        password=signing.password.encode(),
        password_path=signing.password_file,
        public_path=signing.public_key_file,
    )


def check_signing_key(settings: Settings) -> VerifyingKey:
    """Load the ``[signing]`` files as one set (the key, its password, the public key, which
    must be its public half): the public key, or ``ConfigError`` naming the setting. No I/O
    beyond those files, so ``run`` checks it before it starts anything."""
    from releasebot.signing.keyfiles import KeyFileError

    try:
        return key_files(settings).load().public
    except KeyFileError as error:
        raise ConfigError(error.setting, str(error)) from None


def _public_key(settings: Settings) -> VerifyingKey | None:
    """The public key file alone (``releasebot verify`` needs no private key)."""
    from releasebot.signing.keys import MAX_KEY_FILE_BYTES, load_verifying_key

    path = settings.signing.public_key_file
    if not path:
        return None
    try:
        return load_verifying_key(read_regular_file(path, MAX_KEY_FILE_BYTES), source=path)
    except (ValueRefusedError, SigningError) as error:
        raise ConfigError("signing.public_key_file", str(error)) from None
