"""Fixtures shared by every test package: the real upstream data, a fixed clock."""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from tests.support.feedserver import FeedServer

pytest_plugins = ["tests.support.registry_fixtures", "tests.support.kube_fixtures"]

REPO = Path(__file__).resolve().parent.parent
TEST_DATA = REPO / "tests" / "data"
SHARED_DATA = Path(os.environ.get("SHARED_DATA", REPO.parent / "shared" / "data"))


@pytest.fixture
def shared_data() -> Path:
    """The real Flatcar and NVIDIA feed copies beside the checkout (``../shared/data``).

    CI always has them (and fails without them); on a user's machine they may be missing,
    and then the tests that replay real upstream data are skipped rather than failed.
    """
    if not (SHARED_DATA / "flatcar").is_dir():
        message = f"real upstream data not found at {SHARED_DATA} (set SHARED_DATA)"
        if os.environ.get("CI"):
            pytest.fail(f"{message}; CI is set, so this is an error, not a skip")
        pytest.skip(message)
    return SHARED_DATA


@pytest.fixture(autouse=True)
def _no_releasebot_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """A developer's own ``RELEASEBOT_*`` settings must not change what tests see."""
    for name in list(os.environ):
        if name.startswith("RELEASEBOT_"):
            monkeypatch.delenv(name)


@pytest.fixture
def test_data() -> Path:
    """The project's own small fixtures, in the upstream formats."""
    return TEST_DATA


@pytest.fixture
def served_feeds(test_data: Path) -> Iterator[FeedServer]:
    """The project's small stable and NVIDIA feeds over local HTTP, with ETags:
    ``/releases-stable.json`` and ``/nvidia.json``."""
    with FeedServer() as server:
        for name, path in [
            ("/releases-stable.json", test_data / "flatcar/releases-stable.json"),
            ("/nvidia.json", test_data / "nvidia/releases.json"),
        ]:
            server.route(name, FeedServer.static(path.read_bytes(), etag='"1"'))
        yield server


@pytest.fixture
def now() -> datetime:
    return datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


@pytest.fixture
def logging_restored() -> Iterator[None]:
    """``run_service`` configures the process's logging; put it back for the next tests."""
    saved = []
    for name in ("releasebot", "apscheduler"):
        logger = logging.getLogger(name)
        saved.append((logger, list(logger.handlers), logger.level, logger.propagate))
    yield
    for logger, handlers, level, propagate in saved:
        for handler in list(logger.handlers):
            logger.removeHandler(handler)
        for handler in handlers:
            logger.addHandler(handler)
        logger.setLevel(level)
        logger.propagate = propagate


@pytest.fixture
def logs_reach_caplog(logging_restored: None) -> None:
    """``releasebot`` log records reach ``caplog`` (the root logger's handler) during the
    test. An earlier test that ran ``main`` in process configured the ``releasebot``
    logger not to propagate (and ``-q`` to show errors only), and a check of ``caplog``
    would then pass on nothing."""
    logger = logging.getLogger("releasebot")
    logger.propagate = True
    logger.setLevel(logging.NOTSET)
