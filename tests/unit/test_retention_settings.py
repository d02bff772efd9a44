"""The ``[retention]`` settings: off and a dry run by default, ``after_days`` in days from
the file and the environment, bounds named by key."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest

from releasebot.config import load_settings
from releasebot.domain.shared.errors import ConfigError


def test_retention_is_off_and_a_dry_run_by_default() -> None:
    retention = load_settings(None, environ={}).retention
    assert (retention.enabled, retention.dry_run) == (False, True)
    assert retention.after == timedelta(days=30)
    assert retention.max_deletions == 50


def test_after_days_is_read_in_days(tmp_path: Path) -> None:
    path = tmp_path / "releasebot.toml"
    path.write_text("[retention]\nenabled = true\ndry_run = false\nafter_days = 90\n")
    retention = load_settings(path, environ={}).retention
    assert (retention.enabled, retention.dry_run, retention.after) == (
        True,
        False,
        timedelta(days=90),
    )
    from_env = load_settings(path, environ={"RELEASEBOT_RETENTION_AFTER_DAYS": "7"}).retention
    assert from_env.after == timedelta(days=7)


@pytest.mark.parametrize(
    ("line", "key"),
    [
        ("after_days = 0", "retention.after_days"),
        ("after_days = 4000", "retention.after_days"),
        ("max_deletions = 0", "retention.max_deletions"),
        ("after_seconds = 10", "retention.after_seconds"),
    ],
)
def test_bad_values_name_their_key(tmp_path: Path, line: str, key: str) -> None:
    path = tmp_path / "releasebot.toml"
    path.write_text(f"[retention]\n{line}\n")
    with pytest.raises(ConfigError) as caught:
        load_settings(path, environ={})
    assert str(caught.value).startswith(f"config: {key}: ")
