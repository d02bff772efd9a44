"""The after-reboot proof: a node proves its driver image before FLUO reboots the next one.

FLUO, started with ``--after-reboot-annotations=releasebot.io/driver-proven``, labels a node
``after-reboot=true`` when it is back from its reboot, deletes the annotation and waits,
the node cordoned, until it is ``"true"``; no other node reboots meanwhile
(flatcar-linux-update-operator ``pkg/operator/operator.go``). ``decide_proof`` says, from
what the node and the GPU Operator's pods on it show, whether releasebot sets it:

- **proven** (annotation ``"true"``) once, after the reboot, all of these hold for the soak
  (``ProofRules.soak``) without a break: the node's one driver pod runs the image releasebot
  verified for its (driver, Flatcar, arch), by digest (the tag's digest or its build's for
  the node's arch), and is Ready (its startup probe: module loaded, ``nvidia-smi`` works);
  the ``nvidia-operator-validator`` pod on the node is Ready (driver, toolkit, a CUDA
  workload and the device plugin validated); ``nvidia.com/gpu`` allocatable is at least what
  the node had before the reboot; and the operator does not say ``upgrade-failed``. A node
  without GPU labels is proven at once.
- **refused** at once when the driver pod crash-loops or an init container failed, or the
  operator says ``upgrade-failed``; and when no proof came within ``ProofRules.deadline``
  (longer than the operator's ~21 minute startup window). The annotation stays unset: FLUO
  halts at this node, every other node keeps its version and GPUs. The refusal is the
  image's (``Refusal.image``: its target becomes ``refused`` and no other node's gate opens
  for it) when the node runs that image; otherwise (the node came back on another version,
  runs another digest) it is the node's alone.
- **not judged** when the node runs an image releasebot did not build (a foreign
  repository, a digest a person pinned): the annotation is its owner's to set.
- **held**, with the reason, on any doubt: the pods cannot be read, several driver pods,
  an image ID that names no registry digest, a node NFD has not relabelled yet. Never a
  release on doubt; the deadline does not run while the pods cannot be read.

A second reboot during a proof (the node's ``bootID`` changed) starts it again. Times are
releasebot's own clock, never the API server's (clock skew). Deliberately not here:
listing pods, reading logs, writing the annotation, storing records (the service and its
adapters), and the pool the node is in (``operator.py``; the caller says what it expects).
"""

from __future__ import annotations

import enum
import re
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta

from releasebot.domain.fleet.nodes import FleetNode
from releasebot.domain.shared.untrusted import clean, quoted
from releasebot.domain.shared.versions import Arch, FlatcarVersion

DRIVER_COMPONENT = ("app.kubernetes.io/component", "nvidia-driver")
"""The label every driver DaemonSet's pods carry, ClusterPolicy's and each NVIDIADriver's."""
DRIVER_APP = ("app", "nvidia-driver-daemonset")
VALIDATOR_APP = ("app", "nvidia-operator-validator")
DRIVER_CONTAINER = "nvidia-driver-ctr"
UPGRADE_FAILED = "upgrade-failed"
CRASH_LOOP = "CrashLoopBackOff"
LOG_TAIL_LINES = 40
LOG_TAIL_CHARS = 4000
"""The part of a refused driver pod's log kept and shown: enough for the error at its end."""
POD_CONTAINERS_MAX = 32
_DIGEST = re.compile(r"sha256:[0-9a-f]{64}")
_REPO_DIGEST = re.compile(r"@(sha256:[0-9a-f]{64})$")


class PodRole(enum.StrEnum):
    DRIVER = "driver"
    VALIDATOR = "validator"


@dataclass(frozen=True)
class ContainerFacts:
    """One container's status, as far as a proof needs it."""

    name: str
    image: str | None
    digest: str | None
    """The registry digest the kubelet pulled (from ``imageID``, else an ``@sha256:``
    image); ``None`` when it names none (a runtime's local image ID)."""
    image_id: str | None
    ready: bool = False
    restarts: int = 0
    waiting: str | None = None
    """``state.waiting.reason`` (``CrashLoopBackOff``, ``ImagePullBackOff``...)."""
    failed_exit: int | None = None
    """The non-zero exit code of its current state (terminated), if any: an init container
    that failed once and then succeeded is not a failure."""


