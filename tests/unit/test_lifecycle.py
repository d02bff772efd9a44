"""The target's state machine (``domain.targets.lifecycle``), one test per arrow of the diagram in
``docs/architecture.md``, plus what the cycle and ``/releasebot plan`` both ask: which
targets are due, in which order, how many fit, and what a person may start.

Pure functions over records and facts: no store, no registry, no clock (time is passed).
"""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from releasebot.domain.shared.versions import Arch, DriverVersion
from releasebot.domain.targets.attestation import Verification
from releasebot.domain.targets.builds import (
    BuildRecord,
    BuildState,
    FailureReason,
    build_request,
    retry_delay,
)
from releasebot.domain.targets.decisions import Action, Decision
from releasebot.domain.targets.diff import diff_targets
from releasebot.domain.targets.events import EventKind
from releasebot.domain.targets.lifecycle import (
    Change,
    LifecycleRules,
    NextStep,
    Publish,
    check_inputs,
    check_registry,
    failed_streak,
    hand_refusal,
    has_room,
    index_refused,
    is_due,
    is_outstanding,
    launch_order,
    launch_plan,
    may_come_due,
    next_step,
    published,
    settle,
    start_attempt,
    unsigned,
)
from releasebot.domain.targets.models import TargetReason, TargetRecord, TargetState
from releasebot.domain.targets.readiness import Readiness
from tests.support.targets import make_target

T0 = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
RULES = LifecycleRules(max_concurrent_builds=2, max_attempts=3)
BOTH = (Arch.AMD64, Arch.ARM64)
DIGEST = "sha256:" + "a" * 64
ARM_DIGEST = "sha256:" + "b" * 64


def record(state: TargetState = TargetState.MISSING, **changes: object) -> TargetRecord:
    flatcar = str(changes.pop("flatcar", "4593.2.5"))
    arches = changes.pop("arches", (Arch.AMD64,))
    target = make_target(flatcar=flatcar, arches=arches)  # type: ignore[arg-type]
    return replace(TargetRecord.new(target, now=T0), state=state, **changes)  # type: ignore[arg-type]


def builds_of(target: TargetRecord, *states: BuildState, attempt: int = 1) -> list[BuildRecord]:
    """One build per arch of ``target`` for ``attempt``, in ``states`` (one per arch)."""
    result = []
    for arch, state in zip(target.target.arches, states, strict=True):
        request = build_request(target.target, arch, attempt)
        result.append(
            BuildRecord(
                tag=target.tag,
                arch=arch,
                attempt=attempt,
                job_name=request.job_name,
                destination_tag=request.destination_tag,
                state=state,
                created_at=T0,
                digest=DIGEST if arch is Arch.AMD64 else ARM_DIGEST,
            )
        )
    return result


def dv(text: str) -> DriverVersion:
    return DriverVersion.parse(text)


def failed(build: BuildRecord, reason: FailureReason) -> BuildRecord:
    return replace(build, state=BuildState.FAILED, reason=reason, digest=None, message="boom")


# -- (new) -> unknown ----------------------------------------------------------------------


def test_plan_new_target_is_unknown() -> None:
    [new] = diff_targets({}, [make_target()], T0).inserts
    assert (new.state, new.required, new.attempts) == (TargetState.UNKNOWN, True, 0)


# -- the registry: unknown/missing/waiting -> published; unknown/published/stale -> missing


@pytest.mark.parametrize("state", [TargetState.UNKNOWN, TargetState.MISSING, TargetState.WAITING])
def test_registry_has_tag_publishes_an_unjudged_target(state: TargetState) -> None:
    change = check_registry(record(state, next_attempt_at=T0, last_error="x"), present=True, now=T0)
    assert change is not None
    assert change.record.state is TargetState.PUBLISHED
    assert (change.record.published_at, change.record.next_attempt_at) == (T0, None)
    assert change.record.last_error is None
    assert change.decision == Decision(Action.PUBLISHED, change.record.tag, "found in the registry")


def test_tag_absent_makes_an_unknown_target_missing_silently() -> None:
    change = check_registry(record(TargetState.UNKNOWN), present=False, now=T0)
    assert change == Change(record(TargetState.MISSING))


def test_tag_vanished_makes_a_published_target_missing_and_says_so() -> None:
    later = T0 + timedelta(hours=1)
    change = check_registry(record(TargetState.PUBLISHED), present=False, now=later)
    assert change is not None
    assert (change.record.state, change.record.updated_at) == (TargetState.MISSING, later)
    assert change.decision is not None
    assert change.decision.action is Action.MISSING


