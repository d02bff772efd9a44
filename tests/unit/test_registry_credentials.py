"""When a cloud token is replaced, and what of an issuer's answer is believed
(``registry/credentials.py``), on a test clock; and the one-line errors of the wiring
for ``registry.auth``."""

from __future__ import annotations

import sys
from datetime import UTC, datetime, timedelta

import pytest

from releasebot.config import Settings
from releasebot.config.load import load_settings
from releasebot.domain.shared.errors import ConfigError, RegistryAuthError
from releasebot.registry.credentials import (
    MAX_LIFETIME,
    REFRESH_MARGIN,
    CachedTokenCredentials,
    StaticCredentials,
    Token,
    check_token,
    refresh_at,
)
from releasebot.registry.ecr import parse_authorization

NOW = datetime(2026, 12, 3, 8, 0, tzinfo=UTC)


class Clock:
    def __init__(self) -> None:
        self.now = NOW

    def __call__(self) -> datetime:
        return self.now


class Issuer:
    """Hands out a new password per call, valid for ``lifetime`` on ``clock``."""

    def __init__(self, clock: Clock, lifetime: timedelta) -> None:
        self.clock, self.lifetime, self.calls = clock, lifetime, 0

    def __call__(self) -> Token:
        self.calls += 1
        return Token("AWS", f"secret-{self.calls}", self.clock() + self.lifetime)


def test_a_token_is_kept_until_five_minutes_before_it_expires() -> None:
    clock = Clock()
    issuer = Issuer(clock, timedelta(hours=12))
    credentials = CachedTokenCredentials("ecr", issuer, clock)
    first = credentials.basic()
    clock.now = NOW + timedelta(hours=12) - REFRESH_MARGIN - timedelta(seconds=1)
    assert credentials.basic() == first
    clock.now += timedelta(seconds=1)
    assert credentials.basic() != first
    assert issuer.calls == 2


def test_a_short_token_is_replaced_half_way() -> None:
    assert refresh_at(NOW, NOW + timedelta(seconds=60)) == NOW + timedelta(seconds=30)
    assert refresh_at(NOW, NOW + timedelta(hours=1)) == NOW + timedelta(minutes=55)


def test_renew_replaces_the_refused_token_once() -> None:
    clock = Clock()
    issuer = Issuer(clock, timedelta(hours=1))
    credentials = CachedTokenCredentials("gcp", issuer, clock)
    refused = credentials.basic()
    assert refused is not None
    fresh = credentials.renew(refused)
    assert fresh not in (None, refused)
    assert credentials.renew(refused) == fresh  # another caller: no second fetch
    assert issuer.calls == 2


def test_static_credentials_have_nothing_to_renew() -> None:
    assert StaticCredentials("dXNlcjpwdw==").renew("dXNlcjpwdw==") is None
    assert "dXNlcjpwdw" not in repr(StaticCredentials("dXNlcjpwdw=="))


def test_an_expiry_in_the_past_names_the_clock_never_the_token() -> None:
    with pytest.raises(RegistryAuthError, match="time synchronisation") as caught:
        check_token("ecr", Token("AWS", "s3cret", NOW - timedelta(seconds=1)), NOW)
    assert "s3cret" not in str(caught.value)


def test_an_expiry_too_far_ahead_is_believed_only_up_to_twelve_hours() -> None:
    token = check_token("ecr", Token("AWS", "s3cret", NOW + timedelta(days=400)), NOW)
    assert token.expires_at == NOW + MAX_LIFETIME


@pytest.mark.parametrize(
    "token",
    [
        Token("AWS", "", NOW + timedelta(hours=1)),
        Token("AWS", "a b", NOW + timedelta(hours=1)),
        Token("AWS", "\x1b[31m", NOW + timedelta(hours=1)),
        Token("AWS", "x" * 20_000, NOW + timedelta(hours=1)),
        Token("A:B", "ok", NOW + timedelta(hours=1)),
        Token("AWS", "ok", datetime(2027, 1, 1)),  # noqa: DTZ001 - naive on purpose
    ],
)
def test_unusable_tokens_are_refused(token: Token) -> None:
    with pytest.raises(RegistryAuthError):
        check_token("ecr", token, NOW)
    assert "ok" not in repr(token) or token.password != "ok" or "password" not in repr(token)


def test_ecr_answers_are_parsed_and_bounded() -> None:
    answer = {
        "authorizationData": [
            {"authorizationToken": "QVdTOnNlY3JldA==", "expiresAt": NOW + timedelta(hours=12)}
        ]
    }
    token = parse_authorization(answer)
    assert (token.username, token.password) == ("AWS", "secret")
    for bad in (
        {},
        {"authorizationData": []},
        {"authorizationData": [{"authorizationToken": "!"}]},
        {"authorizationData": [{"authorizationToken": "QVdT", "expiresAt": NOW}]},
    ):
        with pytest.raises(RegistryAuthError):
            parse_authorization(bad)


def test_auth_is_one_of_the_four() -> None:
    with pytest.raises(
        ConfigError, match=r"REGISTRY_AUTH: must be one of dockerconfig, ecr, gcp, azure"
    ):
        load_settings(None, {"RELEASEBOT_REGISTRY_AUTH": "aws"})


def test_a_cloud_auth_with_a_password_is_refused() -> None:
    from releasebot.wiring.core import registry_credentials

    environ = {
        "RELEASEBOT_REGISTRY_AUTH": "ecr",
        "RELEASEBOT_REGISTRY_USERNAME": "u",
        "RELEASEBOT_REGISTRY_PASSWORD": "pw",
    }
    with pytest.raises(ConfigError, match=r"leave registry\.username, registry\.password"):
        load_settings(None, environ)
    assert registry_credentials(Settings()) is None


@pytest.mark.parametrize(
    ("auth", "module", "extra"),
    [
        ("ecr", "boto3", "releasebot[aws]"),
        ("gcp", "google.auth", "releasebot[gcp]"),
        ("azure", "azure.identity", "releasebot[azure]"),
    ],
)
def test_a_missing_library_names_the_extra_to_install(
    monkeypatch: pytest.MonkeyPatch, auth: str, module: str, extra: str
) -> None:
    from releasebot.wiring.core import registry_credentials

    monkeypatch.setitem(sys.modules, module, None)  # import raises ImportError
    settings = load_settings(None, {"RELEASEBOT_REGISTRY_AUTH": auth})
    with pytest.raises(ConfigError, match=r"^config: registry.auth: ") as caught:
        registry_credentials(settings)
    assert str(caught.value).endswith(f"install {extra}")


@pytest.mark.parametrize(
    ("host", "account", "region"),
    [
        ("123456789012.dkr.ecr.eu-west-1.amazonaws.com", "123456789012", "eu-west-1"),
        ("123456789012.dkr.ecr-fips.us-east-1.amazonaws.com", "123456789012", "us-east-1"),
        ("123456789012.dkr.ecr.cn-north-1.amazonaws.com.cn", "123456789012", "cn-north-1"),
        ("123456789012.dkr-ecr.eu-west-1.on.aws", "123456789012", "eu-west-1"),
    ],
)
def test_ecr_hosts_name_their_account_and_region(host: str, account: str, region: str) -> None:
    from releasebot.registry.ecr import ECR_HOST

    found = ECR_HOST.fullmatch(host)
    assert found is not None
    assert (found.group("account"), found.group("region")) == (account, region)
    assert ECR_HOST.fullmatch("registry.example.com") is None
