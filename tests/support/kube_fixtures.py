"""Pytest fixtures for a fake Kubernetes API server over real HTTP (``tests/support/kubeapi.py``).

Registered for the whole suite through ``pytest_plugins`` in ``tests/conftest.py``.

- ``kube_api``: a started ``FakeKubeApi`` (namespace ``builds``), one per test; at the end
  the test fails if the fake itself hit an internal error.
- ``kaniko_options``: the ``KanikoOptions`` the tests use (git context, that namespace).
- ``kube_sleeps``: the backoff pauses the launcher asked for (it never really sleeps).
- ``kube_launcher``: a ``KubernetesJobLauncher`` on ``kube_api`` with those options.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from releasebot.builders.kaniko import KanikoOptions
from releasebot.builders.kubernetes import KubernetesJobLauncher
from tests.support.kubeapi import FakeKubeApi

TEST_NAMESPACE = "builds"
TEST_REPOSITORY = "registry.example.test/gpu/driver"
TEST_CONTEXT = "git://git.example.test/gpu/recipes.git#refs/heads/main#" + "0123456789" * 4


@pytest.fixture
def kube_api() -> Iterator[FakeKubeApi]:
    with FakeKubeApi(namespace=TEST_NAMESPACE) as api:
        yield api
    assert not api.server_errors, f"the fake API server failed: {api.server_errors}"


@pytest.fixture
def kaniko_options() -> KanikoOptions:
    return KanikoOptions(
        namespace=TEST_NAMESPACE,
        registry_repository=TEST_REPOSITORY,
        registry_secret="registry-push",
        context=TEST_CONTEXT,
        context_sub_path="driver",
    )


@pytest.fixture
def kube_sleeps() -> list[float]:
    return []


@pytest.fixture
def kube_launcher(
    kube_api: FakeKubeApi, kaniko_options: KanikoOptions, kube_sleeps: list[float]
) -> Iterator[KubernetesJobLauncher]:
    client = kube_api.client()
    try:
        yield KubernetesJobLauncher(client, kaniko_options, sleep=kube_sleeps.append)
    finally:
        client.close()
