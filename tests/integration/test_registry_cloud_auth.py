"""The cloud credential providers over real HTTP, against a REAL registry that requires
their tokens (``tests/support/cloudtokens.py``: Debian's docker-registry behind a gate that
accepts only live tokens an emulator issued).

ECR through boto3 against moto's server; Artifact Registry through google-auth against a
fake GCE metadata server; ACR through azure-identity against a fake Entra token endpoint
(TLS) and the gate's ``/oauth2/exchange``. Each: a token is obtained and used; a token
past its expiry is replaced before it is sent; a token the registry refuses is renewed once
and the request retried; denial, a missing identity and an unreachable endpoint are one
line that says what to fix and never shows a token.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from releasebot.domain.shared.errors import RegistryAuthError, RegistryUnavailableError
from releasebot.registry.credentials import CachedTokenCredentials
from releasebot.registry.oras import OrasRegistry
from tests.support.cloudtokens import (
    Gate,
    TokenBook,
    azure_endpoints,
    ecr_emulator,
    gcp_metadata,
    token_gate,
)
from tests.support.registryserver import RunningRegistry, free_port, make_tls_files

TAG = "580.178.04-flatcar4593.2.5"


def utc_now() -> datetime:
    return datetime.now(UTC)


@pytest.fixture
def book() -> TokenBook:
    return TokenBook()


@pytest.fixture
def gate(plain_registry: RunningRegistry, book: TokenBook) -> Iterator[Gate]:
    with token_gate(plain_registry.base_url, book) as running:
        yield running


def registry_for(gate: Gate, name: str, credentials: CachedTokenCredentials) -> OrasRegistry:
    return OrasRegistry(gate.repository(name), insecure=True, retries=0, credentials=credentials)


def assert_no_token(text: str, book: TokenBook) -> None:
    for password in book.passwords():
        assert password not in text


# -- ECR (boto3 -> moto) ---------------------------------------------------------------------


@pytest.fixture
def aws(monkeypatch: pytest.MonkeyPatch) -> Iterator[object]:
    with ecr_emulator() as emulator:
        for key, value in emulator.env().items():
            monkeypatch.setenv(key, value)
        yield emulator


def ecr_credentials(clock: object = utc_now) -> CachedTokenCredentials:
    from releasebot.registry.ecr import ecr_fetcher

    fetch = ecr_fetcher("127.0.0.1", "us-east-1", timedelta(seconds=5))
    return CachedTokenCredentials("ecr", fetch, clock)  # type: ignore[arg-type]


def test_ecr_token_from_moto_opens_the_registry_and_is_cached(
    aws: object, gate: Gate, plain_registry: RunningRegistry, registry_name: str
) -> None:
    from tests.support.cloudtokens import EcrEmulator

    assert isinstance(aws, EcrEmulator)
    aws.book = gate.book  # the gate accepts what moto issues
    plain_registry.push_image(registry_name, TAG)
    credentials = ecr_credentials()
    registry = registry_for(gate, registry_name, credentials)
    assert registry.tags() == {TAG}
    assert registry.digest(TAG) is not None
    assert registry.tags() == {TAG}
    assert credentials.fetch_count == 1  # cached: one GetAuthorizationToken for three calls
    assert gate.book.count("AWS") == 1
    assert "AWS" not in repr(credentials)
    assert "ecr" in repr(registry)
    assert_no_token(repr(credentials) + repr(registry), gate.book)


def test_ecr_token_is_replaced_before_it_expires_and_renewed_once_when_refused(
    aws: object, gate: Gate, plain_registry: RunningRegistry, registry_name: str
) -> None:
    from tests.support.cloudtokens import EcrEmulator

    assert isinstance(aws, EcrEmulator)
    aws.book = gate.book
    aws.lifetime = timedelta(seconds=2)  # refreshed at half its life: after 1 s
    plain_registry.push_image(registry_name, TAG)
    credentials = ecr_credentials()
    registry = registry_for(gate, registry_name, credentials)
    assert registry.tags() == {TAG}
    time.sleep(2.2)  # the first token has expired: the gate would refuse it
    assert registry.tags() == {TAG}
    assert credentials.fetch_count == 2
    refused_before = gate.book.refused

    aws.lifetime = timedelta(hours=12)
    registry.tags()  # may renew (the 2 s token is near its end); settle on a 12 h one
    gate.book.revoke_all()  # revoked early (or the clocks disagree): the gate refuses it
    fetched = credentials.fetch_count
    assert registry.tags() == {TAG}
    assert credentials.fetch_count == fetched + 1  # renewed once, then accepted
    assert gate.book.refused > refused_before


def test_ecr_denied_is_one_line_naming_the_permission(
    aws: object, gate: Gate, registry_name: str
) -> None:
    import boto3

    from tests.support.cloudtokens import EcrEmulator

    assert isinstance(aws, EcrEmulator)
    iam = boto3.client("iam", endpoint_url=aws.url, region_name="us-east-1")
    aws.enforce_iam(2)  # the next two calls are free: a user and its key, without a policy
    try:
        iam.create_user(UserName="releasebot")
        key = iam.create_access_key(UserName="releasebot")["AccessKey"]
        import os

        os.environ["AWS_ACCESS_KEY_ID"] = key["AccessKeyId"]
        os.environ["AWS_SECRET_ACCESS_KEY"] = key["SecretAccessKey"]
        registry = registry_for(gate, registry_name, ecr_credentials())
        with pytest.raises(RegistryAuthError) as caught:
            registry.tags()
    finally:
        aws.enforce_iam(sys.maxsize)
        aws.reset()
    message = str(caught.value)
    assert "\n" not in message
    assert "ecr:GetAuthorizationToken" in message
    assert "AccessDenied" in message
    assert key["SecretAccessKey"] not in message
    assert caught.value.__cause__ is None
    assert caught.value.__suppress_context__


def test_ecr_without_credentials_says_to_give_the_pod_a_role(
    aws: object, monkeypatch: pytest.MonkeyPatch, gate: Gate, registry_name: str
) -> None:
    monkeypatch.delenv("AWS_ACCESS_KEY_ID")
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY")
    registry = registry_for(gate, registry_name, ecr_credentials())
    with pytest.raises(RegistryAuthError, match=r"no AWS credentials found: give .* IAM role"):
        registry.tags()


def test_ecr_endpoint_unreachable_is_temporary(
    aws: object, monkeypatch: pytest.MonkeyPatch, gate: Gate, registry_name: str
) -> None:
    monkeypatch.setenv("AWS_ENDPOINT_URL_ECR", f"http://127.0.0.1:{free_port()}")
    registry = registry_for(gate, registry_name, ecr_credentials())
    with pytest.raises(RegistryUnavailableError, match=r"^ecr: the AWS endpoint is unreachable"):
        registry.tags()


def test_ecr_token_already_expired_on_arrival_names_the_clock(
    aws: object, gate: Gate, registry_name: str
) -> None:
    ahead = lambda: datetime.now(UTC) + timedelta(days=1)  # noqa: E731 - a clock a day fast
    registry = registry_for(gate, registry_name, ecr_credentials(ahead))
    with pytest.raises(RegistryAuthError, match=r"check the node's time synchronisation"):
        registry.tags()


# -- Artifact Registry (google-auth -> the metadata server) ----------------------------------


@pytest.fixture
def google(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[object]:
    with gcp_metadata() as metadata:
        for key, value in metadata.env().items():
            monkeypatch.setenv(key, value)
        monkeypatch.delenv("GOOGLE_APPLICATION_CREDENTIALS", raising=False)
        monkeypatch.setenv("CLOUDSDK_CONFIG", str(tmp_path / "gcloud"))  # no user ADC
        # google-auth reads GCE_METADATA_HOST once, when first imported.
        from google.auth.compute_engine import _metadata

        monkeypatch.setattr(_metadata, "_GCE_METADATA_HOST", metadata.host)
        yield metadata


def gcp_credentials() -> CachedTokenCredentials:
    from releasebot.registry.gcp import gcp_fetcher

    return CachedTokenCredentials("gcp", gcp_fetcher(timedelta(seconds=5)), utc_now)


def test_gcp_access_token_opens_the_registry_and_is_renewed_after_expiry(
    google: object, gate: Gate, plain_registry: RunningRegistry, registry_name: str
) -> None:
    from tests.support.cloudtokens import Metadata

    assert isinstance(google, Metadata)
    google.book = gate.book
    google.lifetime = timedelta(seconds=2)
    plain_registry.push_image(registry_name, TAG)
    credentials = gcp_credentials()
    registry = registry_for(gate, registry_name, credentials)
    assert registry.tags() == {TAG}
    assert gate.book.count("oauth2accesstoken") == 1
    time.sleep(2.2)
    assert registry.tags() == {TAG}
    assert credentials.fetch_count == 2
    assert_no_token(repr(credentials) + repr(registry), gate.book)


def test_gcp_denied_says_to_bind_the_service_account(
    google: object, gate: Gate, registry_name: str
) -> None:
    from tests.support.cloudtokens import Metadata

    assert isinstance(google, Metadata)
    google.deny = True
    registry = registry_for(gate, registry_name, gcp_credentials())
    with pytest.raises(RegistryAuthError) as caught:
        registry.tags()
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith("gcp: the metadata server refused a token")
    assert "roles/iam.workloadIdentityUser" in message


# -- ACR (azure-identity -> Entra ID, then /oauth2/exchange) ---------------------------------


@pytest.fixture
def entra(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, gate: Gate) -> Iterator[object]:
    tls = make_tls_files(tmp_path / "tls")
    with azure_endpoints(tls.cert_file, tls.key_file, tmp_path / "azure-token") as endpoints:
        for key, value in endpoints.env(str(tls.ca_file)).items():
            monkeypatch.setenv(key, value)
        endpoints.book = gate.book
        gate.exchange = endpoints.exchange
        yield endpoints


def azure_credentials(gate: Gate) -> CachedTokenCredentials:
    from releasebot.registry.azure import azure_fetcher

    fetch = azure_fetcher(f"http://{gate.host}", True, timedelta(seconds=5))
    return CachedTokenCredentials("azure", fetch, utc_now)


def test_acr_refresh_token_from_the_exchange_opens_the_registry_and_is_renewed(
    entra: object, gate: Gate, plain_registry: RunningRegistry, registry_name: str
) -> None:
    from tests.support.cloudtokens import Entra

    assert isinstance(entra, Entra)
    entra.lifetime = timedelta(seconds=3)  # the exp claim: whole seconds
    plain_registry.push_image(registry_name, TAG)
    credentials = azure_credentials(gate)
    registry = registry_for(gate, registry_name, credentials)
    assert registry.tags() == {TAG}
    assert entra.token_requests == 1
    time.sleep(3.2)
    assert registry.tags() == {TAG}
    assert credentials.fetch_count == 2
    assert_no_token(repr(credentials) + repr(registry), gate.book)


def test_acr_without_a_matching_federated_credential_is_denied(
    entra: object, gate: Gate, registry_name: str
) -> None:
    from tests.support.cloudtokens import Entra

    assert isinstance(entra, Entra)
    entra.deny = True
    registry = registry_for(gate, registry_name, azure_credentials(gate))
    with pytest.raises(RegistryAuthError) as caught:
        registry.tags()
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith("azure: Entra ID denied the workload identity")
    assert "federated credential" in message


def test_acr_without_the_webhooks_variables_says_what_to_label(
    entra: object, monkeypatch: pytest.MonkeyPatch, gate: Gate, registry_name: str
) -> None:
    monkeypatch.delenv("AZURE_FEDERATED_TOKEN_FILE")
    registry = registry_for(gate, registry_name, azure_credentials(gate))
    with pytest.raises(RegistryAuthError, match=r"^azure: no workload identity: .*use=true"):
        registry.tags()


# -- hostile token endpoints ----------------------------------------------------------------


def test_a_hostile_entra_denial_is_shown_on_one_clean_line(
    entra: object, gate: Gate, registry_name: str
) -> None:
    from tests.support.cloudtokens import Entra

    assert isinstance(entra, Entra)
    entra.deny = True
    entra.denial = "AADSTS70021:\x1b[2J\x1b]0;owned\x07 denied\nFAKE LINE " + "x" * 5000
    registry = registry_for(gate, registry_name, azure_credentials(gate))
    with pytest.raises(RegistryAuthError) as caught:
        registry.tags()
    message = str(caught.value)
    assert "\n" not in message
    assert "\x1b" not in message
    assert "\x07" not in message
    assert len(message) < 600
    assert "AADSTS70021" in message


def test_an_endless_exchange_answer_is_cut_at_the_bound(
    entra: object, gate: Gate, registry_name: str
) -> None:
    gate.exchange = lambda form: (200, b'{"refresh_token": "' + b"a" * 2_000_000 + b'"}')
    registry = registry_for(gate, registry_name, azure_credentials(gate))
    with pytest.raises(RegistryAuthError, match=r"answered more than 65536 bytes"):
        registry.tags()


def test_a_token_service_answers_with_the_cloud_token_and_a_refusal_renews_it(
    google: object, gate: Gate, plain_registry: RunningRegistry, registry_name: str
) -> None:
    """Artifact Registry and ACR answer a Bearer challenge: the cloud token goes to their
    token service as basic credentials. A revoked one is refused there, renewed once, and
    the registry token bought with the new one opens the registry."""
    from tests.support.cloudtokens import Metadata

    assert isinstance(google, Metadata)
    google.book = gate.book
    gate.bearer = True
    plain_registry.push_image(registry_name, TAG)
    credentials = gcp_credentials()
    registry = registry_for(gate, registry_name, credentials)
    assert registry.tags() == {TAG}
    assert (gate.token_requests, credentials.fetch_count) == (1, 1)
    gate.book.revoke_all()
    gate.revoke_bearer()
    assert registry.tags() == {TAG}
    assert gate.token_requests == 3  # refused with the revoked token, then the new one
    assert credentials.fetch_count == 2
