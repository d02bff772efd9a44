"""Driver bases' pure decisions (``domain.targets.bases``), their Job and their one alert.

Covers: the base tag (a valid OCI tag, never an operator or per-arch tag, recognised by
retention, a new tag for a new recipe revision or base OS image); which bases due targets
need (one per driver and arch); what a base needs next; an attempt's start and its end
(retried with the targets' backoff while transient and within ``max_attempts``, else
failed with ONE event); a target waiting for its base, said once per reason; the
``DRIVER_BASE`` argument only from a published base; the base Job as Kaniko runs it
(``Dockerfile.base`` beside the configured Dockerfile, the contract's build args only);
retention keeping bases; the Slack message of a failed base.
"""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from releasebot.builders.kaniko import KanikoOptions, render_job
from releasebot.domain.fleet.retention import (
    BASE_KEPT,
    RetentionInputs,
    parse_own_tag,
    plan_retention,
)
from releasebot.domain.shared.versions import Arch, DriverVersion, is_oci_tag
from releasebot.domain.targets.base_tags import BASE_LABEL, BaseSpec, base_tag, parse_base_tag
from releasebot.domain.targets.bases import (
    BaseRecord,
    BaseRules,
    BaseState,
    BaseStep,
    base_failed,
    base_published,
    base_request,
    base_step,
    base_wait_reason,
    driver_base_arg,
    needed_bases,
    spec_for,
    start_base,
    wait_for_base,
    wrong_base_labels,
)
from releasebot.domain.targets.builds import FailureReason, failed_build
from releasebot.domain.targets.decisions import Action
from releasebot.domain.targets.events import EventKind
from releasebot.domain.targets.lifecycle import LifecycleRules
from releasebot.domain.targets.models import TargetRecord, TargetState
from releasebot.notify.render import render_message
from tests.support.targets import make_target
from tests.unit.test_render import check_blocks

NOW = datetime(2026, 12, 3, 8, 0, tzinfo=UTC)
DRIVER = DriverVersion.parse("580.178.04")
REVISION = "0123456789ab"
RULES = BaseRules(
    revision=REVISION,
    build_args=(
        ("RECIPE_REVISION", REVISION),
        ("NVIDIA_BASE_URL", "https://mirror.example/tesla"),
        ("FLATCAR_BASE_URL", "https://{channel}.mirror.example"),
        ("MODULE_TYPES", "both"),
    ),
)
LIFECYCLE = LifecycleRules(max_attempts=3)
SPEC = BaseSpec(DRIVER, "580", Arch.AMD64, REVISION)
REPOSITORY = "registry.example.test:5000/gpu/driver"


def record(
    flatcar: str = "4593.2.5", *arches: Arch, state: TargetState = TargetState.MISSING
) -> TargetRecord:
    target = make_target(flatcar=flatcar, arches=arches or (Arch.AMD64,))
    return replace(TargetRecord.new(target, now=NOW), state=state)


def running(attempt: int = 1) -> BaseRecord:
    return start_base(SPEC, None, base_request(SPEC, attempt, RULES), now=NOW)


# -- the tag ---------------------------------------------------------------------------------


def test_the_tag_names_driver_arch_revision_and_base_os() -> None:
    tag = base_tag(DRIVER, Arch.ARM64, REVISION, ())
    assert tag.startswith("580.178.04-base-arm64-r0123456789ab-")
    assert is_oci_tag(tag)
    assert parse_base_tag(tag) == (DRIVER, Arch.ARM64)


def test_a_base_tag_is_never_an_operator_tag_and_an_operator_tag_never_a_base() -> None:
    tag = base_tag(DRIVER, Arch.AMD64, REVISION, ())
    assert parse_own_tag(tag) is None  # retention never takes it for a Flatcar tag
    for operator in ("580.178.04-flatcar4593.2.5", "580.178.04-flatcar4593.2.5-amd64"):
        assert parse_base_tag(operator) is None
    assert parse_base_tag("sha256-" + "a" * 64 + ".sig") is None


def test_a_new_revision_or_base_os_image_is_another_base() -> None:
    first = base_tag(DRIVER, Arch.AMD64, REVISION, ())
    assert base_tag(DRIVER, Arch.AMD64, "ba9876543210", ()) != first
    pinned = (("RUNTIME_IMAGE", "debian:13.2-slim"),)
    assert base_tag(DRIVER, Arch.AMD64, REVISION, pinned) != first
    assert base_tag(DRIVER, Arch.AMD64, REVISION, ()) == first  # and the same is the same


