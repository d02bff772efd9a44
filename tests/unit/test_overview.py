"""The coverage page's view (``domain/views/overview.py``, ``overview_fleet.py``,
``overview_words.py``), pure: which nodes are current, each
node's verdict from its own stored targets (not the channel policy's other drivers), the
banner's words, the images it names with what to do, the count of nodes without theirs and
its "since", the fleet's view from the targets of the nodes' versions alone (what the
page reads), the node counts per version, the matrix's rows, columns and filters, time to
publish only for what releasebot's builds published, a target's detail (Slack link,
signature, log tail, each attempt's start and duration) and the removal of control
characters from stored text."""

from __future__ import annotations

import re
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from releasebot.cli.tables import target_json
from releasebot.domain.fleet.records import FleetObservation, FleetRecord
from releasebot.domain.shared.versions import Arch
from releasebot.domain.targets.builds import BuildRecord, BuildState, FailureReason
from releasebot.domain.targets.events import EventKind, MessageRef, StoredEvent, build_event
from releasebot.domain.targets.models import (
    FeedState,
    FlatcarRelease,
    TargetReason,
    TargetRecord,
    TargetState,
    Validators,
)
from releasebot.domain.views.overview import (
    feeds_view,
    matrix_view,
    public_url,
    slack_link,
    target_detail,
)
from releasebot.domain.views.overview_fleet import (
    BANNER_HELP,
    current_fleet,
    fleet_versions,
    fleet_view,
    node_counts,
    tag_action,
)
from releasebot.domain.views.overview_words import STATE_WORDS, cell_words
from tests.support.targets import make_target

NOW = datetime(2026, 9, 1, 12, 0, tzinfo=UTC)
HOUR = timedelta(hours=1)
MINUTE = timedelta(minutes=1)


def node(
    name: str,
    version: str | None = "4593.2.5",
    *,
    pending: str | None = None,
    arch: str = "amd64",
    first: datetime = NOW - 10 * HOUR,
    last: datetime = NOW,
    gpu: bool = True,
    ignored: str | None = None,
) -> FleetRecord:
    state = FleetObservation(name, version, "6.12.102-flatcar", arch, gpu, pending, ignored)
    return FleetRecord(state, first, last)


def target(
    driver: str = "580.178.04",
    flatcar: str = "4593.2.5",
    state: TargetState = TargetState.PUBLISHED,
    reasons: frozenset[TargetReason] = frozenset(),
    **fields: object,
) -> TargetRecord:
    planned = replace(make_target(driver=driver, flatcar=flatcar), reasons=reasons)
    record = TargetRecord.new(planned, now=NOW - 20 * HOUR)
    return replace(record, state=state, **fields)


def job(
    record: TargetRecord,
    attempt: int = 1,
    state: BuildState = BuildState.SUCCEEDED,
    arch: Arch = Arch.AMD64,
    created: datetime = NOW - 2 * HOUR,
    finished: datetime | None = NOW - HOUR,
) -> BuildRecord:
    return BuildRecord(
        tag=record.tag,
        arch=arch,
        attempt=attempt,
        job_name=f"rb-{record.tag}-{arch.value}-{attempt}",
        destination_tag=record.tag,
        state=state,
        created_at=created,
        finished_at=finished,
    )


def test_only_the_latest_listings_nodes_are_current() -> None:
    gone = node("gone", last=NOW - HOUR)
    assert current_fleet([gone, node("a"), node("b")]) == [node("a"), node("b")]
    assert current_fleet([]) == []


def test_all_covered_and_nothing_seen() -> None:
    fleet = fleet_view(
        [node("a"), node("b", "4593.2.4")], [target(), target(flatcar="4593.2.4")], gate=False
    )
    assert fleet["banner"] == {
        "covered": True,
        "text": "2 GPU nodes on 2 Flatcar versions: all covered",
        "uncovered": [],
        "uncovered_nodes": 0,
        "help": None,
    }
    assert fleet_view([], [], gate=False)["banner"]["text"] == "No GPU node seen yet"


