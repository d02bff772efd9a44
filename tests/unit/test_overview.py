"""The coverage page's view (``domain/overview.py``), pure: which nodes are current, each
node's verdict from the stored targets, the banner's words and its "since", the matrix's
rows, columns and filters, a target's detail (Slack link, signature, log tail) and the
removal of control characters from stored text."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

from releasebot.domain.builds import BuildRecord, BuildState, FailureReason
from releasebot.domain.events import EventKind, MessageRef, StoredEvent, build_event
from releasebot.domain.fleet_records import FleetObservation, FleetRecord
from releasebot.domain.models import FeedState, TargetRecord, TargetState, Validators
from releasebot.domain.overview import (
    STATE_WORDS,
    cell_words,
    current_fleet,
    feeds_view,
    fleet_view,
    matrix_view,
    public_url,
    slack_link,
    target_detail,
)
from releasebot.domain.versions import Arch
from tests.support.targets import make_target

NOW = datetime(2026, 9, 1, 12, 0, tzinfo=UTC)
HOUR = timedelta(hours=1)


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
    **fields: object,
) -> TargetRecord:
    record = TargetRecord.new(make_target(driver=driver, flatcar=flatcar), now=NOW - 20 * HOUR)
    return replace(record, state=state, **fields)


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
    }
    assert banner["text"] == (
        "2 GPU nodes on 1 Flatcar version: NOT covered: 2 nodes run 4593.2.5 without an "
        f"image (missing) since {(NOW - 2 * HOUR).isoformat()}"
    )
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
    assert "1 node will reboot into 4628.0.0 without an image (failed)" in fleet["banner"]["text"]
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
