"""The lifecycle of a target: every arrow of the state machine, as pure functions.

``docs/architecture.md`` draws the machine; this module is its one home. Each function takes
the facts the service fetched (the target's record, its builds, what the registry or the
inputs' servers said, the time) and returns a typed decision: the record as it becomes,
what to log (a ``Decision``, its ``Action``: ``domain.targets.decisions``) and what to tell (an
``Event``, its payload ``events.build_event``'s). The service only fetches facts, saves
decisions (one transaction each) and keeps the order. The cycle, ``/releasebot plan`` and
``missing``, the CLI and the metrics ask these same functions, so they cannot disagree::

    plan (store)       new target                         -> unknown
    check_registry     unknown, missing, waiting + tag     -> published
                       unknown, published, stale - tag     -> missing
    replan (models)    published, arches changed           -> stale
    is_due             missing, stale; retrying and waiting once next_attempt_at came
    check_inputs       due, an input not published yet     -> waiting
                       due, the runfile gone runfile_grace -> failed
    start_attempt      due, a build slot free              -> building
    settle             building, every arch verified       -> published (index if multi-arch)
                       building, transient, budget left    -> retrying
                       building, permanent or budget spent -> failed
                       building, driver does not compile   -> incompatible (told once)
    unsigned           building, signing failed for good   -> failed (never published unsigned)
    hand_refusal       a person's build or retry           -> building (not while building,
                                                              nor published without --force),
                                                              with a full retry budget

A new input to a decision is a new argument of the function that makes it, never a copy of
the rule elsewhere (``launch_order`` takes the tags nodes wait for at the reboot gate).
Deliberately not here: I/O, the clock, and how a single Job's end is judged (``builds``).
"""

from __future__ import annotations

import enum
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta

from releasebot.domain.shared.versions import Arch
from releasebot.domain.targets.attestation import Verification
from releasebot.domain.targets.builds import (
    BuildRecord,
    BuildRequest,
    BuildState,
    FailureReason,
    describe_build,
    retry_delay,
)
from releasebot.domain.targets.decisions import Action, Decision
from releasebot.domain.targets.events import Event, EventKind, build_event
from releasebot.domain.targets.models import TargetReason, TargetRecord, TargetState
from releasebot.domain.targets.readiness import Readiness


@dataclass(frozen=True)
class LifecycleRules:
    """The numbers the lifecycle runs by (the ``[build]`` settings hold the user's)."""

    max_concurrent_builds: int = 2
    """Build Jobs running at once, across all targets (one Job per arch)."""
    max_attempts: int = 3
    """Attempts since the last publish before a transient failure becomes permanent."""
    retry_base: timedelta = timedelta(minutes=5)
    """Backoff after the first failed attempt, doubled per attempt."""
    retry_cap: timedelta = timedelta(hours=6)
    """The longest backoff."""
    waiting_recheck: timedelta = timedelta(minutes=30)
    """How soon a target waiting for its inputs is checked again."""
    runfile_grace: timedelta = timedelta(days=3)
    """A runfile still missing this long after the target was planned is gone for good."""


@dataclass(frozen=True)
class Change:
    """A transition: the record as it becomes, what to log, what to tell (saved together)."""

    record: TargetRecord
    decision: Decision | None = None
    event: Event | None = None


# -- what the registry says ----------------------------------------------------------------

_UNJUDGED = frozenset({TargetState.UNKNOWN, TargetState.MISSING, TargetState.WAITING})
"""States no build of ours has judged: only these are published by the tag's presence. After
a failed verification (wrong digest, wrong labels) the tag may hold the wrong image."""
_VANISHABLE = frozenset({TargetState.UNKNOWN, TargetState.PUBLISHED, TargetState.STALE})


