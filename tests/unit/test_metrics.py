"""``ServiceMetrics``: what one cycle's report and the store's state turn into, read back
through ``prometheus_client``'s own text parser (as Prometheus would scrape it).

Covers targets by state and the unpublished count, builds started and finished by result
and reason with their duration, feed polls and last success, the outbox backlog, and the
cycle's own gauges.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

from prometheus_client.parser import text_string_to_metric_families

from releasebot.domain.shared.versions import Arch
from releasebot.domain.targets.builds import BuildRecord, BuildState, FailureReason
from releasebot.domain.targets.decisions import Decision
from releasebot.domain.targets.models import TargetRecord, TargetState
from releasebot.runtime.metrics import ServiceMetrics
from releasebot.service.plan import FeedOutcome, PlanResult, PollStatus
from releasebot.service.report import CycleReport
from releasebot.store.memory import MemoryStateStore
from tests.contract.test_store_contract import SEEN, URL, driver, flatcar, plan

T0 = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


def samples(metrics: ServiceMetrics) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    text = metrics.render().decode()
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def build(tag: str, job: str, state: BuildState, **extra: object) -> BuildRecord:
    return BuildRecord(
        tag=tag,
        arch=Arch.AMD64,
        attempt=1,
        job_name=job,
        destination_tag=tag,
        state=state,
        created_at=T0,
        **extra,  # type: ignore[arg-type]
    )


def test_a_cycle_and_the_store_become_metrics() -> None:
    store = MemoryStateStore()
    fc_new, fc_old = flatcar("4593.2.5"), flatcar("4593.2.4")
    store.record_flatcar_feed("flatcar/stable", URL, [fc_new, fc_old], SEEN, T0)
    [published, building] = store.sync_targets([plan(driver(), fc_old), plan(driver(), fc_new)], T0)
    store.save(
        targets=[
            replace(published, state=TargetState.PUBLISHED),
            replace(building, state=TargetState.BUILDING),
        ],
        builds=[
            build(
                published.tag, "job-ok", BuildState.SUCCEEDED, finished_at=T0 + timedelta(minutes=9)
            ),
            build(
                building.tag,
                "job-oom",
                BuildState.FAILED,
                reason=FailureReason.OOM_KILLED,
                finished_at=T0 + timedelta(minutes=2),
            ),
        ],
    )
    report = CycleReport(
        plan=PlanResult(
            targets=[],
            outcomes=[
                FeedOutcome("flatcar/stable", PollStatus.UNCHANGED),
                FeedOutcome("nvidia", PollStatus.FAILED),
            ],
        ),
        decisions=[
            Decision("launched", building.tag, "amd64", "job-new"),
            Decision("adopted", building.tag, "amd64", "job-adopted"),
            Decision("build succeeded", published.tag, "sha256:x", "job-ok"),
            Decision("build failed", building.tag, "OOMKilled", "job-oom"),
        ],
    )
    metrics = ServiceMetrics()
    metrics.observe_cycle(report, store, duration=timedelta(seconds=1.5), finished_at=T0)
    got = samples(metrics)
    assert got[("releasebot_targets", (("state", "published"),))] == 1
    assert got[("releasebot_targets", (("state", "building"),))] == 1
    assert got[("releasebot_targets", (("state", "missing"),))] == 0
    assert got[("releasebot_required_tags_unpublished", ())] == 1
    assert got[("releasebot_builds_started_total", ())] == 1  # adopting is not starting
    assert got[("releasebot_builds_finished_total", (("reason", ""), ("result", "succeeded")))] == 1
    failed = ("releasebot_builds_finished_total", (("reason", "OOMKilled"), ("result", "failed")))
    assert got[failed] == 1
    assert got[("releasebot_build_duration_seconds_count", ())] == 2
    assert got[("releasebot_build_duration_seconds_sum", ())] == 11 * 60
    assert got[("releasebot_feed_polls_total", (("feed", "nvidia"), ("result", "failed")))] == 1
    last = ("releasebot_feed_last_success_timestamp_seconds", (("feed", "flatcar/stable"),))
    assert got[last] == T0.timestamp()
    assert got[("releasebot_notification_backlog", ())] == 0
    assert got[("releasebot_cycle_duration_seconds_sum", ())] == 1.5
    assert got[("releasebot_last_cycle_timestamp_seconds", ())] == T0.timestamp()
    assert got[("releasebot_cycles_total", (("outcome", "completed"),))] == 1


def test_each_instance_has_its_own_registry() -> None:
    first, second = ServiceMetrics(), ServiceMetrics()
    first.set_leader(True)
    assert samples(first)[("releasebot_is_leader", ())] == 1
    assert samples(second)[("releasebot_is_leader", ())] == 0


class CountingStore(MemoryStateStore):
    """The memory store, counting how often the targets are read."""

    def __init__(self) -> None:
        super().__init__()
        self.target_reads = 0

    def targets(self, **kwargs: object) -> list[TargetRecord]:  # type: ignore[override]
        self.target_reads += 1
        return super().targets(**kwargs)  # type: ignore[arg-type]


def test_targets_are_counted_again_only_when_their_counter_moved_or_in_a_full_pass() -> None:
    store = CountingStore()
    [record] = store.sync_targets([plan(driver(), flatcar("4593.2.5"))], T0)
    metrics = ServiceMetrics()
    report = CycleReport()

    def unpublished() -> float:
        return samples(metrics)[("releasebot_required_tags_unpublished", ())]

    metrics.observe_cycle(report, store, duration=timedelta(seconds=1), finished_at=T0)
    assert (store.target_reads, unpublished()) == (1, 1)
    metrics.observe_cycle(report, store, duration=timedelta(seconds=1), finished_at=T0)
    metrics.observe_store(store)  # a follower's tick
    assert store.target_reads == 1
    store.save(targets=[replace(record, state=TargetState.PUBLISHED)])
    metrics.observe_cycle(report, store, duration=timedelta(seconds=1), finished_at=T0)
    assert (store.target_reads, unpublished()) == (2, 0)
    full = CycleReport(full_pass=True)
    metrics.observe_cycle(full, store, duration=timedelta(seconds=1), finished_at=T0)
    assert store.target_reads == 3
