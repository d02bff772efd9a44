"""The CLI's output: the same bytes as the token-by-token writers wrote, in one write.

The JSON and the tables used to be written by ``json.dump(value, out, indent=2)`` and one
``write`` per row (``print`` for the decisions: two per line); with ``PYTHONUNBUFFERED``
each write is a system call. The old writers are kept here, as they were, to prove on a
real plan (the demo's shipped feeds and simulated fleet, some tags already in the
registry, wired as ``releasebot demo`` wires it) that the new ones write the same bytes:
the targets' JSON and table, the coverage's JSON and table, the dry run's Job manifests
and the cycle's decision lines; and that whole commands write once (or once per part).
"""

from __future__ import annotations

import argparse
import io
import json
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from releasebot.cli import main, tables
from releasebot.cli.main import _print_report
from releasebot.cli.retention import format_report, print_report
from releasebot.config import load_settings
from releasebot.domain.fleet.coverage import Coverage, coverage_json
from releasebot.domain.targets.models import TargetRecord
from releasebot.logs import RedactSecrets
from releasebot.registry.memory import MemoryRegistry
from releasebot.service.reconcile import CycleReport, ReconcileService
from releasebot.service.retention import RetentionReport
from releasebot.wiring import demo_fleet_source, demo_settings, reconcile_service

NOW = datetime(2026, 12, 3, 9, 0, tzinfo=UTC)


class CountingStream(io.StringIO):
    """A text stream that counts the writes it was given."""

    def __init__(self) -> None:
        super().__init__()
        self.writes = 0

    def write(self, text: str) -> int:
        self.writes += 1
        return super().write(text)


def old_json(value: object) -> str:
    """How the CLI wrote JSON before: ``json.dump`` to the stream, then a newline."""
    out = io.StringIO()
    json.dump(value, out, indent=2)
    out.write("\n")
    return out.getvalue()


def old_table(rows: Sequence[Sequence[str]]) -> str:
    """How ``write_table`` wrote a table before: one write per row."""
    out = io.StringIO()
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        cells = (cell.ljust(width) for cell, width in zip(row, widths, strict=True))
        out.write("  ".join(cells).rstrip() + "\n")
    return out.getvalue()


def old_decisions(report: CycleReport) -> str:
    """How ``reconcile --once`` printed its decisions before: ``print`` per decision."""
    out = io.StringIO()
    for decision in report.decisions:
        job = f" [{decision.job}]" if decision.job else ""
        detail = f": {decision.detail}" if decision.detail else ""
        print(f"{decision.action} {decision.tag}{job}{detail}", file=out)
    return out.getvalue()


@dataclass(frozen=True)
class RealPlan:
    targets: list[TargetRecord]
    coverage: Coverage
    cycle: CycleReport
    """A dry-run cycle over the same store: its Job manifests and decisions."""


@pytest.fixture(scope="module")
def real_plan(tmp_path_factory: pytest.TempPathFactory) -> RealPlan:
    """The demo's plan, twice: a third of the tags pushed between, so that the second has
    published targets with digests beside missing ones."""
    settings = demo_settings(load_settings(None), tmp_path_factory.mktemp("demo"))
    registry = MemoryRegistry(settings.registry.repository)

    def plan() -> CycleReport:
        with reconcile_service(
            settings,
            lambda _outcome: None,
            cluster=False,
            registry=registry,
            fleet_source=demo_fleet_source(),
        ) as service:
            return service.plan()

    for record in plan().targets[::3]:
        registry.add_image(record.tag)
    report = plan()
    coverage = ReconcileService.coverage(report)
    assert coverage is not None
    assert coverage.nodes
    with reconcile_service(
        settings,
        lambda _outcome: None,
        dry_run=True,
        cluster=False,
        registry=registry,
        fleet_source=demo_fleet_source(),
    ) as service:
        cycle = service.cycle()
    assert cycle.manifests, "the dry run would launch nothing: no manifests to compare"
    return RealPlan(report.targets, coverage, cycle)


def test_the_plan_has_published_and_missing_targets(real_plan: RealPlan) -> None:
    states = {record.state.value for record in real_plan.targets}
    assert {"published", "missing"} <= states
    assert any(record.digest for record in real_plan.targets)