def check_registry(record: TargetRecord, *, present: bool, now: datetime) -> Change | None:
    """The target as the registry's tag list shows it; ``None`` when that changes nothing.

    A tag that exists is published, whoever pushed it; one that vanished is missing again.
    """
    if present and record.state in _UNJUDGED:
        found = Decision(Action.PUBLISHED, record.tag, "found in the registry")
        return Change(mark_published(record, record.digest, now), found)
    if not present and record.state in _VANISHABLE:
        vanished = None
        if record.state is TargetState.PUBLISHED:
            vanished = Decision(Action.MISSING, record.tag, "tag vanished from the registry")
        return Change(replace(record, state=TargetState.MISSING, updated_at=now), vanished)
    return None


def mark_published(record: TargetRecord, digest: str | None, now: datetime) -> TargetRecord:
    """Published with ``digest``; an image with another digest than the one a node proved
    (a rebuild) must be proven again."""
    rebuilt = digest is not None and digest != record.digest
    return replace(
        record,
        state=TargetState.PUBLISHED,
        digest=digest,
        published_at=now,
        next_attempt_at=None,
        last_error=None,
        updated_at=now,
        proven_at=None if rebuilt else record.proven_at,
        proven_node=None if rebuilt else record.proven_node,
        proven_arches=frozenset() if rebuilt else record.proven_arches,
    )


# -- what is launched next -----------------------------------------------------------------


_DUE_NOW = frozenset({TargetState.MISSING, TargetState.STALE})
_DUE_LATER = frozenset({TargetState.RETRYING, TargetState.WAITING})


def is_due(record: TargetRecord, now: datetime) -> bool:
    """Whether the target's next attempt may start now (inputs and a build slot permitting)."""
    if record.state in _DUE_NOW:
        return True
    if record.state in _DUE_LATER:
        return record.next_attempt_at is None or record.next_attempt_at <= now
    return False


def may_come_due(record: TargetRecord) -> bool:
    """Whether ``is_due`` can ever say yes for the record as it is (at some time): the
    cycle keeps only these between passes, so a steady cycle over 10,000 published
    targets asks ``launch_order`` about none of them."""
    return record.state in _DUE_NOW or record.state in _DUE_LATER


def launch_order(
    records: Iterable[TargetRecord], now: datetime, *, urgent: Collection[str] = ()
) -> list[TargetRecord]:
    """The due targets in launch order: ``urgent`` tags (nodes wait at the reboot gate for
    them), then pending reboots, then the rest, each in plan order (newest first)."""

    def rank(record: TargetRecord) -> int:
        pending = TargetReason.PENDING_REBOOT in record.target.reasons
        return 0 if record.tag in urgent else 1 if pending else 2

    return sorted((record for record in records if is_due(record, now)), key=rank)


def has_room(record: TargetRecord, running: int, rules: LifecycleRules) -> bool:
    """Whether the target's Jobs fit beside the ``running`` ones (alone, any target fits)."""
    needed = len(record.target.arches)
    return not running or running + needed <= rules.max_concurrent_builds


@dataclass(frozen=True)
class LaunchPlan:
    """What the next cycle launches, in order, if the inputs are there and nothing changes."""

    launch: tuple[TargetRecord, ...]
    deferred: tuple[TargetRecord, ...]
    """Due, but waiting for a build slot (launch order is strict: nothing overtakes them)."""


def launch_plan(
    records: Iterable[TargetRecord],
    *,
    running: int,
    now: datetime,
    rules: LifecycleRules,
    urgent: Collection[str] = (),
) -> LaunchPlan:
    """The launches the cycle would make from ``records`` with ``running`` Jobs in flight,
    taking every input as published (only the cycle asks their servers)."""
    launch: list[TargetRecord] = []
    deferred: list[TargetRecord] = []
    for record in launch_order(records, now, urgent=urgent):
        if deferred or not has_room(record, running, rules):
            deferred.append(record)
            continue
        launch.append(record)
        running += len(record.target.arches)
    return LaunchPlan(tuple(launch), tuple(deferred))