def test_a_stale_target_missing_its_tag_is_missing_and_with_it_stays_stale() -> None:
    assert check_registry(record(TargetState.STALE), present=False, now=T0) == Change(
        record(TargetState.MISSING)
    )
    assert check_registry(record(TargetState.STALE), present=True, now=T0) is None


@pytest.mark.parametrize("state", [TargetState.BUILDING, TargetState.RETRYING, TargetState.FAILED])
def test_a_judged_target_is_not_published_by_presence(state: TargetState) -> None:
    # After a failed verification the tag may hold the wrong image.
    assert check_registry(record(state), present=True, now=T0) is None
    assert check_registry(record(state), present=False, now=T0) is None


# -- published -> stale (the plan changed the arches) --------------------------------------


def test_changed_arches_make_a_published_tag_stale() -> None:
    old = record(TargetState.PUBLISHED, digest=DIGEST)
    new = record(TargetState.UNKNOWN, arches=BOTH)
    assert old.replanned(new, T0).state is TargetState.STALE
    assert record(TargetState.FAILED).replanned(new, T0).state is TargetState.FAILED


# -- due ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("state", "next_at", "due"),
    [
        (TargetState.MISSING, None, True),
        (TargetState.STALE, None, True),
        (TargetState.RETRYING, T0, True),
        (TargetState.RETRYING, None, True),
        (TargetState.RETRYING, T0 + timedelta(seconds=1), False),
        (TargetState.WAITING, T0 - timedelta(minutes=1), True),
        (TargetState.WAITING, T0 + timedelta(minutes=1), False),
        (TargetState.UNKNOWN, None, False),
        (TargetState.BUILDING, None, False),
        (TargetState.PUBLISHED, None, False),
        (TargetState.FAILED, None, False),
    ],
)
def test_which_targets_are_due(state: TargetState, next_at: datetime | None, due: bool) -> None:
    target = record(state, next_attempt_at=next_at)
    assert is_due(target, T0) is due
    assert (next_step(target, T0) is NextStep.BUILD) is due


# -- missing -> waiting -> failed (the inputs) -------------------------------------------------


def test_inputs_not_published_make_a_due_target_wait() -> None:
    answers = [Readiness(missing=("https://x/container.tar.gz", "https://x/vmlinuz"))]
    change = check_inputs(record(TargetState.MISSING), answers, now=T0, rules=RULES)
    assert change is not None
    assert change.record.state is TargetState.WAITING
    assert change.record.next_attempt_at == T0 + RULES.waiting_recheck
    assert change.record.last_error == "waiting for 2 input(s), first: https://x/container.tar.gz"
    assert change.decision is not None
    assert change.decision.action is Action.WAITING
    assert change.event is None
    again = check_inputs(change.record, answers, now=T0 + timedelta(hours=1), rules=RULES)
    assert again is not None
    assert again.decision is None  # still waiting: said once


def test_published_inputs_let_it_start() -> None:
    ready = [Readiness(build_args=(("GCC_MAJOR", "14"),))]
    assert check_inputs(record(TargetState.WAITING), ready, now=T0, rules=RULES) is None


def test_a_runfile_missing_past_the_grace_fails_for_good() -> None:
    answers = [Readiness(missing=("https://nvidia/x.run",), runfile_missing=True)]
    early = check_inputs(record(TargetState.WAITING), answers, now=T0, rules=RULES)
    assert early is not None
    assert early.record.state is TargetState.WAITING
    late = T0 + RULES.runfile_grace
    change = check_inputs(record(TargetState.WAITING), answers, now=late, rules=RULES)
    assert change is not None
    assert change.record.state is TargetState.FAILED
    assert "runfile still missing" in (change.record.last_error or "")
    assert change.event is not None
    assert change.event.kind is EventKind.BUILD_FAILED


# -- missing/stale/retrying/waiting -> building (launch, a slot free) ------------------------


def test_launch_starts_the_next_attempt_one_build_per_arch() -> None:
    target = record(TargetState.RETRYING, attempts=1, arches=BOTH, next_attempt_at=T0)
    requests = [build_request(target.target, arch, 2) for arch in BOTH]
    attempt = start_attempt(target, requests, reused={Arch.ARM64: ARM_DIGEST}, now=T0, rules=RULES)
    assert (attempt.record.state, attempt.record.attempts) == (TargetState.BUILDING, 2)
    assert attempt.record.next_attempt_at is None
    amd, arm = attempt.builds
    assert (amd.state, amd.attempt, amd.job_name) == (BuildState.LAUNCHING, 2, requests[0].job_name)
    assert (arm.state, arm.digest, arm.finished_at) == (BuildState.SUCCEEDED, ARM_DIGEST, T0)
    assert attempt.event.kind is EventKind.BUILD_STARTED
    assert attempt.event.message_key == f"{target.tag}#2"
    assert attempt.event.payload["jobs"] == [r.job_name for r in requests]


