"""Hostile registry answers, replayed against ``OrasRegistry`` over real HTTP.

A small HTTP server plays the registry (``tests/support/feedserver.py`` routes any path);
each case of ``tests/data/hostile/registry/`` is the answer to one call (``tags``,
``labels`` or ``digest``). The case passes when the call raises the named error from the
domain's tree (nothing else escapes), its message is one clean line naming the problem,
and nothing a refused host or the body said beyond that is quoted. A case with ``tags``
instead of ``error`` is a listing the call survives: it answers exactly those tags (the
names outside the OCI grammar skipped), says so in one clean log line, and no request
left the repository.
"""

from __future__ import annotations

import logging
from datetime import timedelta
from typing import Any

import pytest

from releasebot.domain.shared import errors
from releasebot.registry.oras import OrasRegistry
from tests.hostile.conftest import Case, assert_absent, assert_clean_line, body_of, cases
from tests.support.feedserver import FeedServer, Reply

PATHS = {
    "tags": "/v2/gpu/driver/tags/list?n=100",
    "labels": "/v2/gpu/driver/manifests/v1",
    "digest": "/v2/gpu/driver/manifests/v1",
}


@pytest.fixture
def server() -> Any:
    with FeedServer() as running:
        yield running


@pytest.mark.usefixtures("logs_reach_caplog")
@pytest.mark.parametrize("case", cases("registry"))
def test_a_hostile_registry_answer_is_one_clean_error(
    case: Case, server: FeedServer, caplog: pytest.LogCaptureFixture
) -> None:
    call = case.get("call", "tags")
    if "redirect" in case.data:
        reply = Reply(int(case.get("status", 302)), {"Location": case["redirect"]})
    else:
        headers = dict(case.get("headers", {"Content-Type": "application/json"}))
        reply = Reply(int(case.get("status", 200)), headers, body_of(case.get("body", "")))
    server.route(PATHS[call], reply)
    registry = OrasRegistry(
        f"127.0.0.1:{server.port}/gpu/driver",
        insecure=True,
        page_size=100,
        retries=0,
        sleep=lambda _: None,
        max_backoff=timedelta(0),
    )
    calls = {"tags": registry.tags, "labels": lambda: registry.labels("v1")}
    ask = calls.get(call, lambda: registry.digest("v1"))
    if "tags" in case.data:
        with caplog.at_level(logging.WARNING):
            assert ask() == set(case["tags"])
        lines = [record.getMessage() for record in caplog.records]
        assert len(lines) == 1, lines
        assert_clean_line(lines[0], case["logged"])
        assert_absent(lines[0], case.get("never_shown"))
        assert len(lines[0]) <= 600
        assert [request.path for request in server.requests] == [PATHS[call]]
        return
    expected = getattr(errors, case["error"])
    with pytest.raises(errors.ReleasebotError) as caught:
        ask()
    assert type(caught.value) is expected, repr(caught.value)
    assert_clean_line(str(caught.value), case["problem"])
    assert_absent(str(caught.value), case.get("never_shown"))
    assert len(str(caught.value)) <= 600
