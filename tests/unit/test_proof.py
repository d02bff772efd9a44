"""``decide_proof``: when a node back from FLUO's reboot has proven its driver image.

Proven once the verified digest runs (in every ``imageID`` form a kubelet writes), driver
and validator pods are Ready and the GPUs are back, held for the soak; refused at once on
a crash loop, a failed init container or ``upgrade-failed``, and past the deadline; not
judged when releasebot did not build what the node runs; held on every doubt (pods that
cannot be read, several driver pods, a local image ID, another digest, a node NFD has not
relabelled), never released. A second reboot starts the proof again; a node without GPU
labels is proven at once. Pods are shaped like the GPU Operator's (``operatorpods``).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from releasebot.domain.fleet.nodes import FleetNode, parse_node
from releasebot.domain.fleet.proof import (
    Expected,
    OperatorPod,
    ProofRecord,
    ProofRules,
    ProofState,
    Verdict,
    arm,
    decide_proof,
    image_digest,
    parse_pod,
)
from releasebot.domain.shared.versions import FlatcarVersion
from tests.support.fleetnodes import gpu_node
from tests.support.operatorpods import digest_of, driver_pod, plugin_pod, validator_pod

T0 = datetime(2026, 12, 2, 10, 0, tzinfo=UTC)
TAG = "595.91.07-flatcar4593.2.5"
IMAGE = f"registry.example.com/gpu/driver:{TAG}"
DIGEST = digest_of(TAG)
EXPECTED = Expected(TAG, frozenset({DIGEST}), published=True)
RULES = ProofRules()


def node(**options: Any) -> FleetNode:
    options.setdefault("after_reboot", True)
    parsed = parse_node(gpu_node("gpu-0", "4593.2.5", **options))
    assert isinstance(parsed, FleetNode)
    return parsed


def armed(gpus: int | None = 8, boot_id: str = "boot-0") -> ProofRecord:
    before = parse_node(
        gpu_node(
            "gpu-0", "4593.2.4", pending="4593.2.5", before_reboot=True, gpus=gpus, boot_id=boot_id
        )
    )
    assert isinstance(before, FleetNode)
    return arm(before, None, EXPECTED, T0 - timedelta(minutes=5))


def pods(*raw: dict[str, Any]) -> tuple[OperatorPod, ...]:
    parsed = [parse_pod(item) for item in raw]
    return tuple(pod for pod in parsed if pod is not None)


HEALTHY = pods(driver_pod("gpu-0", image=IMAGE, digest=DIGEST), validator_pod("gpu-0"))


def test_arming_notes_the_gpus_and_boot_before_the_reboot() -> None:
    record = armed(gpus=8)
    assert (record.state, record.gpus_before, record.boot_id) == (ProofState.ARMED, 8, "boot-0")
    assert record.version == FlatcarVersion.parse("4593.2.5")
    assert record.tag == TAG
    fewer = parse_node(gpu_node("gpu-0", "4593.2.4", pending="4593.2.5", gpus=6))
    assert isinstance(fewer, FleetNode)
    assert arm(fewer, record, EXPECTED, T0).gpus_before == 8  # the most it offered


def test_a_good_image_is_proven_after_the_soak() -> None:
    first = decide_proof(node(), armed(), HEALTHY, EXPECTED, rules=RULES, now=T0)
    assert (first.verdict, first.annotate) == (Verdict.WAIT, False)
    assert first.record.state is ProofState.PROVING
    assert first.record.healthy_since == T0
    assert "soaking" in first.why
    later = T0 + RULES.soak
    done = decide_proof(node(), first.record, HEALTHY, EXPECTED, rules=RULES, now=later)
    assert (done.verdict, done.annotate, done.newly) == (Verdict.PROVEN, True, True)
    assert done.record.state is ProofState.PROVEN
    again = decide_proof(node(proof="true"), done.record, (), EXPECTED, rules=RULES, now=later)
    assert (again.verdict, again.annotate, again.newly) == (Verdict.PROVEN, False, False)


def test_a_break_during_the_soak_starts_it_again() -> None:
    first = decide_proof(node(), armed(), HEALTHY, EXPECTED, rules=RULES, now=T0)
    starting = pods(
        driver_pod("gpu-0", image=IMAGE, digest=DIGEST, state="starting"), validator_pod("gpu-0")
    )
    broke = decide_proof(node(), first.record, starting, EXPECTED, rules=RULES, now=T0 + RULES.soak)
    assert broke.verdict is Verdict.WAIT
    assert broke.record.healthy_since is None
    assert "not Ready" in broke.why


@pytest.mark.parametrize("form", ["docker-pullable", "repo", "mirror"])
def test_every_image_id_form_with_the_digest_counts(form: Any) -> None:
    running = pods(
        driver_pod("gpu-0", image=IMAGE, digest=DIGEST, image_id_form=form), validator_pod("gpu-0")
    )
    first = decide_proof(node(), armed(), running, EXPECTED, rules=RULES, now=T0)
    assert first.record.healthy_since == T0


@pytest.mark.parametrize(
    ("state", "words", "previous"),
    [
        ("crashloop", "CrashLoopBackOff", True),
        ("init-error", "init container k8s-driver-manager failed (exit 1)", False),
    ],
)
def test_a_broken_driver_is_refused_at_once_and_blames_the_image(
    state: Any, words: str, previous: bool
) -> None:
    broken = pods(driver_pod("gpu-0", image=IMAGE, digest=DIGEST, state=state))
    decision = decide_proof(node(), armed(), broken, EXPECTED, rules=RULES, now=T0)
    assert (decision.verdict, decision.annotate, decision.newly) == (Verdict.REFUSED, False, True)
    assert decision.refusal is not None
    assert decision.refusal.image is True
    assert decision.refusal.tag == TAG
    assert decision.refusal.previous is previous
    assert (decision.refusal.pod or "").startswith("gpu-operator/nvidia-driver-daemonset-")
    assert decision.refusal.container == "nvidia-driver-ctr"
    assert words in decision.why
    stays = decide_proof(node(), decision.record, HEALTHY, EXPECTED, rules=RULES, now=T0)
    assert (stays.verdict, stays.annotate, stays.newly) == (Verdict.REFUSED, False, False)


def test_upgrade_failed_is_a_refusal() -> None:
    decision = decide_proof(
        node(upgrade_state="upgrade-failed"), armed(), HEALTHY, EXPECTED, rules=RULES, now=T0
    )
    assert decision.verdict is Verdict.REFUSED
    assert "upgrade-failed" in decision.why


def test_no_proof_within_the_deadline_is_a_refusal_naming_what_was_missing() -> None:
    waiting = pods(
        driver_pod("gpu-0", image=IMAGE, digest=DIGEST), validator_pod("gpu-0", ready=False)
    )
    first = decide_proof(node(), armed(), waiting, EXPECTED, rules=RULES, now=T0)
    assert first.verdict is Verdict.WAIT
    assert "validator" in first.why
    before = T0 + RULES.deadline - timedelta(seconds=1)
    assert decide_proof(
        node(), first.record, waiting, EXPECTED, rules=RULES, now=before
    ).verdict is (Verdict.WAIT)
    late = decide_proof(
        node(), first.record, waiting, EXPECTED, rules=RULES, now=T0 + RULES.deadline
    )
    assert late.verdict is Verdict.REFUSED
    assert late.why.startswith("no proof within 30 min: ")
    assert late.refusal is not None
    assert late.refusal.image is True


def test_gpus_that_never_come_back_hold_and_then_refuse() -> None:
    fewer = node(gpus=6)
    first = decide_proof(fewer, armed(gpus=8), HEALTHY, EXPECTED, rules=RULES, now=T0)
    assert first.verdict is Verdict.WAIT
    assert "allocatable is 6, it had 8" in first.why
    gone = node(gpus=None)
    assert (
        "allocatable is none"
        in decide_proof(gone, armed(), HEALTHY, EXPECTED, rules=RULES, now=T0).why
    )
    late = decide_proof(
        fewer, first.record, HEALTHY, EXPECTED, rules=RULES, now=T0 + RULES.deadline
    )
    assert late.verdict is Verdict.REFUSED


def test_an_image_releasebot_did_not_build_is_not_judged() -> None:
    foreign = Expected(None, ours=False, why="it pulls nvcr.io/nvidia/driver:580-flatcar4593.2.5")
    decision = decide_proof(node(), armed(), (), foreign, rules=RULES, now=T0)
    assert (decision.verdict, decision.annotate) == (Verdict.NOT_JUDGED, False)
    assert "nvcr.io" in decision.why
    late = decide_proof(
        node(), decision.record, (), foreign, rules=RULES, now=T0 + timedelta(days=1)
    )
    assert (late.verdict, late.newly) == (Verdict.NOT_JUDGED, False)


def test_pods_that_cannot_be_read_hold_and_never_refuse() -> None:
    why = "kubernetes list pods: forbidden: grant 'list' on 'pods'"
    first = decide_proof(node(), armed(), why, EXPECTED, rules=RULES, now=T0)
    assert (first.verdict, first.annotate) == (Verdict.WAIT, False)
    assert "cannot be read" in first.why
    late = decide_proof(
        node(), first.record, why, EXPECTED, rules=RULES, now=T0 + timedelta(days=1)
    )
    assert late.verdict is Verdict.WAIT


@pytest.mark.parametrize(
    ("running", "words"),
    [
        (
            pods(
                driver_pod("gpu-0", image=IMAGE, digest=DIGEST),
                driver_pod("gpu-0", image=IMAGE, digest=DIGEST, name="nvidia-driver-other"),
                validator_pod("gpu-0"),
            ),
            "2 driver pods",
        ),
        (
            pods(
                driver_pod("gpu-0", image=IMAGE, digest=DIGEST, image_id_form="local"),
                validator_pod("gpu-0"),
            ),
            "names no registry digest",
        ),
        (
            pods(driver_pod("gpu-0", image=IMAGE, digest=digest_of("old")), validator_pod("gpu-0")),
            "not the verified",
        ),
        ((), "no driver pod"),
        (pods(plugin_pod("gpu-0"), validator_pod("gpu-0")), "no driver pod"),
        (pods(driver_pod("gpu-0", image=IMAGE, digest=DIGEST)), "no nvidia-operator-validator"),
    ],
)
def test_doubt_holds_with_the_reason(running: tuple[OperatorPod, ...], words: str) -> None:
    decision = decide_proof(node(), armed(), running, EXPECTED, rules=RULES, now=T0)
    assert (decision.verdict, decision.annotate) == (Verdict.WAIT, False)
    assert words in decision.why


def test_a_driver_pod_being_deleted_does_not_count() -> None:
    running = pods(
        driver_pod("gpu-0", image=IMAGE, digest=digest_of("old"), deleting=True, name="old"),
        driver_pod("gpu-0", image=IMAGE, digest=DIGEST),
        validator_pod("gpu-0"),
    )
    decision = decide_proof(node(), armed(), running, EXPECTED, rules=RULES, now=T0)
    assert decision.record.healthy_since == T0


def test_a_node_nfd_has_not_relabelled_yet_waits() -> None:
    stale = parse_node(gpu_node("gpu-0", "4593.2.4", after_reboot=True))
    assert isinstance(stale, FleetNode)
    decision = decide_proof(stale, armed(), HEALTHY, EXPECTED, rules=RULES, now=T0)
    assert decision.verdict is Verdict.WAIT
    assert "not 4593.2.5" in decision.why
    late = decide_proof(
        stale, decision.record, HEALTHY, EXPECTED, rules=RULES, now=T0 + RULES.deadline
    )
    assert late.verdict is Verdict.REFUSED
    assert late.refusal is not None
    assert late.refusal.image is False


def test_a_second_reboot_starts_the_proof_again() -> None:
    first = decide_proof(node(boot_id="boot-1"), armed(), HEALTHY, EXPECTED, rules=RULES, now=T0)
    later = T0 + timedelta(minutes=1)
    again = decide_proof(
        node(boot_id="boot-2"), first.record, HEALTHY, EXPECTED, rules=RULES, now=later
    )
    assert again.record.started_at == later
    assert again.record.healthy_since == later
    assert again.verdict is Verdict.WAIT


def test_a_node_without_gpu_labels_is_proven_at_once() -> None:
    cpu = node(gpu=False)
    decision = decide_proof(cpu, None, (), Expected(None), rules=RULES, now=T0)
    assert (decision.verdict, decision.annotate) == (Verdict.PROVEN, True)


def test_an_image_not_published_yet_waits_and_does_not_blame_the_image() -> None:
    building = Expected(TAG, published=False, why=f"{TAG} is building")
    decision = decide_proof(node(), armed(), HEALTHY, building, rules=RULES, now=T0)
    assert decision.verdict is Verdict.WAIT
    late = decide_proof(
        node(), decision.record, HEALTHY, building, rules=RULES, now=T0 + RULES.deadline
    )
    assert late.refusal is not None
    assert late.refusal.image is False


@pytest.mark.parametrize(
    ("image_id", "image", "digest"),
    [
        (f"docker-pullable://r.example/x@{DIGEST}", None, DIGEST),
        (f"r.example:5000/a/b@{DIGEST}", None, DIGEST),
        (DIGEST, None, None),
        ("", f"r.example/x@{DIGEST}", DIGEST),
        (f"r/x@{DIGEST}\x1b[2J", None, DIGEST),  # escapes are removed first
        (f"r/x@{DIGEST}0", None, None),
        ("r/x@sha256:" + "A" * 64, None, None),
        (None, None, None),
        (12, ["x"], None),
    ],
)
def test_image_digest_reads_only_registry_digests(image_id: Any, image: Any, digest: Any) -> None:
    assert image_digest(image_id, image) == digest


@pytest.mark.parametrize(
    "raw",
    [
        None,
        [],
        {"metadata": None},
        {"metadata": {"labels": {"app": "nvidia-operator-validator"}}, "status": "x"},
        {
            "metadata": {"labels": {"app.kubernetes.io/component": "nvidia-driver"}},
            "status": {"containerStatuses": [None, 3, {"restartCount": -1, "state": []}] * 20},
        },
    ],
)
def test_hostile_pods_parse_without_raising(raw: Any) -> None:
    pod = parse_pod(raw)
    if pod is not None:
        assert len(pod.containers) <= 32
        assert all(c.restarts >= 0 for c in pod.containers)


def test_time_the_pods_cannot_be_read_is_left_out_of_the_deadline_and_breaks_the_soak() -> None:
    first = decide_proof(node(), armed(), HEALTHY, EXPECTED, rules=RULES, now=T0)
    assert first.record.healthy_since == T0
    blind = T0 + timedelta(minutes=40)
    gap = decide_proof(node(), first.record, "forbidden", EXPECTED, rules=RULES, now=blind)
    assert gap.record.healthy_since is None  # nothing seen: the soak starts again
    starting = pods(
        driver_pod("gpu-0", image=IMAGE, digest=DIGEST, state="starting"), validator_pod("gpu-0")
    )
    back = blind + timedelta(minutes=1)
    again = decide_proof(node(), gap.record, starting, EXPECTED, rules=RULES, now=back)
    assert again.verdict is Verdict.WAIT  # 41 minutes since the reboot, 1 of them seen
    assert again.refusal is None


def test_a_crash_of_another_digest_does_not_blame_the_image() -> None:
    other = pods(driver_pod("gpu-0", image=IMAGE, digest=digest_of("old"), state="crashloop"))
    decision = decide_proof(node(), armed(), other, EXPECTED, rules=RULES, now=T0)
    assert decision.verdict is Verdict.REFUSED
    assert decision.refusal is not None
    assert decision.refusal.image is False


def test_of_several_images_the_one_the_node_runs_is_judged() -> None:
    other_tag, other_digest = "580.178.04-flatcar4593.2.5", digest_of("580")
    both = Expected(
        TAG,
        frozenset({DIGEST, other_digest}),
        published=True,
        by_digest={DIGEST: TAG, other_digest: other_tag},
    )
    crashing = pods(driver_pod("gpu-0", image=IMAGE, digest=other_digest, state="crashloop"))
    decision = decide_proof(node(), armed(), crashing, both, rules=RULES, now=T0)
    assert decision.refusal is not None
    assert (decision.refusal.tag, decision.refusal.image) == (other_tag, True)


def test_a_proven_node_without_its_annotation_and_no_boot_id_is_proven_again() -> None:
    first = decide_proof(node(boot_id=""), armed(), HEALTHY, EXPECTED, rules=RULES, now=T0)
    done = decide_proof(
        node(boot_id=""), first.record, HEALTHY, EXPECTED, rules=RULES, now=T0 + RULES.soak
    )
    assert done.record.state is ProofState.PROVEN
    later = T0 + timedelta(days=1)  # a reboot nobody saw: no boot ID to tell it apart
    again = decide_proof(node(boot_id=""), done.record, HEALTHY, EXPECTED, rules=RULES, now=later)
    assert (again.verdict, again.annotate) == (Verdict.WAIT, False)
    assert again.record.started_at == later