@dataclass(frozen=True)
class OperatorPod:
    """A driver or validator pod of the GPU Operator."""

    namespace: str
    name: str
    node: str | None
    role: PodRole
    ready: bool
    deleting: bool
    containers: tuple[ContainerFacts, ...]
    init_containers: tuple[ContainerFacts, ...]

    def driver_container(self) -> ContainerFacts | None:
        named = [c for c in self.containers if c.name == DRIVER_CONTAINER]
        found = named or list(self.containers)
        return found[0] if found else None


def parse_pod(raw: object) -> OperatorPod | None:
    """A Pod (JSON as the API server sends it) as an ``OperatorPod``; ``None`` when it is
    neither a driver nor a validator pod. Never raises: every value is hostile."""
    pod = _mapping(raw)
    meta = _mapping(pod.get("metadata"))
    labels = _mapping(meta.get("labels"))
    role = _role(labels)
    if role is None:
        return None
    spec = _mapping(pod.get("spec"))
    status = _mapping(pod.get("status"))
    conditions = [_mapping(c) for c in _items(status.get("conditions"))]
    ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)
    return OperatorPod(
        namespace=clean(meta.get("namespace"), limit=63) or "",
        name=clean(meta.get("name"), limit=253) or "(unnamed)",
        node=clean(spec.get("nodeName"), limit=253),
        role=role,
        ready=ready,
        deleting=meta.get("deletionTimestamp") is not None,
        containers=_containers(status.get("containerStatuses")),
        init_containers=_containers(status.get("initContainerStatuses")),
    )


def image_digest(image_id: object, image: object = None) -> str | None:
    """The registry digest in a kubelet ``imageID`` (``docker-pullable://r/x@sha256:...``,
    ``r/x@sha256:...``, a mirror's name included) or, failing that, in an image reference
    pinned by digest. A bare ``sha256:...`` image ID is the runtime's local ID of the
    image's config, not a registry digest: ``None``."""
    for value in (image_id, image):
        text = clean(value, limit=600)
        if text is None:
            continue
        found = _REPO_DIGEST.search(text)
        if found:
            return found.group(1)
    return None


# -- the records -----------------------------------------------------------------------------


class ProofState(enum.StrEnum):
    ARMED = "armed"
    """FLUO wants to reboot the node: what it had before (GPUs, boot) is noted."""
    PROVING = "proving"
    """Back from the reboot; FLUO waits for the proof."""
    PROVEN = "proven"
    REFUSED = "refused"
    NOT_JUDGED = "not-judged"
    """It runs an image releasebot did not build: the annotation is its owner's."""
    RELEASED = "released"
    """A person set the annotation through ``/releasebot release``."""


@dataclass(frozen=True)
class ProofRecord:
    """One node's proof, as the store keeps it (one row per node)."""

    node: str
    state: ProofState
    updated_at: datetime
    version: FlatcarVersion | None = None
    """The version the node reboots (or rebooted) into."""
    tag: str | None = None
    """The image it must run after the reboot, when known."""
    arch: Arch | None = None
    gpus_before: int | None = None
    """The most GPUs the node offered while FLUO waited to reboot it."""
    boot_id: str | None = None
    armed_at: datetime | None = None
    started_at: datetime | None = None
    """When releasebot first saw the node back (FLUO's ``after-reboot``)."""
    healthy_since: datetime | None = None
    reason: str | None = None
    pod: str | None = None
    """``namespace/name`` of the driver pod judged (for its log)."""
    log_tail: str | None = None


@dataclass(frozen=True)
class ProofRules:
    soak: timedelta = timedelta(minutes=2)
    deadline: timedelta = timedelta(minutes=30)


@dataclass(frozen=True)
class Expected:
    """What releasebot expects the node to run after its reboot."""

    tag: str | None
    """``None``: releasebot does not know (and ``why`` says so)."""
    digests: frozenset[str] = frozenset()
    """The tag's verified digest and its build's for the node's arch."""
    ours: bool = True
    """False when the operator gives the node an image releasebot did not build."""
    why: str | None = None
    """Why nothing is expected (not ours, no target, not published yet)."""
    published: bool = False
    by_digest: Mapping[str, str] = field(default_factory=dict)
    """When the node may need several images (no operator: each selected driver), which
    tag each of ``digests`` is: the one the node runs is the one judged."""


@dataclass(frozen=True)
class Refusal:
    tag: str | None
    reason: str
    image: bool
    """The image is to blame (the node runs it): its target becomes ``refused``."""
    pod: str | None = None
    """``namespace/name`` of the driver pod whose log tells why."""
    container: str | None = None
    previous: bool = False
    """Its log of the last terminated run (a crash loop) rather than the current one."""


