"""Build notifications end to end: the build loop's events reach Slack through the outbox.

Real registry, fake Kubernetes API, SQLite, the fake Slack Web API over HTTP with
slack-sdk's real WebClient. Covers: one message per build, posted when the build starts and
edited in place until it is published (thread replies for the details); Slack answering
429 and 500 for a while (nothing lost, nothing sent twice, builds never wait for Slack);
the process killed between the state change's commit and delivery (delivered after the
restart) and between Slack's answer and the outbox update (adopted, not posted twice);
and a feed failing for longer than the threshold (one alert, one recovery message), its
streak's flag overwritten when it holds no time.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest

from releasebot.domain.shared.versions import Arch
from releasebot.notify.slack import SlackNotifier, make_web_client
from releasebot.service.notifications import NotificationService
from tests.e2e.test_reconcile import NEW, OLD, STABLE_AFTER, Rig, _rig, feeds  # noqa: F401
from tests.support.builds import Crash
from tests.support.feedserver import Reply
from tests.support.slackapi import BOT_TOKEN, CHANNEL, SlackApi


@pytest.fixture
def rig(request: pytest.FixtureRequest) -> Iterator[Rig]:
    yield from _rig(request, frozenset({Arch.AMD64}))


@pytest.fixture
def slack(rig: Rig) -> Iterator[SlackApi]:
    with SlackApi(clock=lambda: rig.clock.now.timestamp()) as api:
        yield api


def delivery(rig: Rig, slack: SlackApi) -> NotificationService:
    client = make_web_client(
        BOT_TOKEN, base_url=slack.base_url, timeout=timedelta(seconds=5), sleep=lambda _s: None
    )
    notifier = SlackNotifier(client, channel=CHANNEL, repository=rig.registry.repository)
    return NotificationService(store=rig.store, notifier=notifier)


def top_level(slack: SlackApi) -> list[str]:
    return [m.text for m in slack.messages() if m.thread_ts is None]


def test_one_message_per_build_edited_in_place_until_published(
    rig: Rig, slack: SlackApi, shared_data: Path
) -> None:
    publish = rig.kaniko.registry.push_image
    for tag in OLD:
        publish(rig.registry.repository.split("/", 1)[1], tag)
    notify = delivery(rig, slack)
    rig.cycle()
    notify.deliver(rig.clock.now)
    assert slack.messages() == []  # nothing was built: nothing to tell

    rig.serve_stable(shared_data, STABLE_AFTER, '"s2"')
    rig.cycle()
    notify.deliver(rig.clock.now)
    [message] = slack.messages()
    assert NEW in message.text
    assert "building" in message.text.lower()

    [job] = rig.kaniko.job_names()
    digest = rig.kaniko.build(job)
    rig.cycle()
    notify.deliver(rig.clock.now)
    [message] = [m for m in slack.messages() if m.thread_ts is None]
    assert message.updates >= 1
    assert "published" in message.text.lower()
    assert digest in str(message.blocks)
    assert f"{rig.registry.repository}:{NEW}" in str(message.blocks)
    assert slack.replies(message.ts)  # the details went into the thread
    assert len(slack.calls("chat.postMessage")) == 1 + len(slack.replies(message.ts))


def test_slack_down_for_a_while_loses_nothing_and_blocks_nothing(rig: Rig, slack: SlackApi) -> None:
    notify = delivery(rig, slack)
    slack.fail(times=50, status=500)
    rig.cycle()  # two builds start
    report = notify.deliver(rig.clock.now)
    assert slack.messages() == []
    assert report.backlog >= 2
    assert len(rig.kaniko.job_names()) == 2  # the builds did not wait for Slack

    rig.kaniko.build_all()
    rig.cycle()
    slack.heal()
    slack.fail(times=2, status=429, retry_after=1)
    for _ in range(8):  # rounds of delivery as the backoff allows
        rig.clock.advance(timedelta(minutes=20))
        notify.deliver(rig.clock.now)
    assert rig.store.outbox_backlog() == 0
    assert sorted(top_level(slack)) == sorted(set(top_level(slack)))
    assert len(top_level(slack)) == 2  # one message per build
    assert all("published" in text.lower() for text in top_level(slack))


def test_killed_between_commit_and_delivery_delivers_after_restart(
    rig: Rig, slack: SlackApi
) -> None:
    rig.cycle()  # the build_started events are committed with the builds
    assert rig.store.outbox_backlog() == 2
    # ... and the process dies here. The next process delivers them:
    delivery(rig, slack).deliver(rig.clock.now)
    assert len(top_level(slack)) == 2
    assert rig.store.outbox_backlog() == 0


def test_killed_after_slack_answered_before_the_outbox_update(rig: Rig, slack: SlackApi) -> None:
    rig.cycle()
    store = rig.store
    killed = delivery(rig, slack)
    killed._store = _Killing(store)  # type: ignore[attr-defined]
    with pytest.raises(Crash):
        killed.deliver(rig.clock.now)
    assert len(top_level(slack)) == 1  # Slack has the first message; the outbox does not know
    delivery(rig, slack).deliver(rig.clock.now)
    assert len(top_level(slack)) == 2  # the first was adopted, not posted again
    assert store.outbox_backlog() == 0


def test_a_feed_failing_too_long_is_told_once_and_its_recovery_too(
    rig: Rig, slack: SlackApi
) -> None:
    rig.planner._feed_alert_after = timedelta(hours=6)
    notify = delivery(rig, slack)
    rig.cycle()
    notify.deliver(rig.clock.now)
    builds = len(top_level(slack))
    rig.feeds.route("/nvidia.json", Reply(503, {}, b"down"))
    for _ in range(5):  # 8 hours of failures, polled every 2 hours
        rig.clock.advance(timedelta(hours=2))
        rig.planner.plan()
        notify.deliver(rig.clock.now)
    alerts = [t for t in top_level(slack)[builds:] if "nvidia" in t]
    assert len(alerts) == 1
    rig.feeds.route("/nvidia.json", Reply(200, {}, rig.nvidia_body))
    rig.clock.advance(timedelta(hours=2))
    rig.planner.plan()
    notify.deliver(rig.clock.now)
    [alert] = [m for m in slack.messages() if m.thread_ts is None and "nvidia" in m.text]
    assert alert.updates >= 1  # the same message, edited: the feed recovered
    assert "recovered" in alert.text.lower()


def test_a_failing_flag_that_holds_no_time_starts_the_streak_again(
    rig: Rig, slack: SlackApi
) -> None:
    rig.planner._feed_alert_after = timedelta(hours=6)
    rig.cycle()
    rig.store.set_flag("feed-failing:nvidia", "edited by hand", rig.clock.now)
    rig.feeds.route("/nvidia.json", Reply(503, {}, b"down"))
    rig.clock.advance(timedelta(hours=2))
    rig.planner.plan()  # the flag is overwritten, not an error
    assert rig.store.flag("feed-failing:nvidia") == rig.clock.now.isoformat()
    assert rig.store.flag("feed-alerted:nvidia") is None  # the streak began just now


class _Killing:
    """The store, where ``mark_delivered`` kills the process: Slack has answered, the
    outbox update is never committed."""

    def __init__(self, inner: object) -> None:
        self._inner = inner
        self.mark_delivered = _die

    def __getattr__(self, name: str) -> object:
        return getattr(self._inner, name)


def _die(*_args: object, **_kwargs: object) -> None:
    raise Crash("mark_delivered")