@pytest.mark.parametrize("revision", ["refs/heads/main", "x" * 60, "-dash", "a b"])
def test_a_revision_that_cannot_be_in_a_tag_is_hashed_into_it(revision: str) -> None:
    tag = base_tag(DRIVER, Arch.AMD64, revision, ())
    assert is_oci_tag(tag)
    assert parse_base_tag(tag) == (DRIVER, Arch.AMD64)


# -- what the targets need, and what a base needs next ------------------------------------


def test_the_due_targets_of_one_driver_need_one_base_per_arch() -> None:
    both = (Arch.AMD64, Arch.ARM64)
    specs = needed_bases([record("4593.2.5", *both), record("4593.2.4", *both)], RULES)
    assert [(s.driver_version.text, s.arch) for s in specs] == [
        ("580.178.04", Arch.AMD64),
        ("580.178.04", Arch.ARM64),
    ]


@pytest.mark.parametrize(
    ("state", "present", "step"),
    [
        (None, False, BaseStep.LAUNCH),
        (BaseState.LAUNCHING, False, BaseStep.BUILDING),
        (BaseState.RUNNING, False, BaseStep.BUILDING),
        (BaseState.PUBLISHED, True, BaseStep.READY),
        (BaseState.PUBLISHED, False, BaseStep.LAUNCH),  # its tag vanished: built again
        (BaseState.FAILED, False, BaseStep.FAILED),
    ],
)
def test_what_a_base_needs_next(state: BaseState | None, present: bool, step: BaseStep) -> None:
    base = None if state is None else replace(running(), state=state)
    assert base_step(base, present=present, now=NOW) is step


def test_a_retrying_base_is_launched_once_its_backoff_is_over() -> None:
    base = replace(running(), state=BaseState.RETRYING, next_attempt_at=NOW + timedelta(minutes=5))
    assert base_step(base, present=False, now=NOW) is BaseStep.WAIT
    assert base_step(base, present=False, now=NOW + timedelta(minutes=5)) is BaseStep.LAUNCH


# -- an attempt: start and end ----------------------------------------------------------------


def test_an_attempt_is_recorded_launching_before_its_job_exists() -> None:
    base = running()
    assert (base.state, base.attempts) == (BaseState.LAUNCHING, 1)
    assert base.job_name is not None
    assert base.job_name.startswith("rb-580-178-04-base-amd64-")
    assert base.job_name.endswith("-amd64-1")


def fail(base: BaseRecord, reason: FailureReason, at: datetime = NOW) -> BaseRecord:
    return failed_build(base.build(), at, reason=reason, message="it broke")


def test_a_transient_failure_is_retried_with_backoff_then_fails_once() -> None:
    base = running()
    changes = []
    for attempt in range(1, 4):
        change = base_failed(base, fail(base, FailureReason.OOM_KILLED), now=NOW, rules=LIFECYCLE)
        changes.append(change)
        base = start_base(SPEC, change.record, base_request(SPEC, attempt + 1, RULES), now=NOW)
    states = [change.record.state for change in changes]
    assert states == [BaseState.RETRYING, BaseState.RETRYING, BaseState.FAILED]
    assert changes[0].record.next_attempt_at == NOW + LIFECYCLE.retry_base
    assert changes[1].record.next_attempt_at == NOW + 2 * LIFECYCLE.retry_base
    events = [change.event for change in changes if change.event is not None]
    assert [event.kind for event in events] == [EventKind.BASE_FAILED]  # one alert
    assert events[0].subject == SPEC.tag


def test_a_permanent_failure_fails_at_once_with_its_one_alert() -> None:
    base = running()
    change = base_failed(base, fail(base, FailureReason.EXIT_CODE), now=NOW, rules=LIFECYCLE)
    assert change.record.state is BaseState.FAILED
    assert change.decision.action is Action.FAILED
    assert change.event is not None
    assert change.event.payload["error"] == "NonZeroExit: it broke"


def test_a_persons_retry_starts_a_full_budget() -> None:
    base = running()
    failed = base_failed(base, fail(base, FailureReason.EXIT_CODE), now=NOW, rules=LIFECYCLE)
    again = start_base(SPEC, failed.record, base_request(SPEC, 2, RULES), now=NOW, by_hand=True)
    assert (again.state, again.attempts, again.budget_start, again.failures) == (
        BaseState.LAUNCHING,
        2,
        1,
        0,
    )


