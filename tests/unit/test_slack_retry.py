"""Which failed Slack Web API calls slack-sdk repeats inside the call, and after how long.

One handler decides for every reason (rate limit, server error, dropped connection); the
calls that Slack may already have made (a post answered 5xx, or dropped after it was sent)
are never repeated, so a message is never posted twice.
"""

from __future__ import annotations

from datetime import timedelta
from http.client import RemoteDisconnected
from urllib.error import HTTPError, URLError

import pytest
from slack_sdk.http_retry.request import HttpRequest
from slack_sdk.http_retry.response import HttpResponse
from slack_sdk.http_retry.state import RetryState

from releasebot.notify.slack import make_web_client

POST = "https://slack.example/api/chat.postMessage"
UPDATE = "https://slack.example/api/chat.update"
TIMEOUT = timedelta(seconds=5)


def _decide(
    url: str,
    *,
    status: int | None = None,
    headers: dict[str, str] | None = None,
    error: Exception | None = None,
    attempt: int = 0,
) -> list[float] | None:
    """The sleeps before the repeat, or ``None`` when the call is not repeated."""
    sleeps: list[float] = []
    client = make_web_client(
        "xoxb-test",
        base_url="https://slack.example/api/",
        timeout=TIMEOUT,
        retries=2,
        sleep=sleeps.append,
    )
    (handler,) = client.retry_handlers
    state = RetryState(current_attempt=attempt)
    request = HttpRequest(method="POST", url=url, headers={})
    response = None if status is None else HttpResponse(status_code=status, headers=headers or {})
    if not handler.can_retry(state=state, request=request, response=response, error=error):
        return None
    handler.prepare_for_next_attempt(state=state, request=request, response=response, error=error)
    assert state.next_attempt_requested
    assert state.current_attempt == attempt + 1
    return sleeps


def test_a_rate_limit_is_waited_for_as_slack_says_when_short() -> None:
    assert _decide(POST, status=429, headers={"Retry-After": "3"}) == [3.0]
    assert _decide(POST, status=429, headers={"Retry-After": "30"}) is None


@pytest.mark.parametrize("status", [500, 503])
def test_a_server_error_repeats_an_update_but_never_a_post(status: int) -> None:
    sleeps = _decide(UPDATE, status=status)
    assert sleeps is not None
    assert len(sleeps) == 1
    assert 0 < sleeps[0] <= 2  # slack-sdk's backoff: half a second and a jitter
    assert _decide(POST, status=status) is None
    assert _decide(UPDATE, status=502) is None


def test_a_dropped_connection_repeats_a_post_only_when_it_was_refused() -> None:
    refused = URLError(ConnectionRefusedError(111, "refused"))
    for error in (URLError("reset"), ConnectionResetError(), RemoteDisconnected()):
        assert _decide(UPDATE, error=error) is not None
        assert _decide(POST, error=error) is None
    assert _decide(POST, error=refused) is not None


def test_an_answered_client_error_and_the_last_attempt_are_not_repeated() -> None:
    answered = HTTPError(UPDATE, 404, "not found", {}, None)  # type: ignore[arg-type]
    assert _decide(UPDATE, status=404, error=answered) is None
    assert _decide(UPDATE, status=503, attempt=2) is None
