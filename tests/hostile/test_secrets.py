"""Credentials never leave the process, replayed from ``tests/data/hostile/secrets/``.

Each case is a text a library, a server or a setting could put into a message, and the
secrets in it. It goes through every exit text takes: ``edge.redact`` itself, a ``run``
log record in JSON and in text (message, extra field and traceback), a Slack message
rendered from an event carrying it. Unless the case says the secret is known (a value with
no recognisable form), nothing is known: the form alone must give it away.

Then the CLI as a real process: the database URL's password in the userinfo, in
``?password=`` and ``?sslpassword=``, and a libpq keyword/value DSN given as the URL, a
feed URL with a token; the error lines on stderr name the problem without the secret.

Last, the files that hold secrets (``tests/data/hostile/secrets/files/``): every setting
that names a file (signing key, password and public key; Slack token files; registry CA
and Docker config; the HTTP CA bundle; the kubeconfig) pointed at a FIFO, a directory,
``/dev/zero``, a missing path, a 4 GiB file, or a file of the wrong kind, and then used as
releasebot uses it. Each must end in one line naming the setting and the real problem,
quickly (a FIFO must not block), without reading the file whole.
"""

from __future__ import annotations

import io
import json
import logging
import os
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest

from releasebot.config import load_settings
from releasebot.domain.shared.errors import ConfigError, RegistryAuthError
from releasebot.domain.targets.events import Event, EventKind, StoredEvent, read_event
from releasebot.edge.kube import make_kube_client
from releasebot.edge.redact import Redactor, redact
from releasebot.logs import configure_logging
from releasebot.notify.render import render_message
from releasebot.notify.slack import SlackNotifier, make_web_client
from releasebot.registry.oras import OrasRegistry
from releasebot.signing.keys import encrypt_key, generate_key
from releasebot.wiring.signing import make_attestor
from tests.hostile.conftest import Case, assert_clean_line, body_of
from tests.hostile.conftest import cases as hostile_cases
from tests.support.feedserver import FeedServer
from tests.support.hostile_cli import (
    assert_no_traceback,
    assert_one_line_says,
    cases,
    load_case,
    run_cli,
    write_settings,
)
from tests.support.runprocess import free_port
from tests.support.slackapi import BOT_TOKEN, CHANNEL, SlackApi

CASES = [pytest.param(path, id=path.stem) for path in cases("secrets")]


def _shown_nowhere(shown: str, case: dict[str, Any]) -> None:
    for secret in case["must_not_show"]:
        assert secret not in shown, f"{secret!r} shown in:\n{shown}"


@pytest.mark.parametrize("path", CASES)
def test_redact(path: Path) -> None:
    case = load_case(path)
    masked = Redactor(case.get("known_secrets", []))(case["text"])
    _shown_nowhere(masked, case)
    for kept in case["keeps"]:
        assert kept in masked, f"{kept!r} lost from {masked!r}"
    if not case.get("known_secrets"):
        assert redact(case["text"]) == masked  # the forms alone were enough


@pytest.mark.parametrize("fmt", ["json", "text"])
@pytest.mark.parametrize("path", CASES)
def test_log_records(path: Path, fmt: str) -> None:
    case = load_case(path)
    stream = io.StringIO()
    handler = configure_logging(fmt, secrets=case.get("known_secrets", []), stream=stream)
    try:
        log = logging.getLogger("releasebot.hostile")
        log.warning("cycle problem: %s", case["text"], extra={"detail": case["text"]})
        try:
            raise RuntimeError(case["text"])
        except RuntimeError:
            log.exception("cycle failed unexpectedly")
    finally:
        logging.getLogger("releasebot").removeHandler(handler)
    shown = stream.getvalue()
    _shown_nowhere(shown, case)
    if fmt == "json":
        records = [json.loads(line) for line in shown.splitlines()]
        assert len(records) == 2
        assert "RuntimeError" in records[1]["exc"]