def test_launch_order_is_the_plan_order_of_the_due() -> None:
    targets = [
        record(TargetState.PUBLISHED, flatcar="4593.2.9"),
        record(TargetState.MISSING, flatcar="4593.2.8"),
        record(TargetState.RETRYING, flatcar="4593.2.7", next_attempt_at=T0 + timedelta(days=1)),
        record(TargetState.STALE, flatcar="4593.2.6"),
        record(TargetState.WAITING, flatcar="4593.2.5", next_attempt_at=T0),
    ]
    assert [r.target.flatcar_version.text for r in launch_order(targets, T0)] == [
        "4593.2.8",
        "4593.2.6",
        "4593.2.5",
    ]


def test_the_reboot_gate_first_then_pending_reboots_then_the_plan_order() -> None:
    def due(flatcar: str, *reasons: TargetReason) -> TargetRecord:
        plain = record(flatcar=flatcar)
        target = replace(plain.target, reasons=frozenset(reasons))
        return replace(plain, target=target)

    targets = [
        due("4593.2.9", TargetReason.CHANNEL),
        due("4593.2.8", TargetReason.PENDING_REBOOT),
        due("4593.2.7", TargetReason.FLEET),
        due("4593.2.6", TargetReason.PENDING_REBOOT, TargetReason.CHANNEL),
    ]
    held = {targets[3].tag}  # a node waits at the reboot gate for this one
    order = [r.target.flatcar_version.text for r in launch_order(targets, T0, urgent=held)]
    assert order == ["4593.2.6", "4593.2.8", "4593.2.9", "4593.2.7"]
    plan = launch_plan(targets, running=0, now=T0, rules=RULES, urgent=held)
    assert [r.target.flatcar_version.text for r in plan.launch] == ["4593.2.6", "4593.2.8"]


def test_room_for_a_target_and_the_strict_order_of_the_rest() -> None:
    big = record(flatcar="4593.2.9", arches=BOTH)
    small = record(flatcar="4593.2.8")
    assert has_room(big, 0, replace(RULES, max_concurrent_builds=1))  # nothing runs: it starts
    assert not has_room(big, 1, RULES)
    assert has_room(small, 1, RULES)
    plan = launch_plan([big, small, record(flatcar="4593.2.7")], running=1, now=T0, rules=RULES)
    # The big one does not fit beside the running build; the small ones must not overtake it.
    assert plan.launch == ()
    assert [r.target.flatcar_version.text for r in plan.deferred] == [
        "4593.2.9",
        "4593.2.8",
        "4593.2.7",
    ]
    plan = launch_plan([small, big, record(flatcar="4593.2.7")], running=0, now=T0, rules=RULES)
    assert [r.tag for r in plan.launch] == [small.tag]
    assert len(plan.deferred) == 2


# -- building -> published / retrying / failed (the attempt is over) -------------------------


def test_an_attempt_with_an_active_build_is_not_over() -> None:
    target = record(TargetState.BUILDING, attempts=1, arches=BOTH)
    running = builds_of(target, BuildState.SUCCEEDED, BuildState.RUNNING)
    assert settle(target, running, now=T0, rules=RULES) is None
    assert settle(target, [], now=T0, rules=RULES) is None


def test_every_arch_verified_publishes_the_tag() -> None:
    target = record(TargetState.BUILDING, attempts=1, last_error="old")
    outcome = settle(target, builds_of(target, BuildState.SUCCEEDED), now=T0, rules=RULES)
    assert isinstance(outcome, Publish)
    assert not outcome.needs_index
    change = published(outcome, DIGEST, now=T0, rules=RULES)
    assert (change.record.state, change.record.digest) == (TargetState.PUBLISHED, DIGEST)
    assert change.record.last_error is None
    assert change.event is not None
    assert change.event.kind is EventKind.TAG_PUBLISHED
    assert change.decision == Decision(Action.PUBLISHED, target.tag, DIGEST)


