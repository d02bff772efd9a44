"""Rendering of chat messages: golden Block Kit JSON per message kind, and Block Kit's rules.

Every message kind (building, published single- and multi-arch, failed with a log,
retrying, retries exhausted, feed failing and recovered, the fleet's alerts, and the
thread replies) is
compared with ``tests/golden/*.json``; run with ``UPDATE_GOLDEN=1`` to rewrite them after
an intended change (and review the diff). Every block must also survive slack-sdk's block
models unchanged (``Block.parse(b).to_dict() == b``), which enforces Slack's limits.
Beyond the golden files: mrkdwn escaping, trimming to the limits, folding of payloads.
"""

from __future__ import annotations

import json
import os
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from slack_sdk.models.blocks import Block

from releasebot.domain.shared.versions import Arch
from releasebot.domain.targets.builds import job_name
from releasebot.domain.targets.events import Event, EventKind, build_key, feed_key, read_event
from releasebot.notify.render import (
    HEADER_MAX_CHARS,
    SECTION_MAX_CHARS,
    RenderedMessage,
    render_message,
    render_thread_reply,
)

GOLDEN = Path(__file__).resolve().parent.parent / "golden"
REPOSITORY = "registry.example.com/gpu/nvidia-driver"
T0 = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
TAG = "580.105.08-flatcar4459.2.1"
DIGEST = "sha256:" + "d" * 64
LOG = "\n".join(
    [f"#{n} compiling nvidia-modeset/nvkms-{n}.c" for n in range(30)]
    + ["\x1b[31merror: implicit declaration of function 'drm_fb_helper_alloc_fbi'\x1b[0m"]
    + ["make[2]: *** [scripts/Makefile.build:243: nvidia/nv.o] Error 1"]
)


def build_event(kind: EventKind, minutes: int = 0, attempt: int = 1, **payload: Any) -> Event:
    base: dict[str, Any] = {
        "tag": TAG,
        "attempt": attempt,
        "max_attempts": 3,
        "driver_version": "580.105.08",
        "flatcar_version": "4459.2.1",
        "flatcar_channel": "stable",
        "kernel_release": "6.12.54-flatcar",
        "arches": ["amd64"],
        "jobs": [],
        "digest": None,
        "error": None,
        "reasons": [],
        "log_tail": None,
        "next_attempt_at": None,
    }
    base.update(payload)
    return read_event(kind, build_key(TAG, attempt), TAG, T0 + timedelta(minutes=minutes), base)


def started(attempt: int = 1, arches: tuple[str, ...] = ("amd64",)) -> Event:
    jobs = [job_name(TAG, Arch(arch), attempt) for arch in arches]
    return build_event(EventKind.BUILD_STARTED, 0, attempt, arches=list(arches), jobs=jobs)


def failure(kind: EventKind, attempt: int = 1, **payload: Any) -> Event:
    facts = {"error": "amd64: NonZeroExit: exit code 2", "reasons": ["NonZeroExit"], **payload}
    return build_event(kind, 25, attempt, **facts)


def feed_event(kind: EventKind, minutes: int, **payload: Any) -> Event:
    return read_event(kind, feed_key("stable"), "stable", T0 + timedelta(minutes=minutes), payload)


FEED_FAILING = feed_event(
    EventKind.FEED_FAILING,
    0,
    error="feed stable: HTTP 503 from https://www.flatcar.org/releases-json/releases-stable.json",
    failing_since=(T0 - timedelta(hours=6)).isoformat(),
    consecutive_failures=72,
)
FEED_RECOVERED = feed_event(
    EventKind.FEED_RECOVERED, 90, failing_since=(T0 - timedelta(hours=6)).isoformat()
)
PUBLISHED = build_event(EventKind.TAG_PUBLISHED, 30, digest=DIGEST)
MULTI_ARCH = build_event(
    EventKind.TAG_PUBLISHED,
    40,
    arches=["amd64", "arm64"],
    digest=DIGEST,
    arch_digests=[f"amd64 sha256:{'a' * 64}", f"arm64 sha256:{'b' * 64}"],
)
RETRYING = failure(
    EventKind.BUILD_RETRYING,
    error="amd64: OOMKilled: the build ran out of memory",
    reasons=["OOMKilled"],
    next_attempt_at=(T0 + timedelta(minutes=30)).isoformat(),
    log_tail="#12 linking nvidia.ko\nKilled",
)
FAILED = failure(EventKind.BUILD_FAILED, log_tail=LOG)
EXHAUSTED = failure(EventKind.RETRIES_EXHAUSTED, attempt=3, log_tail=LOG)
INCOMPATIBLE = failure(
    EventKind.BUILD_INCOMPATIBLE,
    error="amd64: Incompatible: exit code 1",
    reasons=["Incompatible"],
    alternative_branch="570",
    alternative_tag="570.195.03-flatcar4459.2.1",
    log_tail="nvidia/nv-pci.c:812:17: error: too few arguments to function"
    " 'pci_resize_resource'\n"
    "incompatible: NVIDIA 580.105.08 does not compile for kernel 6.12.54-flatcar\n"
    "build-modules: ERROR: kernel (proprietary): compiling NVIDIA 580.105.08 failed",
)