def check_inputs(
    record: TargetRecord, answers: Sequence[Readiness], *, now: datetime, rules: LifecycleRules
) -> Change | None:
    """A due target whose inputs are not all published waits (or, for a runfile missing
    longer than ``runfile_grace`` since it was planned, fails); ``None``: it may start."""
    missing = [url for answer in answers for url in answer.missing]
    if not missing:
        return None
    runfile_gone = any(answer.runfile_missing for answer in answers)
    if runfile_gone and now - record.first_planned_at >= rules.runfile_grace:
        why = f"NVIDIA runfile still missing after {rules.runfile_grace}: {missing[-1]}"
        failed = replace(record, state=TargetState.FAILED, last_error=why, updated_at=now)
        event = build_event(EventKind.BUILD_FAILED, failed, now, (), rules.max_attempts, why)
        return Change(failed, Decision(Action.FAILED, record.tag, why), event)
    detail = f"waiting for {len(missing)} input(s), first: {missing[0]}"
    waiting = replace(
        record,
        state=TargetState.WAITING,
        next_attempt_at=now + rules.waiting_recheck,
        last_error=detail,
        updated_at=now,
    )
    said = (
        None
        if record.state is TargetState.WAITING
        else Decision(Action.WAITING, record.tag, detail)
    )
    return Change(waiting, said)


@dataclass(frozen=True)
class Attempt:
    """A started attempt: the building record, one build row per arch, the announcement."""

    record: TargetRecord
    builds: tuple[BuildRecord, ...]
    event: Event


def start_attempt(
    record: TargetRecord,
    requests: Sequence[BuildRequest],
    *,
    reused: Mapping[Arch, str],
    now: datetime,
    rules: LifecycleRules,
    by_hand: bool = False,
) -> Attempt:
    """The next attempt of ``record``, one build per request; an arch whose image already
    exists (``reused``: its digest) is a build that succeeded without a Job. ``by_hand``:
    a person asked for it (``build``, ``retry``), so it starts a full retry budget."""
    builds = tuple(
        BuildRecord(
            tag=record.tag,
            arch=request.arch,
            attempt=request.attempt,
            job_name=request.job_name,
            destination_tag=request.destination_tag,
            state=BuildState.SUCCEEDED if request.arch in reused else BuildState.LAUNCHING,
            created_at=now,
            digest=reused.get(request.arch),
            finished_at=now if request.arch in reused else None,
        )
        for request in requests
    )
    building = replace(
        record,
        state=TargetState.BUILDING,
        attempts=record.attempts + 1,
        next_attempt_at=None,
        updated_at=now,
        budget_start=record.attempts if by_hand else record.budget_start,
    )
    return Attempt(
        building,
        builds,
        build_event(EventKind.BUILD_STARTED, building, now, builds, rules.max_attempts),
    )


def hand_refusal(
    record: TargetRecord, *, active: Sequence[BuildRecord], published: bool, force: bool
) -> str | None:
    """Why a person's build or retry of ``record`` is not started; ``None``: start it.
    A failed target starts its next attempt: a human asking is the retry."""
    if active:
        jobs = ", ".join(build.job_name for build in active)
        return f"{record.tag} is already building ({jobs})"
    if published and not force:
        return f"{record.tag} is already published; add --force to build and push it again"
    return None


# -- when an attempt is over ---------------------------------------------------------------


@dataclass(frozen=True)
class Publish:
    """Every arch of the attempt is verified: the tag is published once its digest is known
    (the one image's, or an OCI index's pushed over the per-arch images)."""

    record: TargetRecord
    builds: tuple[BuildRecord, ...]
    digests: tuple[tuple[Arch, str], ...]

    @property
    def needs_index(self) -> bool:
        return len(self.builds) > 1


