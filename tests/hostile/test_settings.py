"""Hostile settings: values, environment variables, secret files and ``--config`` itself.

Each case of ``tests/data/hostile/settings/`` is a settings file (``{tmp}`` stands for the
case's directory), perhaps environment variables and files to create, and where it enters:
``load`` (the settings are loaded, and ``secret`` read when the case names one) or ``cli``
(``releasebot plan --config PATH``, PATH perhaps a FIFO, ``/dev/zero`` or a directory).
The case passes when the refusal is one ``ConfigError`` naming the key (``cli``: exit code
2 and one line on stderr), no traceback, nothing hangs; or, with ``"error": null``, when
the value is accepted as it should be.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from releasebot.cli import main
from releasebot.config import load_settings
from releasebot.domain.shared.errors import ConfigError
from releasebot.edge.parse import parse_listen_address
from tests.hostile.conftest import (
    Case,
    assert_absent,
    assert_clean_line,
    assert_no_traceback,
    body_of,
    cases,
)


def materialise(case: Case, tmp_path: Path) -> Path:
    for name, spec in case.get("files", {}).items():
        (tmp_path / name).write_bytes(body_of(spec))
    special = case.get("config_path")
    if special == "fifo":
        path = tmp_path / "releasebot.toml"
        os.mkfifo(path)
        return path
    if special == "dev-zero":
        return Path("/dev/zero")
    if special == "directory":
        return tmp_path
    path = tmp_path / "releasebot.toml"
    path.write_bytes(body_of(case.get("config", "")).replace(b"{tmp}", str(tmp_path).encode()))
    return path


@pytest.mark.timeout(30)
@pytest.mark.parametrize("case", cases("settings"))
def test_a_hostile_setting_is_one_line_naming_the_key(
    case: Case, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = materialise(case, tmp_path)
    environ = {name: value for name, value in case.get("env", {}).items()}
    if case.get("via", "load") == "cli":
        os.environ.update(environ)
        try:
            code = main(["plan", "-q", "--config", str(path)])
        finally:
            for name in environ:
                del os.environ[name]
        out, err = capsys.readouterr()
        assert code == 2, err
        assert_no_traceback(out, err)
        assert_clean_line(err.strip(), case["problem"])
        assert err.startswith(f"releasebot: config: {case['key']}: ")
        return
    if case["error"] is None:
        settings = load_settings(path, environ)
        if "listen" in case.data:
            assert list(parse_listen_address(settings.run.listen)) == case["listen"]
        return

    def load_and_read_secret() -> None:
        settings = load_settings(path, environ)
        settings.slack.secret(case["secret"])  # a case that gets here names one

    with pytest.raises(ConfigError) as caught:
        load_and_read_secret()
    assert caught.value.key == case["key"]
    assert_clean_line(str(caught.value), case["problem"])
    assert_absent(str(caught.value), case.get("never_shown"))