def test_after_a_publish_the_messages_count_the_new_budget() -> None:
    target = record(TargetState.BUILDING, attempts=3)
    outcome = settle(
        target, builds_of(target, BuildState.SUCCEEDED, attempt=3), now=T0, rules=RULES
    )
    assert isinstance(outcome, Publish)
    change = published(outcome, DIGEST, now=T0, rules=RULES)
    assert change.event is not None
    assert change.event.payload["max_attempts"] == RULES.max_attempts  # "3 of 3" as it was
    vanished = replace(change.record, state=TargetState.MISSING)
    again = start_attempt(
        vanished, [build_request(target.target, Arch.AMD64, 4)], reused={}, now=T0, rules=RULES
    )
    assert again.record.attempts == 4
    assert again.event.payload["max_attempts"] == 3 + RULES.max_attempts  # "4 of 6"


def test_a_multi_arch_attempt_needs_an_index_and_a_refused_index_is_a_failure() -> None:
    target = record(TargetState.BUILDING, attempts=1, arches=BOTH)
    done = builds_of(target, BuildState.SUCCEEDED, BuildState.SUCCEEDED)
    outcome = settle(target, done, now=T0, rules=RULES)
    assert isinstance(outcome, Publish)
    assert outcome.needs_index
    assert outcome.digests == ((Arch.AMD64, DIGEST), (Arch.ARM64, ARM_DIGEST))
    change = index_refused(outcome, "manifest unknown", now=T0, rules=RULES)
    assert change.record.state is TargetState.FAILED
    assert change.record.last_error == "cannot publish the index: manifest unknown"
    assert change.event is not None
    assert change.event.kind is EventKind.BUILD_FAILED
    assert change.event.payload["arch_digests"] == [f"amd64 {DIGEST}", f"arm64 {ARM_DIGEST}"]


def signed(digest: str) -> Verification:
    return Verification(digest, "sha256:" + "f" * 64, (digest,), 6, 4)


def test_a_verified_signature_publishes_the_tag_and_names_the_key() -> None:
    target = record(TargetState.BUILDING, attempts=1)
    outcome = settle(target, builds_of(target, BuildState.SUCCEEDED), now=T0, rules=RULES)
    assert isinstance(outcome, Publish)
    change = published(outcome, DIGEST, now=T0, rules=RULES, signature=signed(DIGEST))
    assert change.record.state is TargetState.PUBLISHED
    assert change.event is not None
    assert change.event.kind is EventKind.TAG_PUBLISHED
    assert change.event.payload["signed_by"] == "sha256:" + "f" * 64
    plain = published(outcome, DIGEST, now=T0, rules=RULES)
    assert plain.event is not None
    assert plain.event.payload["signed_by"] is None


def test_signing_refused_or_verified_for_another_digest_is_a_failure_never_published() -> None:
    target = record(TargetState.BUILDING, attempts=1)
    outcome = settle(target, builds_of(target, BuildState.SUCCEEDED), now=T0, rules=RULES)
    assert isinstance(outcome, Publish)
    refused = unsigned(outcome, "signing key k: not a PEM file", now=T0, rules=RULES)
    other = published(outcome, DIGEST, now=T0, rules=RULES, signature=signed(ARM_DIGEST))
    for change in (refused, other):
        assert change.record.state is TargetState.FAILED
        assert change.record.digest is None
        assert change.record.last_error is not None
        assert change.record.last_error.startswith("not signed, so not published: ")
        assert change.event is not None
        assert change.event.kind is EventKind.BUILD_FAILED
        assert change.event.payload["signed_by"] is None
        assert change.decision is not None
        assert change.decision.action is Action.FAILED
    assert (
        refused.record.last_error == "not signed, so not published: signing key k: not a PEM file"
    )
    assert other.record.last_error is not None
    assert ARM_DIGEST in other.record.last_error


def test_a_transient_failure_with_budget_left_retries_after_a_backoff() -> None:
    target = record(TargetState.BUILDING, attempts=1)
    [build] = builds_of(target, BuildState.RUNNING)
    change = settle(target, [failed(build, FailureReason.OOM_KILLED)], now=T0, rules=RULES)
    assert isinstance(change, Change)
    delay = retry_delay(1, base=RULES.retry_base, cap=RULES.retry_cap)
    assert change.record.state is TargetState.RETRYING
    assert change.record.next_attempt_at == T0 + delay
    assert change.record.last_error == "amd64: OOMKilled: boom"
    assert change.event is not None
    assert change.event.kind is EventKind.BUILD_RETRYING
    assert change.event.payload["reasons"] == ["OOMKilled"]
    assert change.decision is not None
    assert change.decision.action is Action.RETRYING