def settle(
    record: TargetRecord,
    builds: Sequence[BuildRecord],
    *,
    now: datetime,
    rules: LifecycleRules,
    others: Iterable[TargetRecord] = (),
) -> Change | Publish | None:
    """What the end of the current attempt means; ``None`` while a build of it is active.

    ``builds`` are all of the target's builds (the retry budget counts the attempts since the
    last one that published). A failed arch fails the attempt: incompatible when the recipe
    said the driver does not compile for the kernel (never retried; ``others``, the stored
    targets, name the newest selected branch that did build for it), retried when every
    failure is transient and the budget allows, else handed to a human.
    """
    current = tuple(build for build in builds if build.attempt == record.attempts)
    if not current or any(build.state.active for build in current):
        return None
    failed = [build for build in current if build.state is BuildState.FAILED]
    if not failed:
        digests = tuple((b.arch, b.digest) for b in current if b.digest is not None)
        return Publish(record, current, digests)
    summary = "; ".join(f"{build.arch.value}: {describe_build(build)}" for build in failed)
    if any(build.reason is FailureReason.INCOMPATIBLE for build in failed):
        return _incompatible(record, current, summary, alternative_for(record, others), now, rules)
    transient = all(build.reason is not None and build.reason.transient for build in failed)
    if transient and failed_streak(record, builds) < rules.max_attempts:
        delay = retry_delay(record.attempts, base=rules.retry_base, cap=rules.retry_cap)
        retrying = replace(
            record,
            state=TargetState.RETRYING,
            next_attempt_at=now + delay,
            last_error=summary,
            updated_at=now,
        )
        event = build_event(
            EventKind.BUILD_RETRYING, retrying, now, current, rules.max_attempts, summary
        )
        return Change(
            retrying, Decision(Action.RETRYING, record.tag, f"in {delay}: {summary}"), event
        )
    why = "retries exhausted: " if transient else ""
    given_up = replace(
        record,
        state=TargetState.FAILED,
        next_attempt_at=None,
        last_error=why + summary,
        updated_at=now,
    )
    kind = EventKind.RETRIES_EXHAUSTED if transient else EventKind.BUILD_FAILED
    event = build_event(kind, given_up, now, current, rules.max_attempts, summary)
    return Change(given_up, Decision(Action.FAILED, record.tag, why + summary), event)


def alternative_for(record: TargetRecord, others: Iterable[TargetRecord]) -> TargetRecord | None:
    """The newest selected driver of another branch that DID build for ``record``'s kernel:
    a published target the plan requires, on the same kernel; ``None`` if there is none."""
    kernel, branch = record.target.kernel, record.target.driver_branch
    built = [
        other
        for other in others
        if other.state is TargetState.PUBLISHED
        and other.required
        and other.target.kernel == kernel
        and other.target.driver_branch != branch
    ]
    return max(built, key=lambda other: other.target.driver_version, default=None)


def _incompatible(
    record: TargetRecord,
    current: Sequence[BuildRecord],
    summary: str,
    alternative: TargetRecord | None,
    now: datetime,
    rules: LifecycleRules,
) -> Change:
    why = f"incompatible: {summary}"
    given_up = replace(
        record,
        state=TargetState.INCOMPATIBLE,
        next_attempt_at=None,
        last_error=why,
        updated_at=now,
    )
    event = build_event(
        EventKind.BUILD_INCOMPATIBLE,
        given_up,
        now,
        current,
        rules.max_attempts,
        summary,
        alternative=alternative,
    )
    instead = "" if alternative is None else f" (branch {alternative.target.driver_branch} builds)"
    return Change(given_up, Decision(Action.INCOMPATIBLE, record.tag, why + instead), event)


def published(
    publish: Publish,
    digest: str,
    *,
    now: datetime,
    rules: LifecycleRules,
    signature: Verification | None = None,
) -> Change:
    """The tag is published with ``digest`` (the image's, or the index's). ``signature``:
    what re-reading its attachments verified, when images are signed (the event names its
    key); one verified for another digest signs nothing, so the tag is ``unsigned``."""
    if signature is not None and signature.digest != digest:
        return unsigned(publish, f"verified {signature.digest} instead", now=now, rules=rules)
    record = mark_published(publish.record, digest, now)
    signed_by = None if signature is None else signature.fingerprint
    builds, most = publish.builds, rules.max_attempts
    event = build_event(EventKind.TAG_PUBLISHED, record, now, builds, most, signed_by=signed_by)
    detail = digest if signed_by is None else f"{digest}, signed by {signed_by}"
    # A publish restarts the retry budget (``failed_streak``): the next attempt's messages
    # count from here ("Attempt 4 of 6", never "4 of 3").
    record = replace(record, budget_start=record.attempts)
    return Change(record, Decision(Action.PUBLISHED, record.tag, detail), event)