def _feed_failing(text: str) -> Event:
    now = datetime(2026, 1, 1, tzinfo=UTC)
    payload: dict[str, Any] = {
        "feed": "flatcar/stable",
        "error": text,
        "failing_since": now.isoformat(),
        "consecutive_failures": 3,
    }
    return read_event(EventKind.FEED_FAILING, "feed:flatcar/stable", "flatcar/stable", now, payload)


@pytest.mark.parametrize(
    "path", [case for case in CASES if not load_case(case.values[0]).get("known_secrets")]
)
def test_slack_message_rendered(path: Path) -> None:
    """The pure rendering masks the forms (no secret value is known there; the values with
    no recognisable form are masked by the notifier: ``test_slack_message_sent``)."""
    case = load_case(path)
    message = render_message([_feed_failing(case["text"])], "registry.example/nvidia/driver")
    _shown_nowhere(message.text + json.dumps(message.blocks), case)


@pytest.mark.parametrize("path", CASES)
def test_slack_message_sent(path: Path) -> None:
    """What reaches the Slack Web API (the fake one, over real HTTP) holds no secret."""
    case = load_case(path)
    event = _feed_failing(case["text"])
    with SlackApi() as slack:
        client = make_web_client(BOT_TOKEN, base_url=slack.base_url, timeout=timedelta(seconds=5))
        notifier = SlackNotifier(
            client,
            channel=CHANNEL,
            repository="registry.example/nvidia/driver",
            secrets=case.get("known_secrets", []),
        )
        notifier.deliver(StoredEvent(1, event), [event], None)
        sent = [call for call in slack.calls() if call.method == "chat.postMessage"]
    assert len(sent) == 1
    _shown_nowhere(json.dumps(sent[0].args), case)


# -- the CLI, as a real process -----------------------------------------------------------


def _settings(tmp_path: Path, server: FeedServer, database_url: str, **kw: str) -> Path:
    return write_settings(
        tmp_path / "releasebot.toml",
        database_url=database_url,
        flatcar_url=kw.get("flatcar_url", server.url("/releases-{channel}.json")),
        nvidia_url=server.url("/nvidia.json"),
        repository=f"127.0.0.1:{free_port()}/nvidia/driver",
    )


@pytest.mark.parametrize(
    ("query", "secrets"),
    [
        pytest.param("", ["UserinfoPw1"], id="userinfo"),
        pytest.param("?password=QueryPw2", ["UserinfoPw1", "QueryPw2"], id="query-password"),
        pytest.param(
            "?sslpassword=SslPw3&sslmode=disable", ["UserinfoPw1", "SslPw3"], id="sslpassword"
        ),
    ],
)
def test_cli_error_masks_the_database_url(
    tmp_path: Path, served_feeds: FeedServer, query: str, secrets: list[str]
) -> None:
    """Nothing listens at the database's port: "cannot reach", exit 1, no password."""
    url = f"postgresql+psycopg://rb:UserinfoPw1@127.0.0.1:{free_port()}/rb{query}"
    outcome = run_cli(["plan", "--config", str(_settings(tmp_path, served_feeds, url))])
    assert_no_traceback(outcome.stdout, outcome.stderr)
    assert outcome.code == 1, outcome.describe()
    assert_one_line_says(outcome.stderr, ["cannot reach the database", "rb:***@127.0.0.1"])
    for secret in secrets:
        assert secret not in outcome.stderr + outcome.stdout, outcome.describe()


def test_cli_config_error_masks_a_libpq_dsn(tmp_path: Path, served_feeds: FeedServer) -> None:
    """A keyword/value DSN where a URL belongs: exit 2, the key named, the password not."""
    config = _settings(tmp_path, served_feeds, "sqlite:///unused.db")
    env = {"RELEASEBOT_DATABASE_URL": "host=db user=rb password=DsnPw4 dbname=rb"}
    outcome = run_cli(["plan", "--config", str(config)], env=env)
    assert_no_traceback(outcome.stdout, outcome.stderr)
    assert outcome.code == 2, outcome.describe()
    assert_one_line_says(outcome.stderr, ["DATABASE_URL", "password=***", "postgresql"])
    assert "DsnPw4" not in outcome.stderr + outcome.stdout


