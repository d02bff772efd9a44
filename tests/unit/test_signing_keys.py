"""The signing key formats: cosign's encrypted PEM (scrypt + NaCl secretbox over PKCS #8),
plain PKCS #8 and SEC 1 PEMs, public keys, fingerprints, and every way a key file can be
wrong (one line naming the file, never a byte of the key or the password)."""

from __future__ import annotations

import base64
import json

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa

from releasebot.domain.shared.errors import SigningError
from releasebot.signing.keys import (
    encrypt_key,
    generate_key,
    load_signing_key,
    load_verifying_key,
)


def _body(pem: bytes) -> dict[str, object]:
    lines = pem.decode().strip().splitlines()[1:-1]
    return json.loads(base64.b64decode("".join(lines)))


def _repem(kind: str, document: dict[str, object]) -> bytes:
    encoded = base64.b64encode(json.dumps(document).encode()).decode()
    return f"-----BEGIN {kind}-----\n{encoded}\n-----END {kind}-----\n".encode()


def test_cosign_encrypted_key_round_trips_and_has_cosigns_layout() -> None:
    key = generate_key()
    pem = encrypt_key(key, b"correct horse")
    assert pem.startswith(b"-----BEGIN ENCRYPTED SIGSTORE PRIVATE KEY-----\n")
    body = _body(pem)
    assert body["kdf"] == {
        "name": "scrypt",
        "params": {"N": 65536, "r": 8, "p": 1},
        "salt": body["kdf"]["salt"],  # type: ignore[index]
    }
    assert body["cipher"]["name"] == "nacl/secretbox"  # type: ignore[index]
    assert len(base64.b64decode(body["cipher"]["nonce"])) == 24  # type: ignore[index]
    loaded = load_signing_key(pem, b"correct horse", source="cosign.key")
    assert loaded.public.fingerprint == key.public.fingerprint


def test_the_older_cosign_pem_type_is_read_too() -> None:
    pem = encrypt_key(generate_key(), b"pw").replace(b"SIGSTORE", b"COSIGN")
    assert load_signing_key(pem, b"pw", source="old.key").public.fingerprint.startswith("sha256:")


def test_a_wrong_password_is_one_line_without_secrets() -> None:
    pem = encrypt_key(generate_key(), b"right")
    with pytest.raises(SigningError) as caught:
        load_signing_key(pem, b"wrong-password-123", source="/keys/cosign.key")
    message = str(caught.value)
    assert "/keys/cosign.key" in message
    assert "wrong password" in message
    assert "wrong-password-123" not in message
    assert "\n" not in message


def test_hostile_scrypt_parameters_are_refused_before_any_work() -> None:
    pem = encrypt_key(generate_key(), b"pw")
    body = _body(pem)
    body["kdf"]["params"]["N"] = 2**30  # type: ignore[index]
    with pytest.raises(SigningError, match="unexpected scrypt parameters"):
        load_signing_key(_repem("ENCRYPTED SIGSTORE PRIVATE KEY", body), b"pw", source="k")


@pytest.mark.parametrize(
    ("pem", "problem"),
    [
        (b"", "not a PEM file"),
        (b"\xff\xfe", "not a PEM file"),
        (b"-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----\n", "not a private key"),
        (b"-----BEGIN PRIVATE KEY-----\nAAAA", "not closed"),
        (b"-----BEGIN PRIVATE KEY-----\n!!!\n-----END PRIVATE KEY-----\n", "not base64"),
        (b"-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n", "not a readable"),
        (b"x" * 20000, "larger than"),
    ],
)
def test_malformed_key_files_are_one_line_errors(pem: bytes, problem: str) -> None:
    with pytest.raises(SigningError, match=problem) as caught:
        load_signing_key(pem, b"", source="bad.key")
    assert "\n" not in str(caught.value)


def test_plain_pkcs8_and_sec1_pems_are_read() -> None:
    private = ec.generate_private_key(ec.SECP256R1())
    for form in (serialization.PrivateFormat.PKCS8, serialization.PrivateFormat.TraditionalOpenSSL):
        pem = private.private_bytes(serialization.Encoding.PEM, form, serialization.NoEncryption())
        key = load_signing_key(pem, b"", source="plain.key")
        assert key.public.der == private.public_key().public_bytes(
            serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
        )


def test_other_key_types_are_refused() -> None:
    pem = rsa.generate_private_key(public_exponent=65537, key_size=2048).private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    with pytest.raises(SigningError, match="ECDSA P-256"):
        load_signing_key(pem, b"", source="rsa.key")
    p384 = ec.generate_private_key(ec.SECP384R1()).public_key()
    pub = p384.public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    with pytest.raises(SigningError, match="ECDSA P-256"):
        load_verifying_key(pub, source="p384.pub")


def test_public_key_pem_round_trips_and_verifies_signatures() -> None:
    key = generate_key()
    public = load_verifying_key(key.public.pem, source="cosign.pub")
    signature = key.sign(b"payload")
    assert public.verify(signature, b"payload")
    assert not public.verify(signature, b"payload!")
    assert not public.verify(b"garbage", b"payload")
    assert key.sign(b"payload") == signature  # deterministic (RFC 6979)


def test_repr_shows_the_fingerprint_only() -> None:
    key = generate_key()
    assert repr(key) == f"SigningKey({key.public.fingerprint})"


@pytest.mark.parametrize(
    ("form", "how"),
    [
        (serialization.PrivateFormat.PKCS8, "openssl pkcs8"),
        (serialization.PrivateFormat.TraditionalOpenSSL, "openssl ec"),
    ],
    ids=["pkcs8-encrypted", "sec1-proc-type-encrypted"],
)
def test_a_key_encrypted_by_openssl_is_named_with_what_to_do(
    form: serialization.PrivateFormat, how: str
) -> None:
    pem = ec.generate_private_key(ec.SECP256R1()).private_bytes(
        serialization.Encoding.PEM, form, serialization.BestAvailableEncryption(b"pw")
    )
    with pytest.raises(SigningError) as caught:
        load_signing_key(pem, b"pw", source="/keys/cosign.key")
    message = str(caught.value)
    assert "encrypted by OpenSSL" in message
    assert how in message
    assert "cosign generate-key-pair" in message
    assert "base64" not in message
    assert "\n" not in message
