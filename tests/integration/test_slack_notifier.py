"""Delivery of outbox events to Slack: ``NotificationService`` + ``SlackNotifier`` against the
fake Slack Web API (``tests/support/slackapi.py``) over real HTTP, with slack-sdk's real WebClient.

Covers: the first event posts, later ones update the message and reply in its thread;
429 with ``Retry-After`` (short: waited in the call; long: left to the backoff); 5xx for
a while (undelivered, retried later, never duplicated, even when Slack posted and then
answered 500); a process killed between Slack's answer and ``mark_delivered`` (the restart
adopts the message, or the thread reply, instead of posting twice); permanent refusals
(``invalid_auth``: kept, retried much later, logged once; one bad message holds back only
its own key); a deleted message posted again; a restart on SQLite resuming delivery; and
that the token never reaches a log line. No real sleeps: the retry handlers record them.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from slack_sdk import WebClient

from releasebot.domain.shared.errors import ChatRejectedError, ChatUnavailableError
from releasebot.domain.targets.events import Event, EventKind, build_key, read_event
from releasebot.notify.render import render_message
from releasebot.notify.slack import EVENT_TYPE, SlackNotifier, make_web_client
from releasebot.service.notifications import NotificationService
from releasebot.store import migrate
from releasebot.store.engine import make_engine
from releasebot.store.memory import MemoryStateStore
from releasebot.store.sql import SqlStateStore
from tests.support.slackapi import BOT_TOKEN, CHANNEL, SlackApi

T0 = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
REPOSITORY = "registry.example.com/gpu/nvidia-driver"
TAG = "580.105.08-4459.2.1"
DIGEST = "sha256:" + "d" * 64


class Killed(BaseException):
    """The process dies (SIGKILL, OOM): nothing after this line runs."""


@dataclass
class Clock:
    now: datetime = T0 + timedelta(seconds=5)

    def advance(self, delta: timedelta) -> datetime:
        self.now += delta
        return self.now


@dataclass
class Rig:
    slack: SlackApi
    clock: Clock
    sleeps: list[float] = field(default_factory=list)

    def client(self, token: str = BOT_TOKEN) -> WebClient:
        return make_web_client(
            token,
            base_url=self.slack.base_url,
            timeout=timedelta(seconds=5),
            sleep=self.sleeps.append,
        )

    def service(self, store: Any, client: WebClient | None = None) -> NotificationService:
        notifier = SlackNotifier(client or self.client(), channel=CHANNEL, repository=REPOSITORY)
        return NotificationService(store=store, notifier=notifier)


@pytest.fixture
def rig() -> Iterator[Rig]:
    clock = Clock()
    with SlackApi(clock=lambda: clock.now.timestamp()) as slack:
        yield Rig(slack, clock)


def event(kind: EventKind, minutes: int = 0, tag: str = TAG, **payload: Any) -> Event:
    facts: dict[str, Any] = {"attempt": 1, "max_attempts": 3, "arches": ["amd64"], **payload}
    return read_event(kind, build_key(tag, 1), tag, T0 + timedelta(minutes=minutes), facts)


STARTED = event(EventKind.BUILD_STARTED, jobs=["rb-job-amd64-1"])
PUBLISHED = event(EventKind.TAG_PUBLISHED, 1, digest=DIGEST)


def dying_after(client: WebClient, method: str) -> WebClient:
    """``client``, but the process dies right after Slack answered the first ``method``."""
    real = client.api_call

    def api_call(api_method: str, **kwargs: Any) -> Any:
        response = real(api_method, **kwargs)
        if api_method == method:
            raise Killed
        return response

    client.api_call = api_call  # type: ignore[method-assign]
    return client


def test_the_first_event_posts_and_later_ones_update_and_reply(rig: Rig) -> None:
    store = MemoryStateStore()
    store.save(events=[STARTED])
    report = rig.service(store).deliver(rig.clock.now)
    assert report.delivered == [1]
    [message] = rig.slack.messages()
    assert message.blocks == render_message([STARTED], REPOSITORY).blocks
    assert message.text.startswith(f"Building {TAG}")
    assert message.metadata == {
        "event_type": EVENT_TYPE,
        "event_payload": {"event_id": 1, "message_key": build_key(TAG, 1)},
    }
    ref = store.message_ref(build_key(TAG, 1))
    assert ref is not None
    assert (ref.channel, ref.ts) == (CHANNEL, message.ts)

    store.save(events=[PUBLISHED])
    report = rig.service(store).deliver(rig.clock.advance(timedelta(minutes=2)))
    assert (report.delivered, report.backlog) == ([2], 0)
    [message] = rig.slack.messages()  # still one message, edited in place
    assert message.updates == 1
    assert message.blocks == render_message([STARTED, PUBLISHED], REPOSITORY).blocks
    [reply] = rig.slack.replies(message.ts)
    assert DIGEST in reply.text
    assert reply.metadata is not None
    assert reply.metadata["event_payload"]["event_id"] == 2
    methods = [call.method for call in rig.slack.calls()]
    assert methods == [
        "conversations.history",  # nothing of event 1 posted yet?
        "chat.postMessage",
        "chat.update",
        "conversations.replies",  # nothing of event 2 in the thread yet?
        "chat.postMessage",
    ]


def test_a_short_retry_after_is_waited_for_in_the_call(rig: Rig) -> None:
    store = MemoryStateStore()
    store.save(events=[STARTED])
    rig.slack.fail("chat.postMessage", status=429, retry_after=2)
    report = rig.service(store).deliver(rig.clock.now)
    assert report.delivered == [1]
    assert rig.sleeps == [2.0]
    assert [c.status for c in rig.slack.calls("chat.postMessage")] == [429, 200]
    assert len(rig.slack.messages()) == 1


def test_a_long_retry_after_is_left_to_the_backoff(rig: Rig) -> None:
    store = MemoryStateStore()
    store.save(events=[STARTED, event(EventKind.BUILD_STARTED, tag="other-tag")])
    rig.slack.fail("chat.postMessage", status=429, retry_after=120)
    report = rig.service(store).deliver(rig.clock.now)
    assert (report.delivered, report.postponed) == ([], [1])
    assert report.stopped == "slack chat.postMessage: rate limited"
    assert rig.sleeps == []
    assert len(rig.slack.calls("chat.postMessage")) == 1  # the round stopped: no hammering
    [waiting, _] = store.pending_events(rig.clock.now + timedelta(minutes=5))
    assert waiting.next_attempt_at == rig.clock.now + timedelta(seconds=120)

    report = rig.service(store).deliver(rig.clock.advance(timedelta(seconds=121)))
    assert report.delivered == [1, 2]
    assert len(rig.slack.messages()) == 2


def test_slack_down_for_a_while_delays_but_never_duplicates(rig: Rig) -> None:
    store = MemoryStateStore()
    store.save(events=[STARTED])
    rig.slack.fail("chat.postMessage", status=500, times=2)
    service = rig.service(store)

    first = service.deliver(rig.clock.now)
    assert (first.postponed, first.backlog) == ([1], 1)
    assert rig.sleeps == []  # a post is never repeated inside the call
    assert service.deliver(rig.clock.advance(timedelta(seconds=10))).delivered == []  # not due
    second = service.deliver(rig.clock.advance(timedelta(seconds=30)))
    assert second.postponed == [1]
    [waiting] = store.pending_events(rig.clock.now + timedelta(hours=1))
    assert waiting.attempts == 2
    assert waiting.next_attempt_at == rig.clock.now + timedelta(seconds=60)  # doubled
    assert waiting.last_error == "slack chat.postMessage: HTTP 500"

    third = service.deliver(rig.clock.advance(timedelta(seconds=60)))
    assert third.delivered == [1]
    assert len(rig.slack.messages()) == 1


def test_a_post_slack_made_before_answering_500_is_adopted(rig: Rig) -> None:
    store = MemoryStateStore()
    store.save(events=[STARTED])
    rig.slack.fail("chat.postMessage", status=500, processed=True)
    service = rig.service(store)
    assert service.deliver(rig.clock.now).postponed == [1]
    assert len(rig.slack.messages()) == 1  # Slack did post it

    assert service.deliver(rig.clock.advance(timedelta(minutes=1))).delivered == [1]
    [message] = rig.slack.messages()
    assert len(rig.slack.calls("chat.postMessage")) == 1
    ref = store.message_ref(build_key(TAG, 1))
    assert ref is not None
    assert ref.ts == message.ts


def test_an_update_is_retried_in_the_call_on_a_server_error(rig: Rig) -> None:
    store = MemoryStateStore()
    store.save(events=[STARTED])
    rig.service(store).deliver(rig.clock.now)
    store.save(events=[PUBLISHED])
    rig.slack.fail("chat.update", status=503, times=2)
    assert rig.service(store).deliver(rig.clock.now).delivered == [2]
    assert len(rig.sleeps) == 2
    assert [c.status for c in rig.slack.calls("chat.update")] == [503, 503, 200]


def test_a_kill_after_the_post_is_repaired_by_adopting_the_message(rig: Rig) -> None:
    store = MemoryStateStore()
    store.save(events=[STARTED])
    with pytest.raises(Killed):
        rig.service(store, dying_after(rig.client(), "chat.postMessage")).deliver(rig.clock.now)
    [stored] = store.pending_events(rig.clock.now)
    assert stored.attempts == 0  # nobody lived to count the attempt

    report = rig.service(store).deliver(rig.clock.advance(timedelta(seconds=30)))  # restarted
    assert report.delivered == [1]
    [message] = rig.slack.messages()
    assert len(rig.slack.calls("chat.postMessage")) == 1
    ref = store.message_ref(build_key(TAG, 1))
    assert ref is not None
    assert ref.ts == message.ts


def test_a_kill_after_the_thread_reply_is_repaired_by_adopting_it(rig: Rig) -> None:
    store = MemoryStateStore()
    store.save(events=[STARTED])
    rig.service(store).deliver(rig.clock.now)
    store.save(events=[PUBLISHED])
    dying = dying_after(rig.client(), "chat.postMessage")
    with pytest.raises(Killed):
        rig.service(store, dying).deliver(rig.clock.now)

    assert rig.service(store).deliver(rig.clock.now).delivered == [2]
    [message] = rig.slack.messages()
    assert len(rig.slack.replies(message.ts)) == 1
    assert message.updates == 2  # the update is simply made again: same content


def test_invalid_auth_is_permanent_kept_and_logged_once(
    rig: Rig, caplog: pytest.LogCaptureFixture
) -> None:
    store = MemoryStateStore()
    store.save(events=[STARTED, event(EventKind.BUILD_STARTED, tag="other-tag")])
    bad = rig.service(store, rig.client("xoxb-wrong"))
    with caplog.at_level(logging.ERROR, logger="releasebot.notifications"):
        report = bad.deliver(rig.clock.now)
    assert report.stopped is not None
    assert "invalid_auth" in report.stopped
    assert report.postponed == [1]  # the round stopped: the second was not even tried
    [record] = caplog.records
    assert "invalid_auth" in record.getMessage()

    [kept] = store.pending_events(rig.clock.now + timedelta(hours=6))[:1]
    assert kept.next_attempt_at == rig.clock.now + timedelta(hours=6)
    caplog.clear()
    with caplog.at_level(logging.ERROR, logger="releasebot.notifications"):
        bad.deliver(rig.clock.advance(timedelta(hours=6)))
    assert caplog.records == []  # the same refusal again is not news

    fixed = rig.service(store).deliver(rig.clock.advance(timedelta(hours=6)))
    assert fixed.delivered == [1, 2]
    assert rig.slack.messages()


def test_a_refused_message_holds_back_only_its_own_key(rig: Rig) -> None:
    store = MemoryStateStore()
    other = event(EventKind.BUILD_STARTED, tag="other-tag")
    store.save(events=[STARTED, PUBLISHED, other])
    rig.slack.fail("chat.postMessage", error="invalid_blocks")
    report = rig.service(store).deliver(rig.clock.now)
    assert (report.postponed, report.held, report.delivered) == ([1], [2], [3])
    assert report.stopped is None
    # Even when the first event's backoff hides it, its key's later events wait for it.
    report = rig.service(store).deliver(rig.clock.advance(timedelta(minutes=1)))
    assert (report.held, report.delivered) == ([2], [])


def test_a_deleted_message_is_posted_again(rig: Rig) -> None:
    store = MemoryStateStore()
    store.save(events=[STARTED])
    rig.service(store).deliver(rig.clock.now)
    [old] = rig.slack.messages()
    rig.slack.delete(old.ts)
    store.save(events=[PUBLISHED])
    assert rig.service(store).deliver(rig.clock.advance(timedelta(seconds=1))).delivered == [2]
    [new] = rig.slack.messages()
    assert new.blocks == render_message([STARTED, PUBLISHED], REPOSITORY).blocks
    ref = store.message_ref(build_key(TAG, 1))
    assert ref is not None
    assert ref.ts == new.ts != old.ts


def test_a_restart_resumes_delivery_from_the_database(rig: Rig, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'releasebot.db'}"
    engine = make_engine(url)
    migrate.upgrade(engine)
    store = SqlStateStore(engine)
    store.save(events=[STARTED, PUBLISHED])
    rig.slack.fail(status=500, times=50)
    assert rig.service(store).deliver(rig.clock.now).postponed == [1]
    engine.dispose()  # the process ends

    rig.slack.heal()
    engine = make_engine(url)
    try:
        report = rig.service(SqlStateStore(engine)).deliver(rig.clock.advance(timedelta(hours=1)))
    finally:
        engine.dispose()
    assert (report.delivered, report.backlog) == ([1, 2], 0)
    [message] = rig.slack.messages()
    assert message.updates == 1
    assert len(rig.slack.replies(message.ts)) == 1


def test_errors_are_translated_at_the_boundary(rig: Rig) -> None:
    notifier = SlackNotifier(rig.client(), channel="C0NOWHERE", repository=REPOSITORY)
    stored = MemoryStateStore()
    stored.save(events=[STARTED])
    [first] = stored.pending_events(rig.clock.now)
    with pytest.raises(ChatRejectedError) as refused:
        notifier.deliver(first, [STARTED], None)
    assert refused.value.code == "channel_not_found"
    assert refused.value.affects_all
    assert isinstance(refused.value.__cause__, Exception)

    port = rig.slack.base_url
    rig.slack.stop()  # nothing listens any more: connection refused
    closed = make_web_client(
        BOT_TOKEN, base_url=port, timeout=timedelta(seconds=2), sleep=rig.sleeps.append
    )
    with pytest.raises(ChatUnavailableError, match=r"conversations\.history"):
        SlackNotifier(closed, channel=CHANNEL, repository=REPOSITORY).deliver(
            first, [STARTED], None
        )
    assert len(rig.sleeps) == 2  # bounded retries of the refused connection


def test_the_token_never_reaches_a_log_line(rig: Rig, caplog: pytest.LogCaptureFixture) -> None:
    store = MemoryStateStore()
    store.save(events=[STARTED, PUBLISHED])
    rig.slack.fail("chat.update", status=500, times=5)
    with caplog.at_level(logging.DEBUG):
        rig.service(store).deliver(rig.clock.now)
        rig.service(store, rig.client("xoxb-secret-wrong")).deliver(
            rig.clock.now + timedelta(days=1)
        )
    assert caplog.records
    assert "Received the following response" not in caplog.text  # sdk DEBUG: whole bodies
    assert BOT_TOKEN not in caplog.text
    assert "xoxb-secret-wrong" not in caplog.text
