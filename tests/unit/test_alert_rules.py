"""The shipped alerts (``config/components/alerts``) and dashboard
(``config/components/dashboard``).

Covers: ``promtool check rules`` accepts the PrometheusRule's groups (expressions and the
annotations' templates), and ``promtool test rules`` runs
``tests/data/prometheus/alerts-test.yaml``: every alert fires and resolves on series shaped
like releasebot's; that file tests every alert, each firing once and quiet before and after
(and a changed threshold makes it fail); every alert has a summary, a
description, a severity and a ``runbook_url`` whose anchor is a heading of
docs/operations.md; rules and dashboard queries name only series ``ServiceMetrics``
exports; the dashboard takes its data source from the ``datasource`` variable, every panel
has a query and a unique id, and the panels do not overlap.

Debian's ``prometheus`` package ships ``promtool``; without it the promtool tests are
skipped here, and fail in CI. What a real Prometheus makes of them against a real
``releasebot run``: ``tests/integration/test_prometheus.py``.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import yaml

from tests.support.prometheus import (
    OPERATIONS,
    PROMTOOL_TESTS,
    SERIES,
    alerts,
    dashboard,
    dashboard_queries,
    exported_series,
    github_anchors,
    panels,
    rule_groups,
    tool,
    write_rules,
)

RUNBOOKS = "https://releasebot.example.com/docs/operations.md#"


def summaries_only(groups: list[dict[str, object]]) -> list[dict[str, object]]:
    """The groups with ``summary`` as the only annotation (see alerts-test.yaml)."""
    trimmed = yaml.safe_load(yaml.safe_dump(groups))
    for group in trimmed:
        for rule in group["rules"]:
            rule["annotations"] = {"summary": rule["annotations"]["summary"]}
    result: list[dict[str, object]] = trimmed
    return result


def family(name: str) -> str:
    return re.sub(r"_(bucket|sum|count)$", "", name)


def promtool(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [tool("promtool"), *args], cwd=cwd, capture_output=True, text=True, timeout=120, check=False
    )


def test_promtool_accepts_every_rule_and_its_templates(tmp_path: Path) -> None:
    rules = write_rules(tmp_path / "rules.yaml", rule_groups())
    result = promtool("check", "rules", str(rules), cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {len(alerts())} rules found" in result.stdout


def test_promtool_fires_and_resolves_every_alert(tmp_path: Path) -> None:
    write_rules(tmp_path / "rules.yaml", summaries_only(rule_groups()))
    shutil.copy(PROMTOOL_TESTS, tmp_path / "alerts-test.yaml")
    result = promtool("test", "rules", "alerts-test.yaml", cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


def test_promtool_would_catch_a_wrong_threshold(tmp_path: Path) -> None:
    """The unit tests can fail: a rule that fires later than it should is caught."""
    groups = summaries_only(rule_groups())
    for group in groups:
        for rule in group["rules"]:  # type: ignore[attr-defined]
            if rule["alert"] == "ReleasebotRequiredTagsMissing":
                rule["for"] = "7h"
    write_rules(tmp_path / "rules.yaml", groups)
    shutil.copy(PROMTOOL_TESTS, tmp_path / "alerts-test.yaml")
    result = promtool("test", "rules", "alerts-test.yaml", cwd=tmp_path)
    assert result.returncode != 0
    assert "ReleasebotRequiredTagsMissing" in result.stdout + result.stderr


def test_the_promtool_tests_fire_and_resolve_every_alert() -> None:
    cases = yaml.safe_load(PROMTOOL_TESTS.read_text(encoding="utf-8"))["tests"]
    checks: dict[str, list[tuple[str, bool]]] = {}
    for case in cases:
        for check in case["alert_rule_test"]:
            checks.setdefault(check["alertname"], []).append(
                (check["eval_time"], bool(check["exp_alerts"]))
            )
    assert set(checks) == set(alerts())
    for name, evaluations in checks.items():
        fired = [at for at, firing in evaluations if firing]
        quiet = [at for at, firing in evaluations if not firing]
        assert fired, f"{name} never fires in {PROMTOOL_TESTS.name}"
        assert quiet, f"{name} is never checked quiet in {PROMTOOL_TESTS.name}"


def test_every_alert_says_what_to_do_and_links_its_runbook() -> None:
    anchors = github_anchors(OPERATIONS.read_text(encoding="utf-8"))
    for name, rule in alerts().items():
        annotations = rule["annotations"]
        assert set(annotations) == {"summary", "description", "runbook_url"}, name
        assert annotations["summary"].strip(), name
        assert annotations["description"].strip(), name
        assert rule["labels"]["severity"] in ("warning", "critical"), name
        assert "for" in rule, name
        url = annotations["runbook_url"]
        assert url.startswith(RUNBOOKS), name
        anchor = url.removeprefix(RUNBOOKS)
        assert anchor in anchors, f"{name}: no heading of docs/operations.md has #{anchor}"


def test_the_anchor_rule_is_githubs() -> None:
    text = "# Top\n## Required tags (`x_y` > 0)\n```\n# not a heading\n```\n## Top\n### Top\n"
    assert github_anchors(text) == {"top", "required-tags-x_y--0", "top-1", "top-2"}


def test_rules_and_dashboard_name_only_exported_series() -> None:
    exported = exported_series()
    assert "releasebot_builds_finished_total" in exported  # the names Prometheus sees
    for name, rule in alerts().items():
        assert set(SERIES.findall(rule["expr"])) <= exported, name
    queries = dashboard_queries()
    for title, query in queries:
        named = set(SERIES.findall(query))
        assert named, title
        assert named <= exported, (title, named - exported)
    used = {name for _, query in queries for name in SERIES.findall(query)}
    # Every series releasebot exports has a place on the dashboard (a histogram by any
    # of its series).
    assert {family(name) for name in exported} - {family(name) for name in used} == set()


def test_the_dashboard_takes_its_data_source_from_a_variable() -> None:
    board = dashboard()
    assert board["schemaVersion"] >= 39  # Grafana 11 and later
    [variable] = board["templating"]["list"]
    assert (variable["name"], variable["type"], variable["query"]) == (
        "datasource",
        "datasource",
        "prometheus",
    )
    ids = [panel["id"] for panel in board["panels"]]
    assert len(ids) == len(set(ids))
    for panel in panels(board):
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, panel["title"]
        assert panel["targets"], panel["title"]
        assert panel["description"], panel["title"]
        for target in panel["targets"]:
            assert target["datasource"] == panel["datasource"], panel["title"]
        refs = [target["refId"] for target in panel["targets"]]
        assert len(refs) == len(set(refs)), panel["title"]


def test_the_dashboard_panels_do_not_overlap() -> None:
    taken: dict[tuple[int, int], str] = {}
    for panel in dashboard()["panels"]:
        box = panel["gridPos"]
        assert box["x"] + box["w"] <= 24, panel["title"]
        for x in range(box["x"], box["x"] + box["w"]):
            for y in range(box["y"], box["y"] + box["h"]):
                assert (x, y) not in taken, (panel["title"], taken.get((x, y)))
                taken[(x, y)] = panel["title"]