class Verdict(enum.StrEnum):
    WAIT = "wait"
    PROVEN = "proven"
    REFUSED = "refused"
    NOT_JUDGED = "not-judged"


@dataclass(frozen=True)
class ProofDecision:
    record: ProofRecord
    verdict: Verdict
    why: str
    annotate: bool = False
    """Set the proof annotation to ``"true"`` now."""
    refusal: Refusal | None = None
    newly: bool = False
    """The verdict is new this cycle (tell it once)."""


def arm(
    node: FleetNode, record: ProofRecord | None, expected: Expected, now: datetime
) -> ProofRecord:
    """Note what ``node`` has while FLUO waits to reboot it (``before-reboot``)."""
    before = record if record is not None and record.state is ProofState.ARMED else None
    gpus = node.gpus
    if before is not None and before.gpus_before is not None:
        gpus = before.gpus_before if gpus is None else max(gpus, before.gpus_before)
    return ProofRecord(
        node=node.name,
        state=ProofState.ARMED,
        updated_at=now,
        version=node.pending_version,
        tag=expected.tag,
        arch=node.arch,
        gpus_before=gpus,
        boot_id=node.boot_id,
        armed_at=now if before is None else before.armed_at,
    )


def decide_proof(
    node: FleetNode,
    record: ProofRecord | None,
    pods: Sequence[OperatorPod] | str,
    expected: Expected,
    *,
    rules: ProofRules,
    now: datetime,
) -> ProofDecision:
    """The proof of ``node``, back from its reboot (``after-reboot=true``).

    ``pods`` are the GPU Operator's pods on the node, or why they could not be read;
    ``record`` what was noted before (``arm``) or during the proof.
    """
    current = _proving(node, record, now)
    if current.state in (ProofState.PROVEN, ProofState.RELEASED):
        done = node.proof == "true"
        return ProofDecision(current, Verdict.PROVEN, current.reason or "proven", annotate=not done)
    if current.state is ProofState.REFUSED:
        why = current.reason or "refused"
        return ProofDecision(current, Verdict.REFUSED, why)
    if not node.is_gpu:
        why = "no GPU labels: the node needs no driver image"
        return _proven(current, why, now)
    if not expected.ours:
        why = expected.why or "it runs an image releasebot did not build"
        record = replace(current, state=ProofState.NOT_JUDGED, reason=why, updated_at=now)
        newly = current.state is not ProofState.NOT_JUDGED
        return ProofDecision(record, Verdict.NOT_JUDGED, f"not judged: {why}", newly=newly)
    if isinstance(pods, str):  # doubt: wait; neither the deadline nor the soak runs
        return _wait(_paused(current, now), f"the GPU Operator's pods cannot be read: {pods}", now)
    expected_version = current.version
    if expected_version is not None and node.version != expected_version:
        why = (
            f"it runs Flatcar {node.version}, not {expected_version} it was to reboot into "
            "(NFD may not have relabelled it yet)"
        )
        return _late(current, why, rules, now, tag=expected.tag, image=False)
    if expected.tag is None:
        why = expected.why or f"no driver image is known for Flatcar {node.version}"
        return _late(current, why, rules, now, tag=None, image=False)
    if not expected.published:
        why = expected.why or f"{expected.tag} is not published and verified"
        return _late(current, why, rules, now, tag=expected.tag, image=False)
    return _judge(node, current, pods, expected, rules, now)


def _paused(record: ProofRecord, now: datetime) -> ProofRecord:
    """The record with the time since it was last judged left out of its deadline, and its
    soak broken: nothing was seen, so nothing counts for or against the image."""
    if record.started_at is None or record.updated_at >= now:
        return replace(record, healthy_since=None)
    return replace(
        record, started_at=record.started_at + (now - record.updated_at), healthy_since=None
    )


def _proving(node: FleetNode, record: ProofRecord | None, now: datetime) -> ProofRecord:
    """The record of a node back from its reboot. A new boot starts the proof again, and so
    does a proven node without its annotation whose boot cannot be told apart (no boot ID):
    an old proof never vouches for a reboot nobody saw."""
    if record is None or record.state is ProofState.ARMED:
        base = record or ProofRecord(node.name, ProofState.ARMED, now, arch=node.arch)
        return _started(base, node, now, reason=None)
    known = record.boot_id is not None and node.boot_id is not None
    same_boot = known and node.boot_id == record.boot_id
    settled = record.state in (ProofState.PROVEN, ProofState.RELEASED)
    if (known and not same_boot) or (settled and node.proof != "true" and not same_boot):
        return _started(record, node, now, reason="rebooted again: the proof starts over")
    return record


