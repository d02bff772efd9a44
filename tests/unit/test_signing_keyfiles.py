"""The key, password and public key files read as one set (``signing/keyfiles.py``).

Covers a rotation under a running signer with the files rewritten one after the other, in
every order: the old pair signs meanwhile, the new one once all three belong together;
a set that stays mismatched is said once (after the settle time, on an injected clock),
not at every signature; an unchanged set is not decrypted again; a file that is broken
rather than mismatched fails at once; at the start (no old pair) a mismatch is an error
naming the setting.
"""

from __future__ import annotations

import itertools
import logging
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from releasebot.domain.shared.errors import SigningError
from releasebot.signing.keyfiles import KeyFileError, KeyFiles, MismatchedKeysError
from releasebot.signing.keys import SigningKey, encrypt_key, generate_key

SETTLE = timedelta(minutes=2)


class Clock:
    def __init__(self) -> None:
        self.now = datetime(2026, 12, 1, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.now


def write_set(directory: Path, key: SigningKey, password: bytes) -> dict[str, bytes]:
    """The three files' new contents (not written yet)."""
    return {
        "cosign.key": encrypt_key(key, password),
        "cosign.password": password + b"\n",
        "cosign.pub": key.public.pem,
    }


@pytest.fixture
def clock() -> Clock:
    return Clock()


def key_files(directory: Path, clock: Clock) -> KeyFiles:
    return KeyFiles(
        str(directory / "cosign.key"),
        password_path=str(directory / "cosign.password"),
        public_path=str(directory / "cosign.pub"),
        clock=clock,
        settle=SETTLE,
    )


ORDERS = list(itertools.permutations(["cosign.key", "cosign.password", "cosign.pub"]))


@pytest.mark.parametrize("order", ORDERS, ids=["-then-".join(o) for o in ORDERS])
def test_a_rotation_file_by_file_keeps_the_old_pair_until_the_new_set_matches(
    tmp_path: Path, clock: Clock, order: tuple[str, ...], caplog: pytest.LogCaptureFixture
) -> None:
    old, new = generate_key(), generate_key()
    for name, body in write_set(tmp_path, old, b"old-pw").items():
        (tmp_path / name).write_bytes(body)
    signer = key_files(tmp_path, clock)
    assert signer.load().fingerprint == old.public.fingerprint

    rotated = write_set(tmp_path, new, b"new-pw")
    with caplog.at_level(logging.INFO, logger="releasebot.signing"):
        for name in order[:-1]:
            (tmp_path / name).write_bytes(rotated[name])
            clock.now += timedelta(seconds=20)
            pair = signer.load()
            assert pair.fingerprint == old.public.fingerprint, name
            assert pair.public.verify(pair.signing.sign(b"payload"), b"payload")
        (tmp_path / order[-1]).write_bytes(rotated[order[-1]])
        pair = signer.load()
    assert pair.fingerprint == new.public.fingerprint
    assert pair.public.verify(pair.signing.sign(b"payload"), b"payload")
    warnings = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert warnings == []  # a rotation that completes within the settle time says nothing
    rotated_lines = [r.getMessage() for r in caplog.records if "rotated" in r.getMessage()]
    assert rotated_lines == [
        f"signing key rotated: images are now signed with key {new.public.fingerprint} "
        f"(was {old.public.fingerprint})"
    ]


@pytest.mark.parametrize("changed", ["cosign.key", "cosign.password", "cosign.pub"])
def test_a_set_that_stays_mismatched_is_said_once(
    tmp_path: Path, clock: Clock, changed: str, caplog: pytest.LogCaptureFixture
) -> None:
    old, new = generate_key(), generate_key()
    for name, body in write_set(tmp_path, old, b"old-pw").items():
        (tmp_path / name).write_bytes(body)
    signer = key_files(tmp_path, clock)
    signer.load()
    (tmp_path / changed).write_bytes(write_set(tmp_path, new, b"new-pw")[changed])
    with caplog.at_level(logging.WARNING, logger="releasebot.signing"):
        for _ in range(30):  # a cycle a minute for half an hour
            assert signer.load().fingerprint == old.public.fingerprint
            clock.now += timedelta(minutes=1)
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1, lines
    assert "\n" not in lines[0]
    assert f"still signing with key {old.public.fingerprint}" in lines[0]
    assert "new-pw" not in lines[0]
    assert "old-pw" not in lines[0]


def test_an_unchanged_set_is_decrypted_once(tmp_path: Path, clock: Clock) -> None:
    for name, body in write_set(tmp_path, generate_key(), b"pw").items():
        (tmp_path / name).write_bytes(body)
    signer = key_files(tmp_path, clock)
    assert signer.load() is signer.load()  # the same pair: no second scrypt run


def test_a_mismatched_set_is_not_decrypted_again_every_cycle(tmp_path: Path, clock: Clock) -> None:
    old = generate_key()
    for name, body in write_set(tmp_path, old, b"pw").items():
        (tmp_path / name).write_bytes(body)
    signer = key_files(tmp_path, clock)
    first = signer.load()
    (tmp_path / "cosign.password").write_bytes(b"other\n")
    assert signer.load() is first
    refused = signer._refused
    assert refused is not None
    assert signer.load() is first
    assert signer._refused is refused  # the same refusal, remembered by content


def test_a_broken_file_fails_at_once_even_with_an_old_pair(tmp_path: Path, clock: Clock) -> None:
    for name, body in write_set(tmp_path, generate_key(), b"pw").items():
        (tmp_path / name).write_bytes(body)
    signer = key_files(tmp_path, clock)
    signer.load()
    (tmp_path / "cosign.key").write_text("garbage")
    with pytest.raises(KeyFileError, match="not a PEM") as caught:
        signer.load()
    assert caught.value.setting == "signing.key_file"
    (tmp_path / "cosign.key").unlink()
    with pytest.raises(SigningError, match="not found"):
        signer.load()


@pytest.mark.parametrize(
    ("changed", "setting"),
    [("cosign.pub", "signing.public_key_file"), ("cosign.password", "signing.key_file")],
)
def test_at_the_start_a_mismatch_is_an_error_naming_the_setting(
    tmp_path: Path, clock: Clock, changed: str, setting: str
) -> None:
    for name, body in write_set(tmp_path, generate_key(), b"pw").items():
        (tmp_path / name).write_bytes(body)
    (tmp_path / changed).write_bytes(write_set(tmp_path, generate_key(), b"x")[changed])
    with pytest.raises(MismatchedKeysError) as caught:
        key_files(tmp_path, clock).load()
    assert caught.value.setting == setting
    assert "\n" not in str(caught.value)


def test_the_password_setting_wins_over_no_file(tmp_path: Path, clock: Clock) -> None:
    key = generate_key()
    (tmp_path / "cosign.key").write_bytes(encrypt_key(key, b"env-pw"))
    signer = KeyFiles(str(tmp_path / "cosign.key"), password=b"env-pw", clock=clock)
    assert signer.load().fingerprint == key.public.fingerprint