def index_refused(publish: Publish, error: str, *, now: datetime, rules: LifecycleRules) -> Change:
    """The registry refused the index for good (e.g. a per-arch image gone): a human looks."""
    return _refused(publish, f"cannot publish the index: {error}", now, rules)


def unsigned(publish: Publish, error: str, *, now: datetime, rules: LifecycleRules) -> Change:
    """Signing failed for good (a broken key, a refused push, attachments that do not verify):
    the tag is neither published unsigned nor called signed; a human looks."""
    return _refused(publish, f"not signed, so not published: {error}", now, rules)


def _refused(publish: Publish, why: str, now: datetime, rules: LifecycleRules) -> Change:
    record = replace(publish.record, state=TargetState.FAILED, last_error=why, updated_at=now)
    event = build_event(
        EventKind.BUILD_FAILED, record, now, publish.builds, rules.max_attempts, why
    )
    return Change(record, Decision(Action.FAILED, record.tag, why), event)


def failed_streak(record: TargetRecord, builds: Iterable[BuildRecord]) -> int:
    """Attempts since the last one that published or the last a person asked for (the
    ``budget_start``): the retry budget counts these, so a forced rebuild, a vanished tag
    and a person's build or retry after the budget was spent start with a full budget."""
    by_attempt: dict[int, list[BuildRecord]] = {}
    for build in builds:
        by_attempt.setdefault(build.attempt, []).append(build)
    succeeded = [
        attempt
        for attempt, attempt_builds in by_attempt.items()
        if all(build.state is BuildState.SUCCEEDED for build in attempt_builds)
    ]
    return record.attempts - max(max(succeeded, default=0), record.budget_start)


# -- how a target stands, for people ---------------------------------------------------------


class NextStep(enum.StrEnum):
    """What happens to a target next (``releasebot plan --format json`` shows it)."""

    NONE = "none"
    """Published: nothing, until the tag vanishes or the plan changes its arches."""
    CHECK = "check"
    """Not yet checked against the registry."""
    BUILD = "build"
    """Due: the next cycle launches it (a free build slot and its inputs permitting)."""
    WAIT = "wait"
    """Retrying or waiting for its inputs: due at ``next_attempt_at``."""
    FOLLOW = "follow"
    """Building: the next cycle follows its Jobs."""
    HUMAN = "human"
    """Failed: a person builds or retries it (``/releasebot retry``)."""


def next_step(record: TargetRecord, now: datetime) -> NextStep:
    if is_due(record, now):
        return NextStep.BUILD
    return _NEXT[record.state]


_NEXT = {
    TargetState.UNKNOWN: NextStep.CHECK,
    TargetState.PUBLISHED: NextStep.NONE,
    TargetState.RETRYING: NextStep.WAIT,
    TargetState.WAITING: NextStep.WAIT,
    TargetState.BUILDING: NextStep.FOLLOW,
    TargetState.FAILED: NextStep.HUMAN,
    TargetState.REFUSED: NextStep.HUMAN,
    TargetState.INCOMPATIBLE: NextStep.HUMAN,
    TargetState.MISSING: NextStep.BUILD,
    TargetState.STALE: NextStep.BUILD,
}


def is_outstanding(record: TargetRecord) -> bool:
    """Whether the registry lacks the image the plan wants (or holds the wrong arches):
    what ``/releasebot missing`` lists and the alert metric counts."""
    return record.state is not TargetState.PUBLISHED
