"""``/releasebot plan`` lists exactly what the next cycle launches, in the same order.

The chat command and the cycle run on the same store, registry and cluster (the in-memory
adapters; the project's feeds read from ``file://``) with one target in every state the
plan has to judge: published, stale (the plan now wants other arches), retrying before and
after its backoff, waiting whose recheck is due, building (a running Job takes a slot),
failed, and missing. The chat's answer is read back as a person reads it; then one cycle
runs and its launches are compared with what the chat said, slot limit included.

Also: a retry asked in chat starts the stored target as it is, without polling any feed.
"""

from __future__ import annotations

import re
from dataclasses import replace
from datetime import timedelta
from pathlib import Path

import httpx
import pytest

from releasebot.builders.kaniko import KanikoOptions
from releasebot.builders.memory import MemoryJobLauncher
from releasebot.domain.ports import FetchResult
from releasebot.domain.shared.versions import Arch
from releasebot.domain.targets.commands import Command, Verb
from releasebot.domain.targets.decisions import Action
from releasebot.domain.targets.models import TargetRecord, TargetState, Validators
from releasebot.domain.targets.policy import DriverPolicy, FlatcarPolicy, Policy
from releasebot.registry.memory import MemoryRegistry
from releasebot.service.commands import CommandService
from releasebot.service.plan import FeedSpec, PlanService
from releasebot.service.reconcile import PAUSED_FLAG, ReconcileOptions, ReconcileService
from releasebot.sources.fetch import HttpFeedFetcher
from releasebot.sources.flatcar import parse_flatcar_feed
from releasebot.sources.nvidia import parse_nvidia_feed
from releasebot.store.memory import MemoryStateStore
from tests.support.builds import Clock

CONTEXT = "git://git.example.test/gpu/recipes.git#refs/heads/main#" + "0123456789" * 4
ITEM = re.compile(r"^• `(?P<tag>[^`]+)` \(amd64, [a-z]+\)$")
THEN = re.compile(r"^• then: `(?P<tag>[^`]+)` waits for a free build slot")


class CountingFetcher:
    """The real fetcher, counting the feeds it is asked for."""

    def __init__(self, inner: HttpFeedFetcher) -> None:
        self.inner = inner
        self.fetched: list[str] = []

    def fetch(self, feed: str, url: str, validators: Validators | None) -> FetchResult:
        self.fetched.append(feed)
        return self.inner.fetch(feed, url, validators)


class Loop:
    """The cycle's parts and the chat command service over them."""

    def __init__(self, test_data: Path, http: httpx.Client) -> None:
        self.fetcher = CountingFetcher(HttpFeedFetcher(http, retries=0))
        self.clock = Clock()
        self.store = MemoryStateStore()
        self.registry = MemoryRegistry()
        self.launcher = MemoryJobLauncher(
            KanikoOptions(
                namespace="releasebot",
                registry_repository=self.registry.repository,
                registry_secret="registry-push",
                context=CONTEXT,
            )
        )
        planner = PlanService(
            store=self.store,
            fetcher=self.fetcher,
            flatcar_feeds=[
                FeedSpec.flatcar("stable", (test_data / "flatcar/releases-stable.json").as_uri())
            ],
            nvidia_feed=FeedSpec.nvidia((test_data / "nvidia/releases.json").as_uri()),
            parse_flatcar=parse_flatcar_feed,
            parse_nvidia=parse_nvidia_feed,
            policy=Policy(
                FlatcarPolicy(("stable",), frozenset({Arch.AMD64}), keep=3),
                DriverPolicy(frozenset({"580"}), frozenset(), keep=3),
            ),
            clock=self.clock,
        )
        self.reconciler = ReconcileService(
            planner=planner,
            store=self.store,
            registry=self.registry,
            launcher=self.launcher,
            clock=self.clock,
            options=ReconcileOptions(max_concurrent_builds=3),
        )
        self.chat = CommandService(store=self.store, reconciler=self.reconciler, clock=self.clock)

    def set(self, record: TargetRecord, state: TargetState, **changes: object) -> None:
        self.store.save(targets=[replace(record, state=state, **changes)])  # type: ignore[arg-type]

    def plan_says(self) -> tuple[list[str], list[str], str]:
        """The tags the chat says would be built now, those it says wait for a slot, and
        the whole answer."""
        text = self.chat.run(Command(Verb.PLAN), "U024BE7LH")["text"]
        lines = text.splitlines()
        now = [m["tag"] for line in lines if (m := ITEM.match(line))]
        then = [m["tag"] for line in lines if (m := THEN.match(line))]
        return now, then, text


