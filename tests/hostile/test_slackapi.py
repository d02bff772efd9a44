"""Hostile Slack Web API answers, replayed against ``SlackNotifier`` over real HTTP.

The fake Web API (``tests/support/slackapi.py``) answers one method (or every method) with
the bytes and headers of a case of ``tests/data/hostile/slackapi/``; the client is the one
releasebot makes (``make_web_client``: the bounded reader). The case passes when
delivering one event raises the named error (``ChatUnavailableError``: tried again soon;
``ChatRejectedError``: a person must act) with one clean line, and nothing else escapes.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from releasebot.domain.shared import errors
from releasebot.domain.targets.events import EventKind, StoredEvent, build_key, read_event
from releasebot.notify.slack import SlackNotifier, make_web_client
from tests.hostile.conftest import Case, assert_absent, assert_clean_line, body_of, cases
from tests.support.slackapi import BOT_TOKEN, CHANNEL, SlackApi

TAG = "580.105.08-4459.2.1"
T0 = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


@pytest.fixture
def slack() -> Any:
    with SlackApi() as api:
        yield api


@pytest.mark.parametrize("case", cases("slackapi"))
def test_a_hostile_slack_answer_is_one_clean_error(case: Case, slack: SlackApi) -> None:
    headers = dict(case.get("headers", {"Content-Type": "application/json; charset=utf-8"}))
    slack.answer_raw(
        case.get("method"), int(case.get("status", 200)), body_of(case.get("body", "")), headers
    )
    sleeps: list[float] = []
    client = make_web_client(
        BOT_TOKEN, base_url=slack.base_url, timeout=timedelta(seconds=5), retries=0,
        sleep=sleeps.append,
    )  # fmt: skip
    notifier = SlackNotifier(client, channel=CHANNEL, repository="registry.example.com/gpu/d")
    event = read_event(EventKind.BUILD_STARTED, build_key(TAG, 1), TAG, T0, {"job": "rb-1"})
    if case["error"] is None:  # odd but harmless: delivered
        assert notifier.deliver(StoredEvent(1, event), [event], None).ts
        return
    expected = getattr(errors, case["error"])
    with pytest.raises(errors.ReleasebotError) as caught:
        notifier.deliver(StoredEvent(1, event), [event], None)
    assert type(caught.value) is expected, repr(caught.value)
    assert_clean_line(str(caught.value), case["problem"])
    assert_absent(str(caught.value), case.get("never_shown"), BOT_TOKEN)
    if "max_retry_after" in case.data:
        assert isinstance(caught.value, errors.TemporaryError)
        assert caught.value.retry_after <= timedelta(seconds=case["max_retry_after"])