def fleet_event(kind: EventKind, minutes: int, key: str, subject: str, **payload: Any) -> Event:
    return read_event(kind, f"fleet:{key}", subject, T0 + timedelta(minutes=minutes), payload)


SINCE = T0.isoformat()
FLEET_EXPOSED = fleet_event(
    EventKind.FLEET_EXPOSED,
    0,
    f"4757.1.0@{SINCE}",
    "Flatcar 4757.1.0",
    flatcar_version="4757.1.0",
    verdict="failed",
    running=["gpu-a10g-0"],
    running_count=1,
    pending=[f"gpu-l40s-{n}" for n in range(20)],
    pending_count=42,
    images=["580.178.04-flatcar4757.1.0 failed", "595.91.07-flatcar4757.1.0 building"],
    error=None,
    exposed_since=SINCE,
)
FLEET_COVERED = fleet_event(
    EventKind.FLEET_COVERED,
    45,
    f"4757.1.0@{SINCE}",
    "Flatcar 4757.1.0",
    flatcar_version="4757.1.0",
    exposed_since=SINCE,
)
FLEET_UNREADABLE = fleet_event(
    EventKind.FLEET_UNREADABLE,
    0,
    f"listing@{SINCE}",
    "the fleet",
    error="fleet: cannot list Nodes, planning by the channel policy: kubernetes: forbidden to "
    "list nodes (core API group): grant releasebot's ServiceAccount 'list' on 'nodes'",
    failing_since=SINCE,
)

DELETED_DIGEST = "sha256:" + "e" * 64
TAG_DELETED = read_event(
    EventKind.TAG_DELETED,
    f"retention:580.105.08-flatcar4230.2.4@{DELETED_DIGEST}",
    "580.105.08-flatcar4230.2.4",
    T0,
    {
        "tag": "580.105.08-flatcar4230.2.4",
        "repository": REPOSITORY,
        "digest": DELETED_DIGEST,
        "flatcar_version": "4230.2.4",
        "reason": "Flatcar 4230.2.4: no GPU node runs or will reboot into it, it left every "
        "feed on 2026-09-03 (over 30 days ago), no current target",
        "attachments": 3,
    },
)

MESSAGES: dict[str, list[Event]] = {
    "building": [started(arches=("amd64", "arm64"))],
    "published_single_arch": [started(), PUBLISHED],
    "published_multi_arch": [started(arches=("amd64", "arm64")), MULTI_ARCH],
    "failed_with_log": [started(), FAILED],
    "retrying": [started(), RETRYING],
    "retries_exhausted": [started(attempt=3), EXHAUSTED],
    "incompatible": [started(), INCOMPATIBLE],
    "feed_failing": [FEED_FAILING],
    "feed_recovered": [FEED_FAILING, FEED_RECOVERED],
    "fleet_exposed": [FLEET_EXPOSED],
    "fleet_covered": [FLEET_EXPOSED, FLEET_COVERED],
    "fleet_unreadable": [FLEET_UNREADABLE],
    "tag_deleted": [TAG_DELETED],
}
REPLIES: dict[str, Event] = {
    "published": PUBLISHED,
    "published_multi_arch": MULTI_ARCH,
    "retrying": RETRYING,
    "failed": FAILED,
    "retries_exhausted": EXHAUSTED,
    "incompatible": INCOMPATIBLE,
    "feed_recovered": FEED_RECOVERED,
}


def as_json(message: RenderedMessage) -> dict[str, Any]:
    return {"text": message.text, "blocks": message.blocks}


