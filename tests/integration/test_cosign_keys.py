"""The keys a real cosign makes are the keys releasebot reads, and the other way round.

cosign 2.5 (Debian 13's, ``tests.support.cosign``) writes a key pair with
``generate-key-pair`` in a temporary directory; releasebot must read the private key with
its password (scrypt N=65536 since cosign v0.7.0), find the same public key as
``cosign.pub``, and sign what that public key verifies. The other way: cosign must read a
key releasebot encrypted, with every scrypt parameter set releasebot accepts (N = 2**15,
2**16, 2**17; r=8, p=1), and print the same public key. A set cosign refuses is refused
by releasebot too, in one line, before any scrypt work.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest

from releasebot.domain.shared.errors import SigningError
from releasebot.signing.keys import (
    SCRYPT_ACCEPTED,
    encrypt_key,
    generate_key,
    load_signing_key,
    load_verifying_key,
)
from tests.support.cosign import Cosign, find_cosign

PASSWORD = "correct horse battery"


@pytest.fixture
def cosign(tmp_path: Path) -> Cosign:
    return find_cosign(tmp_path / "cosign-work")


def _kdf_params(pem: bytes) -> dict[str, int]:
    lines = pem.decode().strip().splitlines()[1:-1]
    return json.loads(base64.b64decode("".join(lines)))["kdf"]["params"]  # type: ignore[no-any-return]


@pytest.mark.timeout(120)
def test_a_key_cosign_generated_is_read_and_signs_for_its_cosign_pub(
    cosign: Cosign, tmp_path: Path
) -> None:
    key_path, pub_path = cosign.generate_key_pair(tmp_path / "keys", PASSWORD)
    pem = key_path.read_bytes()
    assert _kdf_params(pem) == {"N": 65536, "r": 8, "p": 1}  # what cosign writes today
    key = load_signing_key(pem, PASSWORD.encode(), source=str(key_path))
    public = load_verifying_key(pub_path.read_bytes(), source=str(pub_path))
    assert key.public.fingerprint == public.fingerprint
    assert public.verify(key.sign(b"payload"), b"payload")
    with pytest.raises(SigningError, match="wrong password"):
        load_signing_key(pem, b"not it", source=str(key_path))


@pytest.mark.timeout(180)
@pytest.mark.parametrize("n", sorted(n for n, _, _ in SCRYPT_ACCEPTED))
def test_cosign_reads_the_keys_releasebot_writes(cosign: Cosign, tmp_path: Path, n: int) -> None:
    key = generate_key()
    path = tmp_path / "cosign.key"
    path.write_bytes(encrypt_key(key, PASSWORD.encode(), scrypt_n=n))
    printed = cosign.public_key(path, PASSWORD)
    assert printed.returncode == 0, printed.stderr
    shown = load_verifying_key(printed.stdout.encode(), source="cosign public-key")
    assert shown.fingerprint == key.public.fingerprint
    again = load_signing_key(path.read_bytes(), PASSWORD.encode(), source=str(path))
    assert again.public.fingerprint == key.public.fingerprint


@pytest.mark.timeout(120)
@pytest.mark.parametrize(
    "params",
    [{"N": 2**18, "r": 8, "p": 1}, {"N": 65536, "r": 16, "p": 1}, {"N": 65536, "r": 8, "p": 2}],
    ids=["N-2^18", "r-16", "p-2"],
)
def test_parameters_cosign_refuses_are_refused_too(
    cosign: Cosign, tmp_path: Path, params: dict[str, int]
) -> None:
    pem = encrypt_key(generate_key(), PASSWORD.encode())
    lines = pem.decode().strip().splitlines()
    document = json.loads(base64.b64decode("".join(lines[1:-1])))
    document["kdf"]["params"] = params
    body = base64.b64encode(json.dumps(document).encode()).decode()
    path = tmp_path / "cosign.key"
    path.write_text(f"{lines[0]}\n{body}\n{lines[-1]}\n")
    refused = cosign.public_key(path, PASSWORD)
    assert refused.returncode != 0
    with pytest.raises(SigningError, match="unexpected scrypt parameters") as caught:
        load_signing_key(path.read_bytes(), PASSWORD.encode(), source=str(path))
    assert "\n" not in str(caught.value)
