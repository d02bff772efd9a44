"""The signing key pair: ECDSA P-256, read from cosign's PEM formats, never shown.

cosign's ``generate-key-pair`` writes the private key as PEM type ``ENCRYPTED SIGSTORE
PRIVATE KEY`` (``ENCRYPTED COSIGN PRIVATE KEY`` before cosign 2.3). The PEM body is JSON::

    {"kdf": {"name": "scrypt", "params": {"N": 65536, "r": 8, "p": 1}, "salt": "<b64>"},
     "cipher": {"name": "nacl/secretbox", "nonce": "<b64, 24 bytes>"},
     "ciphertext": "<b64: secretbox(PKCS #8 DER of the key)>"}

The secretbox key is scrypt(password, salt, N, r, p, 32 bytes). cosign encrypts through
go-securesystemslib's ``encrypted`` package, which writes N=65536 (since cosign v0.7.0;
N=32768 before) and reads exactly three parameter sets: N = 2**15, 2**16 or 2**17, each
with r=8 and p=1. Those three are accepted here too, and nothing else: scrypt needs
128 * r * N bytes of memory, so the largest costs 128 MiB and about half a second once per
key change, while a hostile file asking for N=2**30 would cost 128 GiB. ``encrypt_key``
writes what cosign writes today (N=65536). An unencrypted PKCS #8 (``PRIVATE KEY``) or
SEC 1 (``EC PRIVATE KEY``) PEM is read too. Public keys are PKIX ``PUBLIC KEY`` PEMs, as
``cosign.pub``.

Every error names the file and the problem, never a byte of the key or the password.
Deliberately not here: RSA and Ed25519 keys (cosign's default and every policy example is
ECDSA P-256), keys encrypted by OpenSSL (refused with what to do), KMS and hardware keys.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import secrets
from dataclasses import dataclass, field

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.backends.openssl import backend as openssl_backend
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from nacl.exceptions import CryptoError
from nacl.secret import SecretBox

from releasebot.domain.shared.errors import SigningError
from releasebot.edge.text import one_line

ENCRYPTED_TYPES = ("ENCRYPTED SIGSTORE PRIVATE KEY", "ENCRYPTED COSIGN PRIVATE KEY")
SCRYPT_N, SCRYPT_R, SCRYPT_P = 65536, 8, 1
"""What ``encrypt_key`` writes: go-securesystemslib's "standard" set, cosign's since v0.7.0."""
SCRYPT_ACCEPTED = frozenset({(2**15, 8, 1), (2**16, 8, 1), (2**17, 8, 1)})
"""(N, r, p) sets cosign reads (go-securesystemslib ``CheckParams``: legacy, standard,
OWASP); at most 128 * 8 * 2**17 bytes = 128 MiB of memory."""
SALT_BYTES = 32
MAX_KEY_FILE_BYTES = 16 * 1024
"""A PEM key is a few hundred bytes; anything much bigger is not one."""
_SCRYPT_MAXMEM = max(128 * r * n for n, r, _ in SCRYPT_ACCEPTED) + 1024 * 1024  # + B, p*128*r
_DETERMINISTIC = bool(openssl_backend.ecdsa_deterministic_supported())


class WrongPasswordError(SigningError):
    """The key did not decrypt with the password: a wrong password, or a key and a
    password from two different pairs (halfway through a rotation)."""


@dataclass(frozen=True)
class VerifyingKey:
    """A public key that checks signatures; ``fingerprint`` identifies it everywhere."""

    key: ec.EllipticCurvePublicKey = field(repr=False)

    @property
    def der(self) -> bytes:
        return self.key.public_bytes(
            serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
        )

    @property
    def pem(self) -> bytes:
        return self.key.public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )

    @property
    def fingerprint(self) -> str:
        """``sha256:<hex>`` of the DER public key (the key ID sigstore tools print)."""
        return "sha256:" + hashlib.sha256(self.der).hexdigest()

    def verify(self, signature: bytes, data: bytes) -> bool:
        try:
            self.key.verify(signature, data, ec.ECDSA(hashes.SHA256()))
        except (InvalidSignature, ValueError):
            return False
        return True

    def __repr__(self) -> str:
        return f"VerifyingKey({self.fingerprint})"


@dataclass(frozen=True)
class SigningKey:
    """A private key. ``repr`` shows only the public fingerprint."""

    key: ec.EllipticCurvePrivateKey = field(repr=False)

    @property
    def public(self) -> VerifyingKey:
        return VerifyingKey(self.key.public_key())

    def sign(self, data: bytes) -> bytes:
        """An ASN.1 DER ECDSA-SHA256 signature over ``data`` (what cosign stores).

        Deterministic (RFC 6979) where OpenSSL offers it: the same payload gets the same
        signature, so attaching twice pushes the same bytes instead of a second signature.
        """
        return self.key.sign(data, ec.ECDSA(hashes.SHA256(), deterministic_signing=_DETERMINISTIC))

    def __repr__(self) -> str:
        return f"SigningKey({self.public.fingerprint})"


def generate_key() -> SigningKey:
    return SigningKey(ec.generate_private_key(ec.SECP256R1()))


def load_signing_key(pem: bytes, password: bytes, *, source: str) -> SigningKey:
    """The private key in ``pem`` (one of the formats above); ``source`` names it in errors."""
    _refuse_openssl_encryption(pem, source)
    kind, body = _pem_block(pem, source)
    if kind in ENCRYPTED_TYPES:
        der = _decrypt(body, password, source)
    elif kind in ("PRIVATE KEY", "EC PRIVATE KEY"):
        der = body
    else:
        raise SigningError(
            f"signing key {source}: a PEM of type {one_line(kind, 40)!r} is not a private key "
            f"(expected {ENCRYPTED_TYPES[0]!r} from cosign generate-key-pair, or PRIVATE KEY)"
        )
    try:
        key = serialization.load_der_private_key(der, password=None)
    except (ValueError, TypeError, binascii.Error):
        raise SigningError(f"signing key {source}: not a readable private key") from None
    if not isinstance(key, ec.EllipticCurvePrivateKey) or key.curve.name != "secp256r1":
        raise SigningError(f"signing key {source}: must be an ECDSA P-256 key")
    return SigningKey(key)


def load_verifying_key(pem: bytes, *, source: str) -> VerifyingKey:
    kind, body = _pem_block(pem, source)
    if kind != "PUBLIC KEY":
        raise SigningError(
            f"public key {source}: a PEM of type {one_line(kind, 40)!r} is not a PUBLIC KEY"
        )
    try:
        key = serialization.load_der_public_key(body)
    except (ValueError, TypeError):
        raise SigningError(f"public key {source}: not a readable public key") from None
    if not isinstance(key, ec.EllipticCurvePublicKey) or key.curve.name != "secp256r1":
        raise SigningError(f"public key {source}: must be an ECDSA P-256 key")
    return VerifyingKey(key)


def encrypt_key(key: SigningKey, password: bytes, *, scrypt_n: int = SCRYPT_N) -> bytes:
    """``key`` as cosign writes it: an ``ENCRYPTED SIGSTORE PRIVATE KEY`` PEM; ``scrypt_n``
    another N cosign reads (32768 for a key as cosign before v0.7.0 wrote it)."""
    if (scrypt_n, SCRYPT_R, SCRYPT_P) not in SCRYPT_ACCEPTED:
        raise ValueError(f"scrypt N={scrypt_n} is not one cosign reads")
    der = key.key.private_bytes(
        serialization.Encoding.DER,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    salt = secrets.token_bytes(SALT_BYTES)
    nonce = secrets.token_bytes(SecretBox.NONCE_SIZE)
    box = SecretBox(_derive(password, salt, scrypt_n, SCRYPT_R, SCRYPT_P))
    sealed = box.encrypt(der, nonce).ciphertext
    document = {
        "kdf": {
            "name": "scrypt",
            "params": {"N": scrypt_n, "r": SCRYPT_R, "p": SCRYPT_P},
            "salt": _b64(salt),
        },
        "cipher": {"name": "nacl/secretbox", "nonce": _b64(nonce)},
        "ciphertext": _b64(sealed),
    }
    return _pem(ENCRYPTED_TYPES[0], json.dumps(document, separators=(",", ":")).encode())


def _decrypt(body: bytes, password: bytes, source: str) -> bytes:
    problem = f"signing key {source}"
    try:
        document = json.loads(body)
        kdf, cipher = document["kdf"], document["cipher"]
        params = kdf["params"]
        salt = base64.b64decode(kdf["salt"], validate=True)
        nonce = base64.b64decode(cipher["nonce"], validate=True)
        sealed = base64.b64decode(document["ciphertext"], validate=True)
        names = (kdf["name"], cipher["name"])
        chosen = (params["N"], params["r"], params["p"])
    except (ValueError, KeyError, TypeError, binascii.Error):
        raise SigningError(f"{problem}: not cosign's encrypted key format") from None
    if names != ("scrypt", "nacl/secretbox"):
        raise SigningError(f"{problem}: unsupported encryption {names[0]}/{names[1]}")
    if chosen not in SCRYPT_ACCEPTED or not all(type(value) is int for value in chosen):
        raise SigningError(
            f"{problem}: unexpected scrypt parameters {one_line(repr(chosen), 80)} (cosign "
            "writes and reads N=32768, 65536 or 131072 with r=8, p=1): make the key again "
            "with cosign generate-key-pair"
        )
    if len(nonce) != SecretBox.NONCE_SIZE or not salt:
        raise SigningError(f"{problem}: malformed nonce or salt")
    try:
        n, r, p = chosen
        return SecretBox(_derive(password, salt, n, r, p)).decrypt(sealed, nonce)
    except CryptoError:
        raise WrongPasswordError(
            f"{problem}: cannot decrypt it: wrong password (signing.password / "
            "signing.password_file) or a damaged file"
        ) from None


def _derive(password: bytes, salt: bytes, n: int, r: int, p: int) -> bytes:
    return hashlib.scrypt(
        password,
        salt=salt,
        n=n,
        r=r,
        p=p,
        maxmem=_SCRYPT_MAXMEM,
        dklen=SecretBox.KEY_SIZE,
    )


def _refuse_openssl_encryption(pem: bytes, source: str) -> None:
    """OpenSSL's own encryptions, named with what to do (not "PEM body is not base64")."""
    if b"-----BEGIN ENCRYPTED PRIVATE KEY-----" in pem:
        how = "openssl pkcs8 -in KEY -out plain.key"
    elif b"Proc-Type: 4,ENCRYPTED" in pem:
        how = "openssl ec -in KEY -out plain.key"
    else:
        return
    raise SigningError(
        f"signing key {source}: encrypted by OpenSSL, which releasebot does not read: "
        f"decrypt it ({how}) and mount plain.key (the Secret protects it), or make a new "
        "pair with cosign generate-key-pair"
    )