def check_golden(name: str, rendered: Any) -> None:
    path = GOLDEN / f"{name}.json"
    if os.environ.get("UPDATE_GOLDEN") == "1":
        path.parent.mkdir(exist_ok=True)
        path.write_text(json.dumps(rendered, indent=2, ensure_ascii=False) + "\n")
    assert path.exists(), f"{path} is missing: run with UPDATE_GOLDEN=1 and review it"
    assert rendered == json.loads(path.read_text()), f"{name} differs from {path}"


def check_blocks(blocks: list[dict[str, Any]]) -> None:
    assert 0 < len(blocks) <= 50
    for block in blocks:
        parsed = Block.parse(block)
        assert parsed is not None, f"not a Block Kit block: {block}"
        assert parsed.to_dict() == block  # to_dict() validates the limits, too


@pytest.mark.parametrize("name", sorted(MESSAGES))
def test_message_matches_its_golden_file(name: str) -> None:
    message = render_message(MESSAGES[name], REPOSITORY)
    check_blocks(message.blocks)
    check_golden(name, as_json(message))


def test_thread_replies_match_their_golden_file() -> None:
    replies = {name: render_thread_reply(e, REPOSITORY) for name, e in sorted(REPLIES.items())}
    for reply in replies.values():
        check_blocks(reply.blocks)
    check_golden("thread_replies", {name: as_json(reply) for name, reply in replies.items()})


def test_every_event_kind_renders_as_a_message_and_a_reply() -> None:
    for kind in EventKind:
        single = build_event(kind) if "feed" not in kind.value else feed_event(kind, 0)
        check_blocks(render_message([single], REPOSITORY).blocks)
        check_blocks(render_thread_reply(single, REPOSITORY).blocks)


def test_later_events_keep_what_earlier_ones_said() -> None:
    text = json.dumps(render_message([started(), PUBLISHED], REPOSITORY).blocks)
    # The published event repeats no job; the start event's job stays in the message.
    assert job_name(TAG, Arch.AMD64, 1) in text
    assert f"{REPOSITORY}:{TAG}" in text
    assert f"{REPOSITORY}@{DIGEST}" in text


def test_failures_say_what_to_do_next() -> None:
    for events in (MESSAGES["failed_with_log"], MESSAGES["retries_exhausted"]):
        message = render_message(events, REPOSITORY)
        text = json.dumps(message.blocks)
        assert f"/releasebot retry {TAG}" in text
        assert "releasebot build 580.105.08 4459.2.1 --force" in text
        assert f"/releasebot retry {TAG}" in message.text


def test_the_log_is_trimmed_to_its_last_lines_without_terminal_codes() -> None:
    text = json.dumps(render_message([started(), FAILED], REPOSITORY).blocks)
    assert "Error 1" in text
    assert "nvkms-0.c" not in text  # only the last lines
    assert "\\u001b" not in text


def test_chat_markup_in_values_is_escaped() -> None:
    evil = failure(
        EventKind.BUILD_FAILED,
        error="<!channel> & <https://evil.example|click> ```",
        log_tail="a <b> & c\n``` fence",
    )
    message = render_message([evil], REPOSITORY)
    text = json.dumps(message.blocks)
    assert "<!channel>" not in text
    assert "&lt;!channel&gt; &amp; &lt;https://evil.example|click&gt;" in text
    assert "a &lt;b&gt; &amp; c" in text
    assert "<!channel>" not in message.text
    log_block = next(b["text"]["text"] for b in message.blocks if "Last log" in json.dumps(b))
    assert log_block.count("```") == 2  # the log's own fence cannot close the block


def test_huge_values_stay_within_block_kit_limits() -> None:
    huge = failure(
        EventKind.BUILD_FAILED,
        error="E" * 10_000,
        log_tail="\n".join("L" * 5000 for _ in range(100)),
        jobs=[f"job-{n}" for n in range(200)],
    )
    long_tag = "5" * 112 + "-flatcar4459.2.1"
    huge = replace(huge, subject=long_tag)
    for message in (render_message([huge], REPOSITORY), render_thread_reply(huge, REPOSITORY)):
        check_blocks(message.blocks)
        for block in message.blocks:
            if block["type"] == "header":
                assert len(block["text"]["text"]) <= HEADER_MAX_CHARS
            if block["type"] == "section" and "text" in block:
                assert len(block["text"]["text"]) <= SECTION_MAX_CHARS
        assert len(message.text) <= 3000


def test_a_message_needs_an_event() -> None:
    with pytest.raises(ValueError, match="at least one event"):
        render_message([], REPOSITORY)