def test_cli_error_masks_a_feed_url_token(tmp_path: Path, served_feeds: FeedServer) -> None:
    """A feed URL carrying an access token answers 404: no line shows the token."""
    feed = served_feeds.url("/missing-{channel}.json") + "?access_token=FeedTok5"
    config = _settings(
        tmp_path, served_feeds, f"sqlite:///{tmp_path / 'state.db'}", flatcar_url=feed
    )
    outcome = run_cli(["plan", "--config", str(config)])
    assert_no_traceback(outcome.stdout, outcome.stderr)
    assert outcome.code == 1, outcome.describe()
    assert_one_line_says(outcome.stderr, ["feed flatcar/stable", "404", "check the feed URL"])
    assert "FeedTok5" not in outcome.stderr + outcome.stdout


# -- the files that hold secrets ----------------------------------------------------------

FILE_SETTINGS = [
    "signing.key_file",
    "signing.password_file",
    "signing.public_key_file",
    "slack.bot_token_file",
    "slack.signing_secret_file",
    "slack.app_token_file",
    "registry.ca_file",
    "registry.docker_config",
    "http.ca_bundle",
    "kubernetes.kubeconfig",
]
FILE_CASES = [
    pytest.param(case, setting, id=f"{case.name}-{setting}")
    for case in (param.values[0] for param in hostile_cases("secrets/files"))
    for setting in (FILE_SETTINGS if case["settings"] == "every" else case["settings"])
]


def _hostile_file(spec: dict[str, Any], directory: Path) -> str:
    path = directory / "hostile"
    kind = spec.get("kind")
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "directory":
        path.mkdir()
    elif kind == "dev-zero":
        return "/dev/zero"
    elif kind == "sparse":
        with open(path, "wb") as handle:
            handle.truncate(int(spec["size"]))
    elif kind != "missing":
        path.write_bytes(body_of(spec["body"]))
    return str(path)


def _use(setting: str, environ: dict[str, str]) -> None:
    """Load the settings and use the file as releasebot does."""
    settings = load_settings(None, environ)
    section, _, key = setting.partition(".")
    if section == "slack":
        settings.slack.secret(key.removesuffix("_file"))
    elif section == "signing":
        registry = OrasRegistry("127.0.0.1:9/nvidia/driver", insecure=True, retries=0)
        try:
            with httpx.Client() as http:
                make_attestor(settings, registry, http)
        finally:
            registry.close()
    elif setting == "registry.docker_config":
        OrasRegistry(
            "127.0.0.1:9/nvidia/driver", insecure=True, docker_config=environ[_env(setting)]
        ).close()
    elif setting == "kubernetes.kubeconfig":
        make_kube_client(settings.kubernetes.kubeconfig)


def _env(setting: str) -> str:
    return "RELEASEBOT_" + setting.replace(".", "_").upper()


@pytest.mark.timeout(30)
@pytest.mark.parametrize(("case", "setting"), FILE_CASES)
def test_a_hostile_secret_file_is_one_line_naming_the_setting(
    case: Case, setting: str, tmp_path: Path
) -> None:
    key = generate_key()
    good = {
        "signing.key_file": encrypt_key(key, b"pw"),
        "signing.password_file": b"pw\n",
        "signing.public_key_file": key.public.pem,
    }
    environ: dict[str, str] = {}
    if setting.startswith("signing."):
        for name, body in good.items():
            (tmp_path / name).write_bytes(body)
            environ[_env(name)] = str(tmp_path / name)
    environ[_env(setting)] = _hostile_file(case["file"], tmp_path)
    with pytest.raises((ConfigError, RegistryAuthError)) as caught:
        _use(setting, environ)
    message = str(caught.value)
    assert_clean_line(message, case["problem"])
    assert_no_traceback(message)
    if isinstance(caught.value, ConfigError):
        # make_kube_client (edge) knows no setting names: it says "kubeconfig"
        assert caught.value.key in (setting, _env(setting), "kubeconfig"), message
    else:
        assert "docker config" in message
    assert "pw" not in message.replace(str(tmp_path), "")
