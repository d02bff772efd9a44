"""Structured logging: JSON lines with the decision fields, text for a terminal, and
secrets masked wherever they appear (message, arguments, extras, tracebacks).
"""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator

import pytest

from releasebot.logs import configure_logging, resolve_format

SECRET = "xoxb-1234-very-secret"


@pytest.fixture
def stream() -> Iterator[io.StringIO]:
    buffer = io.StringIO()
    configure_logging("json", secrets=[SECRET, "pw"], stream=buffer)
    yield buffer
    for name in ("releasebot", "apscheduler"):
        logging.getLogger(name).handlers.clear()


def lines(stream: io.StringIO) -> list[dict[str, object]]:
    return [json.loads(line) for line in stream.getvalue().splitlines()]


def test_json_lines_carry_the_decision_fields(stream: io.StringIO) -> None:
    log = logging.getLogger("releasebot.reconcile")
    log.info(
        "launched %s", "580.1-flatcar1.2.3", extra={"tag": "580.1-flatcar1.2.3", "job": "rb-1"}
    )
    logging.getLogger("releasebot.x").debug("not shown at INFO")
    [line] = lines(stream)
    assert line["level"] == "info"
    assert line["logger"] == "releasebot.reconcile"
    assert line["message"] == "launched 580.1-flatcar1.2.3"
    assert (line["tag"], line["job"]) == ("580.1-flatcar1.2.3", "rb-1")
    assert str(line["ts"]).endswith("Z")


def test_secrets_are_masked_everywhere(stream: io.StringIO) -> None:
    log = logging.getLogger("releasebot.slack")
    log.warning("token %s refused", SECRET, extra={"detail": f"Bearer {SECRET}"})
    try:
        raise RuntimeError(f"auth failed for {SECRET}")
    except RuntimeError:
        log.exception("call failed")
    log.warning("a pw of two letters")
    text = stream.getvalue()
    assert SECRET not in text
    first, second, third = lines(stream)
    assert first["message"] == "token *** refused"
    assert first["detail"] == "Bearer ***"
    assert "RuntimeError: auth failed for ***" in str(second["exc"])
    assert third["message"] == "a pw of two letters"  # too short to mask without garbling


def test_text_format_and_auto() -> None:
    buffer = io.StringIO()
    configure_logging("text", secrets=[SECRET], stream=buffer)
    try:
        logging.getLogger("releasebot.leader").warning("became the leader", extra={"lease": "rb"})
    finally:
        logging.getLogger("releasebot").handlers.clear()
    assert (
        buffer.getvalue().split(" ", 1)[1]
        == "warning releasebot.leader: became the leader lease=rb\n"
    )
    assert resolve_format("auto", io.StringIO()) == "json"  # not a terminal
    with pytest.raises(ValueError, match="log format"):
        resolve_format("yaml")
