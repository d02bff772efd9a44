"""The key pair as mounted files: private key, password and public key, read as one set.

Why it exists: the key is rotated by replacing the Secret (docs/operations.md), and the
kubelet does not change the three files at one instant for every way a Secret is mounted
(a Secret mounted per key with ``subPath``, or updated in two steps, changes them one by
one). Reading each file on its own schedule signed with a new private key against the old
public key and failed every publish. ``KeyFiles.load`` reads all three every time (small,
bounded reads), and takes a new set only once it belongs together: the key decrypts with
the password, and its public half is the public key file's key. Until then it keeps
signing with the last pair that did, and a set that stays mismatched for ``settle`` is
said once, in one line, not every cycle. Decrypting costs one scrypt run (up to 128 MiB
and half a second), done once per distinct set of file contents.

A file that cannot be read or is not a key at all is an error at once (someone broke the
Secret; signing must fail visibly rather than go on with a key nobody can rotate). At the
start there is no old pair: every problem is an error, which the wiring turns into a
``ConfigError`` naming ``setting``.

Deliberately not here: the key formats (``signing.keys``), watching the files (a publish
asks; nothing polls in between).
"""

from __future__ import annotations

import hashlib
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from releasebot.domain.shared.errors import SigningError
from releasebot.edge.parse import ValueRefusedError, read_regular_file
from releasebot.signing.keys import (
    MAX_KEY_FILE_BYTES,
    SigningKey,
    VerifyingKey,
    WrongPasswordError,
    load_signing_key,
    load_verifying_key,
)

log = logging.getLogger("releasebot.signing")

MAX_PASSWORD_BYTES = 1024
"""A key's password file holds one line; anything longer is the wrong file."""
SETTLE = timedelta(minutes=2)
"""How long a mismatched set may last before it is said: the kubelet refreshes a mounted
Secret within its sync period plus its cache TTL (about a minute each by default)."""


class KeyFileError(SigningError):
    """A key file problem; ``setting`` names the setting that points at the file."""

    def __init__(self, setting: str, message: str) -> None:
        super().__init__(message)
        self.setting = setting


class MismatchedKeysError(KeyFileError):
    """The files are each readable but do not belong together (yet)."""


@dataclass(frozen=True)
class KeyPair:
    """A private key and the public key it is checked against (its own half)."""

    signing: SigningKey = field(repr=False)
    public: VerifyingKey

    @classmethod
    def of(cls, signing: SigningKey) -> KeyPair:
        return cls(signing, signing.public)

    @property
    def fingerprint(self) -> str:
        return self.public.fingerprint


def _utc_now() -> datetime:
    return datetime.now(UTC)


class KeyFiles:
    """``cosign.key`` (+ ``cosign.password``, + ``cosign.pub``) read together; see above."""

    def __init__(
        self,
        key_path: str,
        *,
        password: bytes = b"",
        password_path: str = "",
        public_path: str = "",
        clock: Callable[[], datetime] = _utc_now,
        settle: timedelta = SETTLE,
    ) -> None:
        self._key_path = key_path
        self._password = password
        self._password_path = password_path
        self._public_path = public_path
        self._clock = clock
        self._settle = settle
        self._lock = threading.Lock()
        self._current: tuple[bytes, KeyPair] | None = None
        self._refused: tuple[bytes, MismatchedKeysError] | None = None
        self._mismatched_since: datetime | None = None
        self._told = False

    def __repr__(self) -> str:
        return f"KeyFiles({self._key_path!r})"

    def load(self) -> KeyPair:
        """The pair to sign with now. ``KeyFileError`` when a file is unreadable or not a
        key, or (before any pair was read) when the files do not belong together."""
        key_pem, password, public_pem = self._read()
        digest = hashlib.sha256(
            b"\0".join(hashlib.sha256(part).digest() for part in (key_pem, password, public_pem))
        ).digest()
        with self._lock:
            if self._current is not None and self._current[0] == digest:
                return self._current[1]
            if self._refused is not None and self._refused[0] == digest:
                return self._keep_old(self._refused[1])
            try:
                pair = self._pair(key_pem, password, public_pem)
            except MismatchedKeysError as error:
                self._refused = (digest, error)
                return self._keep_old(error)
            if self._current is not None:
                log.info(
                    "signing key rotated: images are now signed with key %s (was %s)",
                    pair.fingerprint,
                    self._current[1].fingerprint,
                )
            self._current = (digest, pair)
            self._refused = None
            self._mismatched_since = None
            self._told = False
            return pair

    def _keep_old(self, error: MismatchedKeysError) -> KeyPair:
        if self._current is None:
            raise error
        now = self._clock()
        if self._mismatched_since is None:
            self._mismatched_since = now
        if not self._told and now - self._mismatched_since >= self._settle:
            self._told = True
            log.warning(
                "%s; still signing with key %s until the key, password and public key "
                "files match again (check the Secret)",
                error,
                self._current[1].fingerprint,
            )
        return self._current[1]

    def _read(self) -> tuple[bytes, bytes, bytes]:
        key_pem = _read("signing.key_file", "signing key", self._key_path, MAX_KEY_FILE_BYTES)
        password = self._password
        if not password and self._password_path:
            password = _read(
                "signing.password_file", "password", self._password_path, MAX_PASSWORD_BYTES
            ).rstrip(b"\r\n")
        public_pem = b""
        if self._public_path:
            public_pem = _read(
                "signing.public_key_file", "public key", self._public_path, MAX_KEY_FILE_BYTES
            )
        return key_pem, password, public_pem

    def _pair(self, key_pem: bytes, password: bytes, public_pem: bytes) -> KeyPair:
        try:
            key = load_signing_key(key_pem, password, source=self._key_path)
        except WrongPasswordError as error:
            raise MismatchedKeysError("signing.key_file", str(error)) from None
        except SigningError as error:
            raise KeyFileError("signing.key_file", str(error)) from None
        if not public_pem:
            return KeyPair.of(key)
        try:
            public = load_verifying_key(public_pem, source=self._public_path)
        except SigningError as error:
            raise KeyFileError("signing.public_key_file", str(error)) from None
        if public.fingerprint != key.public.fingerprint:
            raise MismatchedKeysError(
                "signing.public_key_file",
                f"public key {self._public_path} is {public.fingerprint}, not the public half "
                f"of signing key {self._key_path} ({key.public.fingerprint})",
            )
        return KeyPair(key, public)


def _read(setting: str, what: str, path: str, max_bytes: int) -> bytes:
    try:
        return read_regular_file(path, max_bytes)
    except ValueRefusedError as error:
        raise KeyFileError(setting, f"{what}: {error}") from None