def test_the_targets_json_is_the_same_bytes_in_one_write(
    real_plan: RealPlan, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("releasebot.wiring.utc_now", lambda: NOW)
    out = CountingStream()
    tables.print_targets(real_plan.targets, "json", out)
    expected = old_json([tables.target_json(record, NOW) for record in real_plan.targets])
    assert out.getvalue() == expected
    assert out.writes == 1


def test_the_targets_table_is_the_same_bytes_in_one_write(
    real_plan: RealPlan, monkeypatch: pytest.MonkeyPatch
) -> None:
    shown: list[Sequence[Sequence[str]]] = []
    format_table = tables.format_table

    def spy(rows: Sequence[Sequence[str]]) -> str:
        shown.append(rows)
        return format_table(rows)

    monkeypatch.setattr(tables, "format_table", spy)
    out = CountingStream()
    tables.print_targets(real_plan.targets, "table", out)
    [rows] = shown
    assert len(rows) == len(real_plan.targets) + 1
    assert out.getvalue() == old_table(rows)
    assert out.writes == 1


def test_the_coverage_is_the_same_bytes_in_one_write(
    real_plan: RealPlan, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = CountingStream()
    tables.print_coverage(real_plan.coverage, "json", out)
    assert out.getvalue() == old_json(_with_no_proofs(coverage_json(real_plan.coverage)))
    assert out.writes == 1

    shown: list[Sequence[Sequence[str]]] = []
    format_table = tables.format_table
    monkeypatch.setattr(
        tables, "format_table", lambda rows: shown.append(rows) or format_table(rows)
    )
    out = CountingStream()
    tables.print_coverage(real_plan.coverage, "table", out)
    [rows] = shown
    ignored = "".join(
        f"ignored GPU node {node.name}: {node.reason}\n" for node in real_plan.coverage.ignored
    )
    assert out.getvalue() == old_table(rows) + ignored
    assert out.writes == 1


def _with_no_proofs(shown: dict[str, Any]) -> dict[str, Any]:
    for node in shown["nodes"]:
        node["proof"] = None
    return shown


def test_the_dry_run_manifests_and_decisions_are_the_same_bytes_in_one_write(
    real_plan: RealPlan, monkeypatch: pytest.MonkeyPatch
) -> None:
    for dry_run, expected in (
        (True, old_json(real_plan.cycle.manifests)),
        (False, old_decisions(real_plan.cycle)),
    ):
        out = CountingStream()
        monkeypatch.setattr(sys, "stdout", out)
        args = argparse.Namespace(dry_run=dry_run, quiet=True, redact=RedactSecrets())
        assert _print_report(real_plan.cycle, args) == 0
        monkeypatch.undo()
        assert out.getvalue() == expected
        assert out.writes == 1


def test_the_retention_report_is_written_once(real_plan: RealPlan) -> None:
    from releasebot.domain.fleet.retention import Deletion, Kept, RetentionPlan

    published = [record for record in real_plan.targets if record.digest]
    plan = RetentionPlan(
        delete=tuple(
            Deletion(r.tag, r.target.flatcar_version, "left every feed", r.digest)
            for r in published
        ),
        keep=tuple(Kept(r.tag, "a node runs it") for r in real_plan.targets),
    )
    report = RetentionReport(plan, applied=False, deleted=[])
    out = CountingStream()
    print_report(report, out)
    assert out.writes == 1
    assert out.getvalue() == format_report(report)
    lines = out.getvalue().splitlines()
    assert sum(line.startswith("would delete ") for line in lines) == len(published)
    assert lines[-1].startswith(f"{len(published)} tag(s) would delete")


def test_whole_commands_write_each_part_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``demo --format json``: one write; the tables: the targets, a title, the fleet."""
    for fmt, writes in (("json", 1), ("table", 3)):
        out = CountingStream()
        monkeypatch.setattr(sys, "stdout", out)
        code = main(["demo", "--quiet", "--dir", str(tmp_path / fmt), "--format", fmt])
        monkeypatch.undo()
        assert code == 0
        assert out.writes == writes
        if fmt == "json":
            assert set(json.loads(out.getvalue())) == {"targets", "fleet"}
        else:
            assert "The simulated fleet:" in out.getvalue()