def _started(
    record: ProofRecord, node: FleetNode, now: datetime, *, reason: str | None
) -> ProofRecord:
    """``record`` as a proof that starts now, on the node's current boot."""
    return replace(
        record,
        state=ProofState.PROVING,
        started_at=now,
        healthy_since=None,
        boot_id=node.boot_id,
        reason=reason,
        log_tail=None,
        updated_at=now,
    )


def _judge(
    node: FleetNode,
    record: ProofRecord,
    pods: Sequence[OperatorPod],
    expected: Expected,
    rules: ProofRules,
    now: datetime,
) -> ProofDecision:
    tag = expected.tag
    drivers = [
        p for p in pods if p.role is PodRole.DRIVER and p.node == node.name and not p.deleting
    ]
    validators = [
        p for p in pods if p.role is PodRole.VALIDATOR and p.node == node.name and not p.deleting
    ]
    if not drivers:
        return _late(record, "no driver pod runs on the node yet", rules, now, tag=tag, image=False)
    if len(drivers) > 1:
        names = ", ".join(sorted(p.name for p in drivers)[:3])
        why = f"{len(drivers)} driver pods on the node ({names}): cannot tell which one counts"
        return _late(record, why, rules, now, tag=tag, image=False)
    driver = drivers[0]
    pod_name = f"{driver.namespace}/{driver.name}"
    record = replace(record, pod=pod_name)
    container = driver.driver_container()
    if container is None:
        return _late(
            record, f"driver pod {pod_name} reports no container", rules, now, tag=tag, image=False
        )
    if container.digest is not None:  # of several images the node may need, the one it runs
        tag = expected.by_digest.get(container.digest, tag)
        record = replace(record, tag=tag)
    runs_ours = container.digest is not None and container.digest in expected.digests
    # Blamed by digest; by the tag in its image reference only when the kubelet reports no
    # digest (a container that never ran).
    runs_tag = (
        container.digest is None
        and container.image is not None
        and container.image.endswith(f":{tag}")
    )
    failure = _failure(node, driver, container)
    if failure is not None:
        return _refuse(
            record,
            failure,
            Refusal(
                tag,
                failure,
                image=runs_ours or runs_tag,
                pod=pod_name,
                container=container.name,
                previous=container.waiting == CRASH_LOOP,
            ),
            now,
        )
    if container.digest is None:
        why = (
            f"driver pod {pod_name} reports image ID {quoted(container.image_id, limit=90)}, "
            "which names no registry digest: cannot tell which image runs"
        )
        return _late(record, why, rules, now, tag=tag, image=False)
    if not runs_ours:
        shown = container.digest[:19]
        why = f"driver pod {pod_name} runs {shown}…, not the verified {tag}"
        return _late(record, why, rules, now, tag=tag, image=False, pod=pod_name)
    missing = _not_yet(node, record, driver, validators)
    if missing is not None:
        return _late(
            replace(record, healthy_since=None),
            missing,
            rules,
            now,
            tag=tag,
            image=True,
            pod=pod_name,
            container=container.name,
        )
    since = record.healthy_since or now
    record = replace(record, healthy_since=since, updated_at=now)
    if now - since < rules.soak:
        left = int((rules.soak - (now - since)).total_seconds())
        return _wait(record, f"healthy; soaking for {left} s more", now)
    gpus = "" if node.gpus is None else f", {node.gpus} GPU(s)"
    return _proven(record, f"{tag} runs, driver and validator Ready{gpus}", now)


def _failure(node: FleetNode, driver: OperatorPod, container: ContainerFacts) -> str | None:
    """What shows, beyond doubt, that the driver does not work on the node."""
    pod = f"{driver.namespace}/{driver.name}"
    if node.upgrade_state == UPGRADE_FAILED:
        return f"the GPU Operator marks the node {UPGRADE_FAILED}"
    if container.waiting == CRASH_LOOP:
        return f"driver pod {pod} is in {CRASH_LOOP} ({container.restarts} restarts)"
    for init in driver.init_containers:
        if init.waiting == CRASH_LOOP:
            return f"driver pod {pod}: init container {init.name} is in {CRASH_LOOP}"
        if init.failed_exit is not None:
            return f"driver pod {pod}: init container {init.name} failed (exit {init.failed_exit})"
    return None