def test_a_node_whose_image_is_missing_is_uncovered_since_the_later_of_both() -> None:
    # the node runs 4593.2.5 since 10 h; the image stopped being published 2 h ago
    lost = target(state=TargetState.MISSING, published_at=NOW - 5 * HOUR, updated_at=NOW - 2 * HOUR)
    fleet = fleet_view([node("a"), node("b")], [lost], gate=False)
    banner = fleet["banner"]
    assert banner["covered"] is False
    [entry] = banner["uncovered"]
    assert entry == {
        "flatcar_version": "4593.2.5",
        "pending": False,
        "verdict": "missing",
        "nodes": ["a", "b"],
        "since": (NOW - 2 * HOUR).isoformat(),
        "tags": [
            {
                "tag": lost.tag,
                "state": "missing",
                "words": "missing",
                "action": "the next cycle builds it; if none does, see docs/operations.md, "
                "“Required tags not published”",
            }
        ],
    }
    assert banner["text"] == (
        f"2 of 2 GPU nodes on 1 Flatcar version NOT covered: 2 nodes run 4593.2.5 without "
        f"{lost.tag} (missing) since {(NOW - 2 * HOUR).isoformat()}"
    )
    assert banner["uncovered_nodes"] == 2
    assert "GPU nodes without a driver image" in banner["help"]
    # a node that arrived after the image went missing: since the node arrived
    late = fleet_view([node("c", first=NOW - HOUR)], [lost], gate=False)
    assert late["banner"]["uncovered"][0]["since"] == (NOW - HOUR).isoformat()


def test_a_version_without_any_target_is_missing_and_never_published_counts_from_planning() -> None:
    fleet = fleet_view([node("a", "4459.2.4")], [target()], gate=False)
    assert fleet["nodes"][0]["verdict"] == "missing"
    building = target(state=TargetState.BUILDING)
    fleet = fleet_view([node("a", first=NOW - 30 * HOUR)], [building], gate=False)
    [entry] = fleet["banner"]["uncovered"]
    assert entry["verdict"] == "building"
    assert entry["since"] == (NOW - 20 * HOUR).isoformat()  # first planned, never published


def test_a_pending_reboot_without_an_image_and_the_gate() -> None:
    records = [target(), target(flatcar="4628.0.0", state=TargetState.FAILED)]
    fleet = fleet_view([node("a", pending="4628.0.0"), node("b")], records, gate=True)
    [entry] = fleet["banner"]["uncovered"]
    assert (entry["flatcar_version"], entry["pending"], entry["nodes"]) == ("4628.0.0", True, ["a"])
    failed_tag = records[1].tag
    assert fleet["banner"]["text"].startswith(
        f"1 of 2 GPU nodes on 1 Flatcar version NOT covered: 1 node will reboot into 4628.0.0 "
        f"without {failed_tag} (failed) since"
    )
    [missing] = entry["tags"]
    assert missing["action"] == f"fix the cause in its detail, then /releasebot retry {failed_tag}"
    gates = {n["name"]: n["gate"] for n in fleet["nodes"]}
    assert gates == {
        "a": {"ready": False, "text": "held: the image for 4628.0.0 is failed"},
        "b": None,
    }
    # a building pending image is no exposure (it has a prospect), but the gate holds
    records[1] = replace(records[1], state=TargetState.BUILDING)
    fleet = fleet_view([node("a", pending="4628.0.0")], records, gate=True)
    assert fleet["banner"]["covered"] is True
    assert fleet["nodes"][0]["gate"]["ready"] is False
    records[1] = replace(records[1], state=TargetState.PUBLISHED)
    fleet = fleet_view([node("a", pending="4628.0.0")], records, gate=True)
    assert fleet["nodes"][0]["gate"]["ready"] is True
    assert (
        fleet_view([node("a", pending="4628.0.0")], records, gate=False)["nodes"][0]["gate"] is None
    )


FLEET = frozenset({TargetReason.FLEET})
CHANNEL = frozenset({TargetReason.CHANNEL})


@pytest.mark.parametrize("other", list(TargetState))
def test_a_driver_only_the_channel_policy_wants_is_not_a_nodes_image(other: TargetState) -> None:
    """Whatever state another driver's image is in, a node whose own image is published is
    covered, and the banner counts and names only what the uncovered nodes miss."""
    own = target(reasons=FLEET | CHANNEL)
    policy_only = target("570.195.03", state=other, reasons=CHANNEL)
    fleet = fleet_view([node("a"), node("b")], [own, policy_only], gate=False)
    assert fleet["banner"]["covered"] is True, other
    assert [n["verdict"] for n in fleet["nodes"]] == ["verified", "verified"]
    assert fleet["nodes"][0]["tags"] == [own.tag]


