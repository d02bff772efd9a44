"""The ``[signing]`` settings, their wiring and what a person sees: off by default with one
warning, a bad key or password stops the start with one line naming the setting, the
password never shows, and the Slack message of a signed image names the key."""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest

from releasebot.config import load_settings
from releasebot.domain.shared.errors import ConfigError
from releasebot.domain.targets.events import EventKind, read_event
from releasebot.notify.render import render_message
from releasebot.registry.oras import OrasRegistry
from releasebot.signing.keys import encrypt_key, generate_key
from releasebot.wiring.signing import make_attestor


def test_signing_is_off_by_default_and_says_so(caplog: pytest.LogCaptureFixture) -> None:
    settings = load_settings(None, environ={})
    assert not settings.signing.enabled
    registry = OrasRegistry("registry.invalid/nvidia/driver")
    with httpx.Client() as http, caplog.at_level(logging.WARNING, logger="releasebot"):
        assert make_attestor(settings, registry, http) is None
    registry.close()
    assert any("UNSIGNED" in record.getMessage() for record in caplog.records)


def test_a_missing_key_file_names_the_setting(tmp_path: Path) -> None:
    config = tmp_path / "releasebot.toml"
    config.write_text('[signing]\nkey_file = "/nope/cosign.key"\n')
    with pytest.raises(ConfigError, match=r"signing\.key_file: file /nope/cosign\.key not found"):
        load_settings(config, environ={})
    named = r"RELEASEBOT_SIGNING_PASSWORD_FILE: file /nope/password not found"
    with pytest.raises(ConfigError, match=named):
        load_settings(None, environ={"RELEASEBOT_SIGNING_PASSWORD_FILE": "/nope/password"})


def test_a_wrong_password_stops_the_start_in_one_line(tmp_path: Path) -> None:
    path = tmp_path / "cosign.key"
    path.write_bytes(encrypt_key(generate_key(), b"right"))
    settings = load_settings(
        None,
        environ={
            "RELEASEBOT_SIGNING_KEY_FILE": str(path),
            "RELEASEBOT_SIGNING_PASSWORD": "wrong-one",
        },
    )
    assert "wrong-one" not in repr(settings)
    registry = OrasRegistry("registry.invalid/nvidia/driver")
    with httpx.Client() as http, pytest.raises(ConfigError) as caught:
        make_attestor(settings, registry, http)
    registry.close()
    assert str(caught.value).startswith("config: signing.key_file: signing key ")
    assert "wrong password" in str(caught.value)
    assert "wrong-one" not in str(caught.value)


def test_a_public_key_that_is_not_the_keys_half_is_refused(tmp_path: Path) -> None:
    (tmp_path / "cosign.key").write_bytes(encrypt_key(generate_key(), b""))
    (tmp_path / "cosign.pub").write_bytes(generate_key().public.pem)
    settings = load_settings(
        None,
        environ={
            "RELEASEBOT_SIGNING_KEY_FILE": str(tmp_path / "cosign.key"),
            "RELEASEBOT_SIGNING_PUBLIC_KEY_FILE": str(tmp_path / "cosign.pub"),
        },
    )
    registry = OrasRegistry("registry.invalid/nvidia/driver")
    with httpx.Client() as http, pytest.raises(ConfigError, match="not the public half"):
        make_attestor(settings, registry, http)
    registry.close()


def test_the_published_message_shows_the_signing_key() -> None:
    fingerprint = "sha256:" + "ab" * 32
    payload = {"tag": "t", "digest": "sha256:" + "cd" * 32, "signed_by": fingerprint}
    event = read_event(
        EventKind.TAG_PUBLISHED, "t#1", "t", datetime(2026, 1, 1, tzinfo=UTC), payload
    )
    message = render_message([event], "registry.example.com/nvidia/driver")
    assert f"signed by {fingerprint}" in message.text
    assert any(fingerprint in str(block) and "Signed" in str(block) for block in message.blocks)
    unsigned = read_event(
        EventKind.TAG_PUBLISHED, "t#1", "t", event.created_at, {**payload, "signed_by": None}
    )
    plain = render_message([unsigned], "registry.example.com/nvidia/driver")
    assert "signed" not in plain.text.lower()
    assert "Signed" not in str(plain.blocks)
