"""The ``StateStore`` contract for credentials in stored text, on every backend: every text
that comes from outside (a feed's error, a target's last error, a build's message and log
tail, the texts inside an event's payload, an undelivered event's error, an ignored node's
reason, a deletion's reason) is stored with its credentials masked, by their form, and
read back masked; on SQLite and PostgreSQL the raw rows of every table are scanned, so
no column keeps a credential in clear, whichever way it was written."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

from releasebot.domain.fleet.nodes import IgnoredNode
from releasebot.domain.fleet.retention import DeletionRecord
from releasebot.domain.shared.versions import Arch
from releasebot.domain.targets.builds import BuildState
from releasebot.domain.targets.events import EventKind, build_event
from releasebot.domain.targets.models import TargetState
from releasebot.store.limits import LOG_TAIL_MAX_CHARS
from tests.contract.conftest import Backend
from tests.contract.test_store_builds import build, planned_target
from tests.support.leaks import KEPT, LEAK, SECRETS, clear_secrets

T0 = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


def _clear(text: str | None) -> list[str]:
    assert text is not None
    return [secret for secret in SECRETS if secret in text]


def test_every_text_from_outside_is_stored_masked(backend: Backend) -> None:
    store = backend.store
    store.record_feed_failure("nvidia", "https://feeds.example/nvidia.json", LEAK, T0)
    record = planned_target(store)
    failed = replace(record, state=TargetState.RETRYING, attempts=1, last_error=LEAK)
    long_log = "x" * (3 * LOG_TAIL_MAX_CHARS) + "\n" + LEAK + "\nmake: *** Error 2"
    builds = [
        replace(build(record), state=BuildState.FAILED, message=LEAK, log_tail=long_log),
        replace(build(record, Arch.ARM64), state=BuildState.FAILED, message=LEAK, log_tail=LEAK),
    ]
    event = build_event(EventKind.BUILD_RETRYING, failed, T0, builds, 3, LEAK)
    store.save(targets=[failed], builds=builds, events=[event])
    [pending] = store.pending_events(T0 + timedelta(days=1))
    store.mark_undelivered(pending.id, LEAK, T0 + timedelta(minutes=5), T0)
    store.record_fleet([IgnoredNode("gpu-odd", LEAK, "true", None, "amd64", None)], T0)
    deletion = DeletionRecord("570.1.1-flatcar4459.2.4", "sha256:" + "a" * 64, "4459.2.4", LEAK, T0)
    store.record_deletion(deletion)

    feed = store.feed_state("nvidia")
    stored = store.target(record.tag)
    assert feed is not None
    assert stored is not None
    shown = [feed.last_error, stored.last_error]
    shown += [text for b in store.builds() for text in (b.message, b.log_tail)]
    [event_back] = store.outbox_events(event.message_key)
    shown += [event_back.last_error, str(event_back.event.payload.get("error"))]
    shown += [r.state.ignored_reason for r in store.fleet_nodes()]
    shown += [d.reason for d in store.deletions()]
    for text in shown:
        assert _clear(text) == [], text
        assert "***" in (text or "")
    assert all(kept in (feed.last_error or "") for kept in KEPT)  # masked, not dropped
    assert next(b.log_tail for b in store.builds() if b.arch is Arch.AMD64).endswith(
        "make: *** Error 2"
    )
    if backend.engine is not None:  # the raw rows, every column of every table
        assert clear_secrets(backend.engine) == []