def test_the_headline_counts_only_the_nodes_without_their_own_image() -> None:
    records = [
        target(flatcar="4593.2.5", reasons=FLEET),
        target("570.195.03", "4593.2.5", TargetState.FAILED, reasons=CHANNEL),
        target(flatcar="4593.2.4", state=TargetState.FAILED, reasons=FLEET),
        target(flatcar="4628.0.0", state=TargetState.INCOMPATIBLE, reasons=FLEET),
    ]
    nodes = [
        node("ok-1"),
        node("ok-2"),
        node("old", "4593.2.4"),
        node("both", "4593.2.4", pending="4628.0.0"),
    ]
    banner = fleet_view(nodes, records, gate=False)["banner"]
    assert banner["uncovered_nodes"] == 2  # "both" once, though on two entries
    assert banner["text"].startswith("2 of 4 GPU nodes on 2 Flatcar versions NOT covered: ")
    named = {tag["tag"]: tag for entry in banner["uncovered"] for tag in entry["tags"]}
    assert set(named) == {records[2].tag, records[3].tag}  # never the policy's 570 failure
    assert named[records[2].tag]["action"].endswith(f"/releasebot retry {records[2].tag}")
    assert "Incompatible" in named[records[3].tag]["action"]
    assert "570.195.03" not in banner["text"]


def test_without_fleet_reasons_every_required_target_of_the_version_counts() -> None:
    """Rows written before the fleet view, or with it off: no target says whose it is."""
    records = [target(), target("570.195.03", state=TargetState.FAILED)]
    banner = fleet_view([node("a")], records, gate=False)["banner"]
    assert banner["uncovered_nodes"] == 1
    assert [t["tag"] for t in banner["uncovered"][0]["tags"]] == [records[1].tag]


def test_a_version_with_no_planned_image_says_so() -> None:
    banner = fleet_view([node("a", "4459.2.4")], [target()], gate=False)["banner"]
    assert banner["uncovered"][0]["tags"] == []
    assert "without an image (missing: none planned) since" in banner["text"]


def test_time_to_publish_only_for_what_releasebots_builds_published() -> None:
    released = NOW - 146 * 24 * HOUR
    release = FlatcarRelease(
        version=make_target().flatcar_version,
        channel="stable",
        arches=frozenset({Arch.AMD64}),
        kernel="6.12.102",
        released_at=released,
        content_sha256="0" * 64,
    )
    releases = {"4593.2.5": release}
    found = target(published_at=NOW, attempts=0)  # check_registry found it, never built
    built = target("570.195.03", published_at=NOW - HOUR, attempts=1)
    rebuilt_failed = target("575.64.05", published_at=NOW, attempts=2)
    builds = [
        job(built),
        job(rebuilt_failed, 1),
        job(rebuilt_failed, 2, BuildState.FAILED),  # the last attempt did not publish it
    ]
    matrix = matrix_view([found, built, rebuilt_failed], [], releases, builds=builds)
    cells = {c["tag"]: c for c in matrix["rows"][0]["cells"]}
    assert cells[found.tag]["published_after_seconds"] is None
    assert cells[found.tag]["found_in_registry"] is True
    assert cells[rebuilt_failed.tag]["published_after_seconds"] is None
    assert cells[built.tag]["published_after_seconds"] == int(
        (NOW - HOUR - released).total_seconds()
    )
    assert cells[built.tag]["found_in_registry"] is False
    detail = target_detail(found, [], [], None, repository="r.test/d", release=release)
    assert detail["found_in_registry"] is True
    shown = target_detail(built, [job(built)], [], None, repository="r.test/d", release=release)
    assert shown["found_in_registry"] is False


def test_each_attempt_says_when_it_started_and_how_long_it_took() -> None:
    record = target(state=TargetState.BUILDING, attempts=2)
    builds = [
        job(record, 1, BuildState.FAILED, created=NOW - 3 * HOUR, finished=NOW - 2 * HOUR),
        job(record, 1, BuildState.FAILED, Arch.ARM64, NOW - 3 * HOUR, NOW - 150 * MINUTE),
        job(record, 2, BuildState.RUNNING, created=NOW - HOUR, finished=None),
    ]
    detail = target_detail(record, builds, [], None, repository="r.test/d", release=None)
    first, second = detail["builds"]
    assert first["started_at"] == (NOW - 3 * HOUR).isoformat()
    assert first["finished_at"] == (NOW - 2 * HOUR).isoformat()  # the last Job to end
    assert first["duration_seconds"] == 3600
    assert (second["started_at"], second["finished_at"]) == ((NOW - HOUR).isoformat(), None)
    assert second["duration_seconds"] is None