@pytest.fixture
def loop(test_data: Path) -> Loop:
    with httpx.Client(timeout=5) as http:
        yield Loop(test_data, http)  # type: ignore[misc]


def test_plan_lists_exactly_what_the_next_cycle_launches(loop: Loop) -> None:
    targets = loop.reconciler.plan().targets
    assert len(targets) == 9  # three releases x three drivers, newest first
    tags = [record.tag for record in targets]
    now = loop.clock.now
    loop.registry.add_image(tags[0])  # published by presence
    loop.registry.add_image(tags[1])
    loop.set(targets[1], TargetState.STALE)  # its tag holds other arches
    loop.set(targets[2], TargetState.RETRYING, attempts=1, next_attempt_at=now + timedelta(hours=1))
    loop.set(targets[3], TargetState.WAITING, next_attempt_at=now - timedelta(minutes=1))
    loop.reconciler.retry(targets[4])  # a running build: one of the three slots is taken
    loop.set(targets[5], TargetState.FAILED, attempts=1, last_error="NonZeroExit")
    loop.set(targets[6], TargetState.RETRYING, attempts=1, next_attempt_at=now)
    # targets[7] and targets[8] stay missing.

    said_now, said_then, text = loop.plan_says()
    assert said_now == [tags[1], tags[3]]  # the stale one and the waiting one, in plan order
    assert said_then == [tags[6], tags[7], tags[8]]
    assert f"later: `{tags[2]}` retries" in text
    assert text.startswith("*Plan*: 9 targets required, 2 would be built now:")

    cycle = loop.reconciler.cycle()
    launched = [d.tag for d in cycle.decisions if d.action is Action.LAUNCHED]
    deferred = [d.tag for d in cycle.decisions if d.action is Action.DEFERRED]
    assert launched == said_now
    assert deferred == said_then[:1]  # the cycle stops at the first that does not fit

    # Again once the slots are taken: the next cycle launches nothing, and chat says so.
    said_now, said_then, text = loop.plan_says()
    assert said_now == []
    assert said_then == [tags[6], tags[7], tags[8]]
    assert "nothing to build now." in text
    assert [d for d in loop.reconciler.cycle().decisions if d.action is Action.LAUNCHED] == []


def test_a_paused_plan_says_what_resuming_would_build(loop: Loop) -> None:
    targets = loop.reconciler.plan().targets
    loop.store.set_flag(PAUSED_FLAG, "U024BE7LH", loop.clock.now)
    said_now, said_then, text = loop.plan_says()
    assert said_now == [t.tag for t in targets[:3]]
    assert text.startswith("*Plan*: 9 targets required, 3 would be built once resumed:")
    assert "Automatic launching is *paused*" in text
    cycle = loop.reconciler.cycle()
    assert [d.action for d in cycle.decisions] == [Action.PAUSED]
    loop.store.set_flag(PAUSED_FLAG, None, loop.clock.now)
    cycle = loop.reconciler.cycle()
    assert [d.tag for d in cycle.decisions if d.action is Action.LAUNCHED] == said_now
    assert said_then == [t.tag for t in targets[3:]]


def test_a_retry_starts_the_stored_target_without_polling_a_feed(loop: Loop) -> None:
    target = loop.reconciler.plan().targets[0]
    loop.set(target, TargetState.FAILED, attempts=1, last_error="NonZeroExit")
    polled = len(loop.fetcher.fetched)
    answer = loop.chat.run(Command(Verb.RETRY, tag=target.tag), "U024BE7LH")["text"]
    assert len(loop.fetcher.fetched) == polled  # no feed was asked
    [job] = loop.launcher.job_names()
    first, budget = answer.split("\n")
    assert first.endswith(f"started `{target.tag}` (amd64): job `{job}`")
    assert "the full retry budget: up to 3 attempts" in budget
    args = loop.launcher.manifest(job)["spec"]["template"]["spec"]["containers"][0]["args"]
    assert f"--build-arg=DRIVER_VERSION={target.target.driver_version.text}" in args
    assert f"--build-arg=FLATCAR_VERSION={target.target.flatcar_version.text}" in args
    assert job.endswith("-amd64-2")  # the stored target's next attempt