def _not_yet(
    node: FleetNode, record: ProofRecord, driver: OperatorPod, validators: Sequence[OperatorPod]
) -> str | None:
    """What is still missing for a proof, or ``None`` when everything holds."""
    if not driver.ready:
        return f"driver pod {driver.namespace}/{driver.name} is not Ready yet"
    if not validators:
        return "no nvidia-operator-validator pod on the node yet"
    if not any(v.ready for v in validators):
        return "the nvidia-operator-validator pod is not Ready yet"
    need = record.gpus_before if record.gpus_before is not None else 1
    if node.gpus is None or node.gpus < need:
        has = "none" if node.gpus is None else str(node.gpus)
        return f"nvidia.com/gpu allocatable is {has}, it had {need} before the reboot"
    return None


def _wait(record: ProofRecord, why: str, now: datetime) -> ProofDecision:
    return ProofDecision(replace(record, reason=why, updated_at=now), Verdict.WAIT, why)


def _late(
    record: ProofRecord,
    why: str,
    rules: ProofRules,
    now: datetime,
    *,
    tag: str | None,
    image: bool,
    pod: str | None = None,
    container: str | None = None,
) -> ProofDecision:
    """Wait for ``why``; past the deadline, refuse with it."""
    started = record.started_at or now
    if now - started < rules.deadline:
        return _wait(replace(record, healthy_since=None), why, now)
    minutes = int(rules.deadline.total_seconds() // 60)
    reason = f"no proof within {minutes} min: {why}"
    refusal = Refusal(tag, reason, image=image, pod=pod or record.pod, container=container)
    return _refuse(record, reason, refusal, now)


def _refuse(record: ProofRecord, why: str, refusal: Refusal, now: datetime) -> ProofDecision:
    refused = replace(record, state=ProofState.REFUSED, reason=why, updated_at=now)
    return ProofDecision(refused, Verdict.REFUSED, why, refusal=refusal, newly=True)


def _proven(record: ProofRecord, why: str, now: datetime) -> ProofDecision:
    proven = replace(record, state=ProofState.PROVEN, reason=why, updated_at=now)
    return ProofDecision(proven, Verdict.PROVEN, why, annotate=True, newly=True)


def release(record: ProofRecord | None, node: str, who: str, now: datetime) -> ProofRecord:
    """A person releases ``node``: the annotation is set, the refusal stays the image's."""
    base = record or ProofRecord(node, ProofState.RELEASED, now)
    return replace(base, state=ProofState.RELEASED, reason=f"released by {who}", updated_at=now)


def count_states(records: Collection[ProofRecord]) -> dict[ProofState, int]:
    """Nodes per proof state (every state present, maybe 0), for the metrics."""
    counts = dict.fromkeys(ProofState, 0)
    for record in records:
        counts[record.state] += 1
    return counts


# -- parsing ---------------------------------------------------------------------------------


def _role(labels: Mapping[str, object]) -> PodRole | None:
    def has(pair: tuple[str, str]) -> bool:
        return labels.get(pair[0]) == pair[1]

    if has(DRIVER_COMPONENT) or has(DRIVER_APP):
        return PodRole.DRIVER
    if has(VALIDATOR_APP):
        return PodRole.VALIDATOR
    return None


def _containers(raw: object) -> tuple[ContainerFacts, ...]:
    facts = []
    for item in _items(raw)[:POD_CONTAINERS_MAX]:
        status = _mapping(item)
        state = _mapping(status.get("state"))
        waiting = _mapping(state.get("waiting"))
        code = _mapping(state.get("terminated")).get("exitCode")
        exit_code = code if isinstance(code, int) and not isinstance(code, bool) and code else None
        restarts = status.get("restartCount")
        image_id = clean(status.get("imageID"), limit=600)
        facts.append(
            ContainerFacts(
                name=clean(status.get("name"), limit=63) or "(unnamed)",
                image=clean(status.get("image"), limit=600),
                digest=image_digest(status.get("imageID"), status.get("image")),
                image_id=image_id,
                ready=status.get("ready") is True,
                restarts=restarts if isinstance(restarts, int) and 0 <= restarts < 10**9 else 0,
                waiting=clean(waiting.get("reason"), limit=63),
                failed_exit=exit_code
                if exit_code is not None and -(2**31) <= exit_code < 2**31
                else None,
            )
        )
    return tuple(facts)


def _items(value: object) -> list[object]:
    return list(value) if isinstance(value, list) else []


def _mapping(value: object) -> Mapping[str, object]:
    return value if isinstance(value, Mapping) else {}