def test_an_arm64_node_needs_an_arm64_build_and_ignored_nodes_are_listed() -> None:
    fleet = fleet_view(
        [
            node("grace", arch="arm64"),
            node("ubuntu", None, ignored="runs 'ubuntu22.04'"),
            node("cpu", gpu=False),
        ],
        [target()],  # amd64 only
        gate=False,
    )
    assert [n["name"] for n in fleet["nodes"]] == ["grace"]
    assert fleet["nodes"][0]["verdict"] == "missing"
    assert fleet["ignored"] == [{"name": "ubuntu", "reason": "runs 'ubuntu22.04'"}]


def test_the_fleet_needs_only_the_targets_of_the_versions_its_nodes_run_or_reboot_into() -> None:
    nodes = [
        node("a", pending="4628.0.0"),
        node("b", "4459.2.4"),
        node("old", "4081.3.6", last=NOW - HOUR),  # not in the latest listing
        node("cpu", "4230.2.4", gpu=False),
        node("u", None, ignored="not Flatcar"),
    ]
    versions = ("4593.2.5", "4628.0.0", "4459.2.4", "4081.3.6", "4230.2.4", "4152.2.3")
    states = (TargetState.PUBLISHED, TargetState.FAILED, TargetState.BUILDING)
    records = [
        target(driver, version, states[index % 3], frozenset({TargetReason.FLEET}))
        for index, (version, driver) in enumerate(
            (v, d) for v in versions for d in ("580.178.04", "570.195.03")
        )
    ]
    assert fleet_versions(nodes) == {"4593.2.5", "4628.0.0", "4459.2.4"}
    wanted = fleet_versions(nodes)
    only = [r for r in records if r.target.flatcar_version.text in wanted]
    for gate in (False, True):
        assert fleet_view(nodes, only, gate=gate) == fleet_view(nodes, records, gate=gate)
    assert fleet_versions([node("cpu", gpu=False), node("u", None, ignored="x")]) == set()
    assert node_counts(nodes) == ({"4593.2.5": 1, "4459.2.4": 1}, {"4628.0.0": 1})


def test_the_matrix_rows_columns_counts_and_filters() -> None:
    records = [
        target("580.178.04", "4081.3.10", published_at=NOW),
        target("580.178.04", "4081.3.9", TargetState.FAILED),
        target("570.195.03", "4081.3.9", TargetState.RETRYING, attempts=3),
        replace(target("595.1.1", "4081.3.9"), required=False),  # dropped from the plan
    ]
    matrix = matrix_view(records, [node("a", "4081.3.9", pending="4081.3.10")], {})
    assert matrix["drivers"] == ["580.178.04", "570.195.03"]
    rows = matrix["rows"]
    assert [row["flatcar_version"] for row in rows] == ["4081.3.10", "4081.3.9"]
    assert [c and c["words"] for c in rows[1]["cells"]] == ["failed", "retrying (attempt 3)"]
    assert rows[0]["cells"][1] is None
    assert (rows[1]["nodes_running"], rows[0]["nodes_pending"]) == (1, 1)
    assert rows[0]["known"] is False  # no release given
    assert matrix["counts"]["failed"] == 1
    failed_only = matrix_view(records, [], {}, state=TargetState.FAILED)
    assert [row["flatcar_version"] for row in failed_only["rows"]] == ["4081.3.9"]
    by_driver = matrix_view(records, [], {}, driver="570.195.03")
    assert by_driver["drivers"] == ["570.195.03"]
    by_row = matrix_view(records, [], {}, flatcar="4081.3.10")
    assert len(by_row["rows"]) == 1


