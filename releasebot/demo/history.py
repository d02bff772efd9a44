"""The demo's simulated build history: what ``releasebot demo --serve`` shows on the page.

``seed_demo_builds`` gives the targets ``releasebot demo`` planned a history in the states
a real installation shows (published and signed, building, failed with its log tail,
retrying, missing), each text naming only its own target's driver, Flatcar version, kernel
and tag. It writes only through the ``StateStore`` port, and only the demo's own database
is ever handed to it (``wiring.web.serve_demo``).

This package is also the demo's data folder (the feeds and the fleet beside this module,
``README.md``): the demo's rows live with the demo's inputs, not in the wiring, which only
builds the objects. Deliberately not here: opening the store, serving the page.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

from releasebot.domain.ports import StateStore
from releasebot.domain.shared.versions import Arch
from releasebot.domain.targets.builds import BuildRecord, BuildState, FailureReason, job_name
from releasebot.domain.targets.events import EventKind, MessageRef, build_event
from releasebot.domain.targets.models import TargetRecord, TargetState

DEMO_FINGERPRINT = "SHA256:demo0kEyFiNgErPrInT0nLyF0rThEdEm0"


def demo_failed_log(record: TargetRecord, arch: Arch) -> str:
    """A failed build's log tail as the recipe prints it, for ``record``'s own driver,
    Flatcar version and kernel (a log naming another target's would mislead a newcomer)."""
    target = record.target
    kernel = f"{target.kernel}-flatcar"
    return "\n".join(
        (
            f"build-modules: NVIDIA {target.driver_version.text} for Flatcar "
            f"{target.flatcar_version.text} ({arch.value}), kernel {kernel}",
            f"make -C /usr/lib/modules/{kernel}/build M=/build/kernel modules",
            "  CC [M]  nvidia/nv.o",
            "  CC [M]  nvidia/os-interface.o",
            "nvidia/os-interface.c:412:5: error: implicit declaration of function 'vm_flags_set'",
            "make[2]: *** [scripts/Makefile.build:243: nvidia/os-interface.o] Error 1",
            f"build-modules: ERROR: the kernel modules of NVIDIA {target.driver_version.text} "
            f"do not build against {kernel} (exit 2)",
        )
    )


def demo_push_log(record: TargetRecord, arch: Arch) -> str:
    """A push that failed for the registry's sake, naming ``record``'s own tag and arch."""
    return "\n".join(
        (
            f"INFO Pushing image to registry.example.com/nvidia/driver:{record.tag} ({arch.value})",
            "error pushing image: 503 Service Unavailable",
        )
    )


def seed_demo_builds(store: StateStore, now: datetime) -> list[str]:
    """Give the demo's targets a simulated history as of ``now``, in plan order (newest
    release first): the first builds, the second failed with its log tail, the third
    retries, the last stays missing, the others are published and signed. The tags it
    changed."""
    records = store.targets()
    if len(records) < 5:
        return []
    changed = []
    for index, record in enumerate(records[:-1]):
        if index == 0:
            target = replace(record, state=TargetState.BUILDING, attempts=1, updated_at=now)
            rows = _demo_builds(record, 1, BuildState.RUNNING, now)
        elif index == 1:
            target = replace(
                record,
                state=TargetState.FAILED,
                attempts=1,
                last_error="the kernel modules do not build: see the log tail",
                updated_at=now - timedelta(minutes=20),
            )
            rows = _demo_builds(
                record,
                1,
                BuildState.FAILED,
                now,
                reason=FailureReason.EXIT_CODE,
                message="the build container exited with code 2",
                log=demo_failed_log,
                finished_at=now - timedelta(minutes=20),
            )
        elif index == 2:
            target = replace(
                record,
                state=TargetState.RETRYING,
                attempts=2,
                next_attempt_at=now + timedelta(minutes=4),
                last_error="pushing the image failed: 503 from the registry",
                updated_at=now,
            )
            rows = _demo_builds(
                record,
                2,
                BuildState.FAILED,
                now,
                reason=FailureReason.PUSH_UNVERIFIED,
                message="error pushing image: 503 Service Unavailable",
                log=demo_push_log,
                finished_at=now,
            )
        else:
            digest = "sha256:" + hashlib.sha256(record.tag.encode()).hexdigest()
            published_at = now - timedelta(hours=2 + index)
            target = replace(
                record,
                state=TargetState.PUBLISHED,
                attempts=1,
                digest=digest,
                published_at=published_at,
                updated_at=published_at,
            )
            rows = _demo_builds(
                record, 1, BuildState.SUCCEEDED, now, digest=digest, finished_at=published_at
            )
        events = []
        if target.state is TargetState.PUBLISHED:
            event = build_event(
                EventKind.TAG_PUBLISHED, target, now, rows, 3, signed_by=DEMO_FINGERPRINT
            )
            events.append(event)
        store.save(targets=[target], builds=rows, events=events)
        changed.append(record.tag)
    for stored in store.pending_events(now + timedelta(days=1), limit=1000):
        if stored.event.kind is EventKind.TAG_PUBLISHED:
            ref = MessageRef(stored.event.message_key, "C0DEMO0000", "1764633600.000100")
            store.mark_delivered(stored.id, now, ref)
    return changed


def _demo_builds(
    record: TargetRecord,
    attempt: int,
    state: BuildState,
    now: datetime,
    log: Callable[[TargetRecord, Arch], str] | None = None,
    **fields: Any,
) -> list[BuildRecord]:
    started = now - timedelta(minutes=25 * attempt)
    return [
        BuildRecord(
            tag=record.tag,
            arch=arch,
            attempt=attempt,
            job_name=job_name(record.tag, arch, attempt),
            destination_tag=record.tag,
            state=state,
            created_at=started,
            log_tail=None if log is None else log(record, arch),
            **fields,
        )
        for arch in record.target.arches
    ]