def _pem_block(pem: bytes, source: str) -> tuple[str, bytes]:
    """The type and decoded body of the first PEM block in ``pem``."""
    if len(pem) > MAX_KEY_FILE_BYTES:
        raise SigningError(f"key {source}: larger than {MAX_KEY_FILE_BYTES} bytes: not a key")
    try:
        text = pem.decode("ascii")
    except UnicodeDecodeError:
        raise SigningError(f"key {source}: not a PEM file") from None
    begin = text.find("-----BEGIN ")
    end_of_label = text.find("-----", begin + 11) if begin >= 0 else -1
    if begin < 0 or end_of_label < 0:
        raise SigningError(f"key {source}: not a PEM file (no BEGIN line)")
    kind = text[begin + 11 : end_of_label]
    footer = f"-----END {kind}-----"
    stop = text.find(footer, end_of_label)
    if stop < 0 or not kind.replace(" ", "").isalnum():
        raise SigningError(f"key {source}: PEM block {one_line(kind, 40)!r} is not closed")
    lines = text[end_of_label + 5 : stop].split()
    try:
        return kind, base64.b64decode("".join(lines), validate=True)
    except (ValueError, binascii.Error):
        raise SigningError(f"key {source}: PEM body is not base64") from None


def _pem(kind: str, body: bytes) -> bytes:
    encoded = base64.b64encode(body).decode("ascii")
    lines = [encoded[i : i + 64] for i in range(0, len(encoded), 64)]
    return ("\n".join([f"-----BEGIN {kind}-----", *lines, f"-----END {kind}-----"]) + "\n").encode()


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")
