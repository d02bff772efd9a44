"""Pytest fixtures for a real OCI registry (a plugin: ``pytest_plugins`` in the root conftest).

``plain_registry`` (plain HTTP, no auth, deletes allowed), ``nodelete_registry`` (the same
refusing deletes) and ``tls_registry`` (TLS with a test CA and
htpasswd basic auth) are started once per session by ``tests/support/registryserver.py`` and
stopped at its end; ``registry_name`` gives each test its own repository path in them, so
tests never see each other's tags. Skipped outside CI when ``docker-registry`` (or, for
TLS, ``openssl``/``htpasswd``) is missing; failed in CI.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator

import pytest

from tests.support.registryserver import RunningRegistry, run_registry

TLS_USER = "releasebot"


@pytest.fixture(scope="session")
def plain_registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningRegistry]:
    """A real registry on plain HTTP without auth."""
    with run_registry(tmp_path_factory.mktemp("registry-plain")) as running:
        yield running


@pytest.fixture(scope="session")
def tls_registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningRegistry]:
    """A real registry on TLS (``.ca_file`` trusts it) with htpasswd basic auth
    (``.username``/``.password``, a fresh random password per session)."""
    users = {TLS_USER: secrets.token_urlsafe(16)}
    with run_registry(tmp_path_factory.mktemp("registry-tls"), tls=True, users=users) as running:
        yield running


@pytest.fixture(scope="session")
def nodelete_registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningRegistry]:
    """A real registry on plain HTTP that refuses manifest deletes, as distribution does
    by default (``storage.delete.enabled: false``); ``plain_registry`` allows them."""
    with run_registry(tmp_path_factory.mktemp("registry-nodelete"), delete=False) as running:
        yield running


@pytest.fixture
def registry_name() -> str:
    """A repository path no other test uses, shaped like the real one."""
    return f"nvidia/driver-{secrets.token_hex(4)}"