def test_a_targets_detail_and_hostile_text() -> None:
    record = target(
        state=TargetState.FAILED, attempts=1, last_error="bad\x1b[31m thing\r\nhere", digest=None
    )
    build = BuildRecord(
        tag=record.tag,
        arch=Arch.AMD64,
        attempt=1,
        job_name="rb-job-1",
        destination_tag=record.tag,
        state=BuildState.FAILED,
        created_at=NOW,
        reason=FailureReason.EXIT_CODE,
        message="exit\x07 2",
        log_tail="line one\x1b[0m\nline <b>two</b>\u202e",
    )
    published = replace(record, state=TargetState.PUBLISHED, digest="sha256:" + "a" * 64)
    event = build_event(EventKind.TAG_PUBLISHED, published, NOW, [build], 3, signed_by="SHA256:k")
    stored = StoredEvent(1, event)
    ref = MessageRef(event.message_key, "C0123ABC", "1764633600.000100")
    detail = target_detail(published, [build], [stored], ref, repository="r.test/d", release=None)
    assert detail["pull"] == "r.test/d@sha256:" + "a" * 64
    assert detail["slack"] == "https://slack.com/archives/C0123ABC/p1764633600000100"
    assert (detail["signed"], detail["key_fingerprint"]) == (True, "SHA256:k")
    job = detail["builds"][0]["jobs"][0]
    # control characters go (ESC becomes a space, as untrusted.clean does), lines stay
    assert job["log_tail"] == "line one\nline <b>two</b>"
    assert "\x07" not in job["message"]
    unsigned = target_detail(record, [], [], None, repository="r.test/d", release=None)
    assert unsigned["last_error"] == "bad thing here"
    assert (unsigned["signed"], unsigned["slack"]) == (False, None)
    assert unsigned["pull"] == f"r.test/d:{record.tag}"
    assert slack_link(MessageRef("k", "C1/../x", "1.2")) is None
    assert slack_link(MessageRef("k", "C1", "1.2<script>")) is None


def test_cell_words_and_feeds() -> None:
    assert cell_words(target(state=TargetState.WAITING)) == "waiting for inputs"
    assert cell_words(target(state=TargetState.BUILDING, attempts=1)) == "building"
    feed = FeedState(
        "nvidia",
        "https://x.test/n.json",
        Validators(),
        NOW,
        NOW - HOUR,
        None,
        "boom\x1b]0;title\x07",
        NOW,
        3,
    )
    [shown] = feeds_view([feed])["feeds"]
    assert shown["last_error"] == "boom"
    assert shown["healthy"] is False
    assert shown["consecutive_failures"] == 3
    mirror = replace(feed, url="https://user:s3cret@mirror.test:8443/r.json?token=abc#x")
    assert feeds_view([mirror])["feeds"][0]["url"] == "https://mirror.test:8443/r.json"
    assert public_url("file:///srv/feeds/releases-stable.json") == (
        "file:///srv/feeds/releases-stable.json"
    )


def test_every_target_state_has_words_for_its_cell() -> None:
    """A state added to the lifecycle without words would break the page on its first cell."""
    assert set(STATE_WORDS) == set(TargetState)
    for state in TargetState:
        record = replace(TargetRecord.new(make_target(), now=NOW), state=state, attempts=2)
        assert cell_words(record)


def test_stored_text_with_non_ascii_digits_is_never_taken_for_a_number() -> None:
    """``"²".isdigit()`` is true and ``int("²")`` raises: stored text is hostile."""
    assert slack_link(MessageRef(message_key="k", channel="C0123", ts="²23.4")) is None
    assert slack_link(MessageRef(message_key="k", channel="Cé01", ts="123.4")) is None
    assert slack_link(MessageRef(message_key="k", channel="C0123", ts="1700000000.000100")) == (
        "https://slack.com/archives/C0123/p1700000000000100"
    )


def test_every_section_the_banner_points_to_exists_in_the_operations_guide() -> None:
    """The banner sends the person on call to sections of docs/operations.md by name: a
    renamed section would leave them with nothing to find."""
    guide = (Path(__file__).resolve().parents[2] / "docs" / "operations.md").read_text()
    headings = [line.lstrip("#").strip() for line in guide.splitlines() if line.startswith("#")]
    texts = [BANNER_HELP] + [tag_action(target(state=state)) for state in TargetState]
    named = {name for shown in texts for name in re.findall(r"“([^”]+)”", shown)}
    assert len(named) >= 3
    for name in named:
        assert any(heading.startswith(name) for heading in headings), name


def test_reasons_are_strongest_first_on_the_page_its_api_and_the_cli() -> None:
    every = frozenset(TargetReason)
    record = target(reasons=every)
    strongest_first = ["pending-reboot", "fleet", "channel"]
    [row] = matrix_view([record], [], {})["rows"]
    assert row["cells"][0]["reasons"] == strongest_first
    detail = target_detail(record, [], [], None, repository="r.test/d", release=None)
    assert detail["reasons"] == strongest_first
    assert target_json(record, NOW)["reasons"] == strongest_first
    assert target_json(target(), NOW)["reasons"] == []