def test_a_published_base_gives_the_driver_base_argument_and_nothing_else_does() -> None:
    digest = "sha256:" + "c" * 64
    assert driver_base_arg(REPOSITORY, None) is None
    assert driver_base_arg(REPOSITORY, running()) is None
    published = base_published(running(), digest, now=NOW).record
    assert published.state is BaseState.PUBLISHED
    assert driver_base_arg(REPOSITORY, published) == ("DRIVER_BASE", f"{REPOSITORY}@{digest}")
    failed = replace(published, state=BaseState.FAILED)
    assert driver_base_arg(REPOSITORY, failed) is None


def test_the_labels_must_name_the_base() -> None:
    labels = {BASE_LABEL: "580.178.04/amd64", "releasebot.recipe-revision": REVISION}
    assert wrong_base_labels(SPEC, labels) is None
    wrong = wrong_base_labels(SPEC, {**labels, BASE_LABEL: "580.178.04/arm64"})
    assert wrong is not None
    assert "580.178.04/amd64" in wrong


# -- the targets that wait ------------------------------------------------------------------


def test_a_target_waits_for_its_base_and_says_which_once() -> None:
    target = record()
    spec = spec_for(target.target, Arch.AMD64, RULES)
    why = base_wait_reason(spec, running())
    assert why.startswith(f"waiting for driver base {spec.tag} (building, Job rb-")
    change = wait_for_base(target, why, now=NOW)
    assert change is not None
    assert (change.record.state, change.record.last_error) == (TargetState.WAITING, why)
    assert change.record.next_attempt_at is None  # due again as soon as the base is there
    assert wait_for_base(change.record, why, now=NOW) is None  # said once
    failed = base_wait_reason(spec, replace(running(), state=BaseState.FAILED, last_error="x"))
    assert wait_for_base(change.record, failed, now=NOW) is not None


# -- the Job ---------------------------------------------------------------------------------


def test_the_base_job_builds_dockerfile_base_with_the_contracts_args() -> None:
    options = KanikoOptions(
        namespace="gpu-builds",
        registry_repository=REPOSITORY,
        registry_secret="registry-push",
        context="git://git.example.test/r.git#refs/heads/main#" + "0" * 40,
        context_sub_path="driver",
        dockerfile="flatcar/Dockerfile",
    )
    pinned = replace(RULES, os_images=(("RUNTIME_IMAGE", "debian:13.2-slim"),))
    spec = replace(SPEC, os_images=pinned.os_images)
    job = render_job(base_request(spec, 1, pinned), options)
    args = job["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--dockerfile=flatcar/Dockerfile.base" in args
    assert f"--destination={REPOSITORY}:{spec.tag}" in args
    build_args = sorted(
        a.removeprefix("--build-arg=") for a in args if a.startswith("--build-arg=")
    )
    assert build_args == [
        "DRIVER_BRANCH=580",
        "DRIVER_VERSION=580.178.04",
        "NVIDIA_BASE_URL=https://mirror.example/tesla",
        f"RECIPE_REVISION={REVISION}",
        "RUNTIME_IMAGE=debian:13.2-slim",
        "TARGETARCH=amd64",
    ]  # no Flatcar input, no kernel: nothing of a release
    assert f"--label={BASE_LABEL}=580.178.04/amd64" in args
    assert job["metadata"]["annotations"]["releasebot/tag"] == spec.tag
    assert job["spec"]["template"]["spec"]["nodeSelector"]["kubernetes.io/arch"] == "amd64"


# -- retention and the alert ------------------------------------------------------------------


def test_retention_keeps_a_base_and_does_not_count_it_foreign() -> None:
    inputs = RetentionInputs(tags=[SPEC.tag, "latest"], nodes=[], listings=[], targets=[])
    plan = plan_retention(inputs, now=NOW)
    assert [(kept.tag, kept.reason) for kept in plan.keep] == [(SPEC.tag, BASE_KEPT)]
    assert plan.delete == ()
    assert plan.foreign == 1  # "latest" only
    held = plan_retention(replace(inputs, nodes=None, fleet_problem="down"), now=NOW)
    assert [kept.tag for kept in held.keep] == [SPEC.tag]


def test_a_failed_base_is_one_message_naming_the_base_and_what_to_do() -> None:
    base = running()
    change = base_failed(base, fail(base, FailureReason.EXIT_CODE), now=NOW, rules=LIFECYCLE)
    assert change.event is not None
    message = render_message([change.event], REPOSITORY)
    assert SPEC.tag in message.text
    assert "waits" in message.text
    shown = json.dumps(message.blocks)
    assert "/releasebot retry" in shown
    check_blocks(message.blocks)  # what Slack accepts
