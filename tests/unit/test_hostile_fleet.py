"""What a hostile or broken cluster sends, as the domain and the fleet service take it.

Covers: ``parse_nodes`` shows a name that is not a valid Node name escaped (never as the
valid name it cleans to), tells apart Nodes shown alike (by uid, else by item number),
warns in one clean line and takes their ``address`` away; ``decide_gates`` gives a node
without an address no move at all (neither open nor close), and with ``hold`` opens
nothing new and leaves an open gate as it is; ``gate_hold`` holds for a listing cut short,
and for a skipped Node only where another node's OS tag can change a node's image (a
ClusterPolicy), not with NVIDIADrivers; retention deletes nothing while the view is
unsure. A ClusterPolicy whose version is not a driver version (a shell command, spaces,
control characters), or whose repository carries control characters, is named as such in
the node's note, escaped, whoever's repository it names: never ``foreign-repository``,
never cleaned into a value that looks valid, never in a target's tag. A URL no request
can carry (httpx2's ``InvalidURL``, no ``HTTPError``) is one refusal, not a traceback.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx2
import pytest

from releasebot.domain.fleet.coverage import Verdict, coverage_json, fleet_coverage
from releasebot.domain.fleet.gate import GateMove, decide_gates
from releasebot.domain.fleet.nodes import FleetNode, parse_nodes
from releasebot.domain.fleet.operator import OperatorView, parse_cluster_policy
from releasebot.domain.fleet.retention import Listing, RetentionInputs, plan_retention
from releasebot.domain.shared.errors import ClusterRejectedError
from releasebot.domain.targets.models import TargetState
from releasebot.edge.kube import kube_call
from releasebot.service.fleet import FleetSnapshot, gate_hold
from tests.hostile.conftest import TERMINAL_MOVERS
from tests.support.fleetnodes import gpu_node
from tests.unit.test_coverage_and_gate import PENDING, cover
from tests.unit.test_fleet_plan import cluster_policy, plan

T0 = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


def listed(*raw: dict[str, Any]) -> tuple[list[Any], tuple[str, ...]]:
    nodes, warnings = parse_nodes(list(enumerate(raw, start=1)))
    return list(nodes), warnings


def named(name: str, uid: str | None = None, **kwargs: Any) -> dict[str, Any]:
    raw = gpu_node("gpu-x", "4593.2.4", **kwargs)
    raw["metadata"]["name"] = name
    if uid is not None:
        raw["metadata"]["uid"] = uid
    return raw


def test_a_name_that_cleans_to_another_is_shown_escaped_and_never_addressed() -> None:
    nodes, warnings = listed(named("gpu-1"), named("gpu-\x1b[0m1"))
    assert [(n.name, n.address) for n in nodes] == [
        ("gpu-1", "gpu-1"),
        ("'gpu-\\x1b[0m1'", None),
    ]
    [line] = warnings
    assert line == (
        "item 2 of the Node list is named 'gpu-\\x1b[0m1', which is not a valid Node name "
        "(it reads as gpu-1, another listed Node): shown escaped, and releasebot writes "
        "nothing to it"
    )
    assert not TERMINAL_MOVERS.search(line)


def test_a_name_listed_twice_is_shown_apart_by_uid_and_neither_is_addressed() -> None:
    nodes, warnings = listed(named("gpu-1", "u-1"), named("gpu-2"), named("gpu-1", "u-2"))
    assert [(n.name, n.address) for n in nodes] == [
        ("gpu-1 (uid u-1)", None),
        ("gpu-2", "gpu-2"),
        ("gpu-1 (uid u-2)", None),
    ]
    [line] = warnings
    assert line.startswith("2 Nodes of the listing (items 1, 3) are shown as gpu-1: shown apart")
    assert "releasebot writes to none of them" in line


def test_without_distinct_uids_the_item_number_tells_them_apart() -> None:
    nodes, _ = listed(named("gpu-1", "u"), named("gpu-1", "u"), {"metadata": {}}, {})
    assert [n.name for n in nodes] == [
        "gpu-1 (item 1)",
        "gpu-1 (item 2)",
        "(unnamed) (item 3)",
        "(unnamed) (item 4)",
    ]


def test_a_shown_name_that_already_reads_like_a_disambiguated_one_stays_apart() -> None:
    nodes, _ = listed(named("gpu-1"), named("gpu-1"), {"metadata": {"name": "gpu-1 (item 1)"}})
    assert len({n.name for n in nodes}) == 3


def waiting(name: str = "gpu-0", **kwargs: Any) -> dict[str, Any]:
    return gpu_node(name, "4593.2.4", pending="4593.2.5", before_reboot=True, **kwargs)


def test_a_node_without_an_address_gets_no_move_even_when_ready_or_stale() -> None:
    published = cover({PENDING: TargetState.PUBLISHED}, waiting())
    [node] = parse_nodes([(1, waiting()), (2, waiting())])[0][:1]
    assert isinstance(node, FleetNode)
    assert node.address is None
    [decision] = decide_gates([node], published, operator_known=True)
    assert decision.move is None
    assert "releasebot writes nothing to it" in decision.why
    missing = cover({PENDING: TargetState.MISSING}, waiting())
    opened = parse_nodes([(1, waiting(gate="true", gate_version="4593.2.5"))] * 2)[0][0]
    [decision] = decide_gates([opened], missing, operator_known=True)
    assert decision.move is None  # not even a close: it may be another node's gate


def test_a_hold_opens_nothing_new_and_leaves_an_open_gate_as_it_is() -> None:
    published = cover({PENDING: TargetState.PUBLISHED}, waiting())
    nodes = parse_nodes([(1, waiting())])[0]
    [free] = decide_gates(nodes, published, operator_known=True)
    assert free.move is GateMove.OPEN
    [held] = decide_gates(nodes, published, operator_known=True, hold="the listing was cut")
    assert (held.move, held.why) == (None, "the listing was cut")
    stale = parse_nodes([(1, waiting(gate="true", gate_version="4593.2.4"))])[0]
    [kept] = decide_gates(stale, published, operator_known=True, hold="cut")
    assert kept.move is None
    missing = cover({PENDING: TargetState.MISSING}, waiting())
    [closed] = decide_gates(stale, missing, operator_known=True, hold="cut")
    assert closed.move is GateMove.CLOSE  # closing is always safe


def policy(*, crd: bool) -> OperatorView:
    driver = {"repository": "r.test/x", "image": "driver", "version": "580.178.04"}
    raw = {"metadata": {"name": "cluster-policy"}, "spec": {"driver": driver}}
    if crd:
        driver["useNvidiaDriverCRD"] = True  # type: ignore[assignment]
    return OperatorView((parse_cluster_policy(raw),), ())


def test_the_gate_holds_for_a_cut_listing_and_for_a_skipped_node_under_a_cluster_policy() -> None:
    sure = FleetSnapshot((), policy(crd=False))
    assert gate_hold(sure) is None
    cut = FleetSnapshot((), policy(crd=True), unsure="cut short", cut=True)
    assert gate_hold(cut) is not None
    skipped = FleetSnapshot((), policy(crd=False), unsure="1 item skipped")
    hold = gate_hold(skipped)
    assert hold is not None
    assert "ClusterPolicy" in hold
    pools = FleetSnapshot((), policy(crd=True), unsure="1 item skipped")
    assert gate_hold(pools) is None  # a node's own labels decide its image


def test_retention_deletes_nothing_while_the_view_is_unsure() -> None:
    gone = [Listing("stable", "4230.2.4", False, T0 - timedelta(days=100))]
    inputs = RetentionInputs(
        tags=["580.105.08-flatcar4230.2.4"], nodes=(), listings=gone, targets=()
    )
    assert [d.tag for d in plan_retention(inputs, now=T0).delete] == ["580.105.08-flatcar4230.2.4"]
    unsure = RetentionInputs(
        tags=["580.105.08-flatcar4230.2.4"],
        nodes=(),
        listings=gone,
        targets=(),
        fleet_unsure="1 item(s) of the Node list could not be read",
    )
    held = plan_retention(unsure, now=T0)
    assert held.delete == ()
    assert held.held == (
        "the fleet view is unsure (1 item(s) of the Node list could not be read): deleting nothing"
    )


# -- an operator object whose version is not a driver version ------------------------------

OURS = "registry.example.com/nvidia"


@pytest.mark.parametrize(
    ("version", "shown"),
    [
        ("580.178.04; rm -rf /", "'580.178.04; rm -rf /'"),
        ("580.178.04 beta", "'580.178.04 beta'"),
        ("580.178.04\x1b[31m", "'580.178.04\\x1b[31m'"),
        ("580\n178", "'580\\n178'"),
    ],
)
def test_a_version_that_is_not_a_driver_version_is_named_not_called_foreign(
    version: str, shown: str
) -> None:
    node = gpu_node("gpu-0", "4593.2.4")
    for repository in (OURS, "nvcr.io/nvidia"):  # whoever's repository: the object is broken
        result = plan(node, operator=cluster_policy(repository, version))
        coverage = fleet_coverage(result, {})
        [entry] = coverage.nodes
        assert entry.verdict is Verdict.MISSING, entry
        assert entry.note == (
            f"ClusterPolicy/cluster-policy names driver version {shown}, which is not a "
            "driver version"
        )
        assert not TERMINAL_MOVERS.search(json.dumps(coverage_json(coverage), ensure_ascii=False))
        assert all(version not in target.tag for target in result.targets)


def test_a_repository_with_control_characters_is_never_cleaned_into_ours() -> None:
    node = gpu_node("gpu-0", "4593.2.4")
    result = plan(node, operator=cluster_policy(OURS + "\x1b[0m", "580.178.04"))
    [entry] = fleet_coverage(result, {}).nodes
    assert entry.verdict is Verdict.MISSING
    assert entry.note is not None
    assert "names driver repository 'registry.example.com/nvidia\\x1b[0m'" in entry.note


def test_a_valid_version_from_releasebots_repository_is_still_ours() -> None:
    node = gpu_node("gpu-0", "4593.2.4")
    result = plan(node, operator=cluster_policy(OURS, "580.178.04"))
    [entry] = fleet_coverage(result, {}).nodes
    assert entry.verdict is Verdict.MISSING  # not built yet, and ours
    assert entry.reference == "registry.example.com/nvidia/driver:580.178.04-flatcar4593.2.4"
    foreign = plan(node, operator=cluster_policy("nvcr.io/nvidia", "580.178.04"))
    [other] = fleet_coverage(foreign, {}).nodes
    assert other.verdict is Verdict.FOREIGN


def test_a_url_no_request_can_carry_is_one_refusal_not_a_traceback() -> None:
    def send() -> None:
        raise httpx2.InvalidURL("Invalid non-printable ASCII character in URL, '\\x1b'")

    with pytest.raises(ClusterRejectedError) as caught:
        kube_call("patch node 'gpu-\\x1b[0m1'", send, sleep=lambda _: None)
    assert str(caught.value).startswith("kubernetes patch node 'gpu-\\x1b[0m1': not a valid")
    assert not TERMINAL_MOVERS.search(str(caught.value))