def test_a_permanent_failure_waits_for_a_human() -> None:
    target = record(TargetState.BUILDING, attempts=1, arches=BOTH)
    amd, arm = builds_of(target, BuildState.SUCCEEDED, BuildState.RUNNING)
    change = settle(target, [amd, failed(arm, FailureReason.EXIT_CODE)], now=T0, rules=RULES)
    assert isinstance(change, Change)
    assert (change.record.state, change.record.next_attempt_at) == (TargetState.FAILED, None)
    assert change.record.last_error == "arm64: NonZeroExit: boom"
    assert change.event is not None
    assert change.event.kind is EventKind.BUILD_FAILED


def test_a_spent_budget_ends_in_retries_exhausted() -> None:
    target = record(TargetState.BUILDING, attempts=3)
    history = [
        failed(b, FailureReason.EVICTED)
        for attempt in (1, 2, 3)
        for b in builds_of(target, BuildState.RUNNING, attempt=attempt)
    ]
    change = settle(target, history, now=T0, rules=RULES)
    assert isinstance(change, Change)
    assert change.record.state is TargetState.FAILED
    assert (change.record.last_error or "").startswith("retries exhausted: ")
    assert change.event is not None
    assert change.event.kind is EventKind.RETRIES_EXHAUSTED


def test_the_budget_counts_attempts_since_the_last_publish() -> None:
    target = record(TargetState.BUILDING, attempts=4)
    history = [
        *builds_of(target, BuildState.SUCCEEDED, attempt=2),
        *(
            failed(b, FailureReason.EVICTED)
            for attempt in (1, 3, 4)
            for b in builds_of(target, BuildState.RUNNING, attempt=attempt)
        ),
    ]
    assert failed_streak(target, history) == 2
    change = settle(target, history, now=T0, rules=RULES)
    assert isinstance(change, Change)
    assert change.record.state is TargetState.RETRYING


def test_a_driver_that_does_not_compile_is_incompatible_told_once_never_retried() -> None:
    target = record(TargetState.BUILDING, attempts=1)
    [build] = builds_of(target, BuildState.RUNNING)
    history = [failed(build, FailureReason.INCOMPATIBLE)]
    kernel = target.target.kernel
    older = record(TargetState.PUBLISHED, flatcar="4593.2.5")
    other = [
        replace(
            older,
            target=replace(
                older.target,
                tag=f"{version}-x",
                driver_version=dv(version),
                driver_branch=version.split(".")[0],
            ),
        )
        for version in ("570.195.03", "575.64.05")
    ]
    elsewhere = replace(other[1], target=replace(other[1].target, kernel="6.12.54"))
    dropped = replace(
        other[0],
        required=False,
        target=replace(
            other[0].target, tag="x-dropped", driver_version=dv("579.1.1"), driver_branch="579"
        ),
    )
    change = settle(
        target, history, now=T0, rules=RULES, others=[other[0], elsewhere, dropped, target]
    )
    assert isinstance(change, Change)
    assert change.record.state is TargetState.INCOMPATIBLE
    assert change.record.next_attempt_at is None
    assert (change.record.last_error or "").startswith("incompatible: amd64: Incompatible")
    assert change.decision is not None
    assert change.decision.action is Action.INCOMPATIBLE
    assert change.event is not None
    assert change.event.kind is EventKind.BUILD_INCOMPATIBLE
    # The newest selected (required) branch published for the SAME kernel: 570, not 575.
    assert other[0].target.kernel == kernel
    assert change.event.payload["alternative_branch"] == "570"
    assert change.event.payload["alternative_tag"] == "570.195.03-x"
    assert not is_due(change.record, T0 + timedelta(days=30))  # never retried by itself
    assert next_step(change.record, T0) is NextStep.HUMAN
    nothing = settle(target, history, now=T0, rules=RULES)
    assert isinstance(nothing, Change)
    assert nothing.event is not None
    assert nothing.event.payload["alternative_branch"] is None
    # A person may still ask (a fixed recipe or driver): it gets a full budget.
    assert hand_refusal(change.record, active=[], published=False, force=False) is None


# -- failed -> building: a person asks ---------------------------------------------------------


def test_a_person_may_start_a_failed_target_but_not_a_busy_or_published_one() -> None:
    target = record(TargetState.FAILED)
    assert hand_refusal(target, active=[], published=False, force=False) is None
    [running] = builds_of(target, BuildState.RUNNING)
    busy = hand_refusal(target, active=[running], published=False, force=True)
    assert busy == f"{target.tag} is already building ({running.job_name})"
    refused = hand_refusal(target, active=[], published=True, force=False)
    assert refused is not None
    assert "add --force" in refused
    assert hand_refusal(target, active=[], published=True, force=True) is None


def test_a_person_s_retry_after_a_spent_budget_gets_the_full_budget_again() -> None:
    spent = record(TargetState.FAILED, attempts=3)
    evicted = [
        failed(b, FailureReason.EVICTED)
        for attempt in (1, 2, 3)
        for b in builds_of(spent, BuildState.RUNNING, attempt=attempt)
    ]
    requests = [build_request(spent.target, Arch.AMD64, 4)]
    by_hand = start_attempt(spent, requests, reused={}, now=T0, rules=RULES, by_hand=True)
    assert (by_hand.record.attempts, by_hand.record.budget_start) == (4, 3)
    assert by_hand.event.payload["max_attempts"] == 6  # attempts 4, 5 and 6 are its budget
    history = [*evicted, *(failed(b, FailureReason.EVICTED) for b in by_hand.builds)]
    assert failed_streak(by_hand.record, history) == 1
    change = settle(by_hand.record, history, now=T0, rules=RULES)
    assert isinstance(change, Change)
    assert change.record.state is TargetState.RETRYING  # not "retries exhausted" at once
    # The automatic retries keep the budget the person started; the third attempt ends it.
    for attempt in (5, 6):
        again = start_attempt(
            replace(change.record, state=TargetState.RETRYING),
            [build_request(spent.target, Arch.AMD64, attempt)],
            reused={},
            now=T0,
            rules=RULES,
        )
        assert again.record.budget_start == 3
        history += [failed(b, FailureReason.EVICTED) for b in again.builds]
        change = settle(again.record, history, now=T0, rules=RULES)
        assert isinstance(change, Change)
    assert change.record.state is TargetState.FAILED
    assert change.event is not None
    assert change.event.kind is EventKind.RETRIES_EXHAUSTED
    # Without the person, the same failure after a spent budget is exhausted at once.
    automatic = start_attempt(spent, requests, reused={}, now=T0, rules=RULES)
    assert automatic.record.budget_start == 0
    history = [*evicted, *(failed(b, FailureReason.EVICTED) for b in automatic.builds)]
    exhausted = settle(automatic.record, history, now=T0, rules=RULES)
    assert isinstance(exhausted, Change)
    assert exhausted.record.state is TargetState.FAILED


# -- how a target stands ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("state", "step"),
    [
        (TargetState.UNKNOWN, NextStep.CHECK),
        (TargetState.PUBLISHED, NextStep.NONE),
        (TargetState.BUILDING, NextStep.FOLLOW),
        (TargetState.FAILED, NextStep.HUMAN),
        (TargetState.RETRYING, NextStep.WAIT),
        (TargetState.WAITING, NextStep.WAIT),
    ],
)
def test_the_next_step_of_each_state(state: TargetState, step: NextStep) -> None:
    later = T0 + timedelta(hours=1)
    assert next_step(record(state, next_attempt_at=later), T0) is step
    assert is_outstanding(record(state)) is (state is not TargetState.PUBLISHED)


def test_decisions_are_typed_and_know_what_starts_or_ends_a_build() -> None:
    assert Decision("launched", "t").action is Action.LAUNCHED  # type: ignore[arg-type]
    assert {a for a in Action if a.starts_build} == {Action.LAUNCHED, Action.ADOPTED}
    assert {a for a in Action if a.ends_build} == {
        Action.BUILD_SUCCEEDED,
        Action.BUILD_FAILED,
        Action.REJECTED,
    }
    with pytest.raises(ValueError, match="is not a valid Action"):
        Decision("exploded", "t")  # type: ignore[arg-type]


@pytest.mark.parametrize("state", list(TargetState))
def test_only_a_target_that_may_come_due_is_ever_due(state: TargetState) -> None:
    """The cycle hands ``launch_order`` only what ``may_come_due``: nothing else is due,
    at any time."""
    now_or_never = record(state, next_attempt_at=None)
    later = record(state, next_attempt_at=T0 + timedelta(days=1))
    due_at_some_time = any(
        is_due(r, now) for r in (now_or_never, later) for now in (T0, T0 + timedelta(days=2))
    )
    assert may_come_due(now_or_never) is due_at_some_time
    assert may_come_due(later) is due_at_some_time
