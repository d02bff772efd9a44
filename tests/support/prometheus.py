"""The shipped alerts and dashboard as the tests read them, and Debian's Prometheus for tests.

- ``rule_groups`` / ``alerts``: the rule groups of ``config/components/alerts`` (a Kubernetes
  PrometheusRule) as the plain rules file ``promtool`` and ``prometheus`` want.
- ``dashboard_queries``: every PromQL query of ``config/components/dashboard``'s panels.
- ``exported_series``: the sample names ``ServiceMetrics`` exposes (``_total`` of a counter,
  ``_bucket``/``_sum``/``_count`` of a histogram), whether or not a child exists yet.
- ``github_anchors``: the anchors GitHub gives the headings of a Markdown file, which the
  alerts' ``runbook_url`` point at.
- ``RunningPrometheus``: the real ``prometheus`` server on loopback (a free port, a
  temporary storage directory), asked through its HTTP API; stopped and never left running.

``promtool`` and ``prometheus`` come from Debian's ``prometheus`` package (``.ci/run``
installs it); missing, the tests are skipped with that reason, except in CI.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import time
from pathlib import Path
from types import TracebackType
from typing import Any

import httpx
import yaml
from prometheus_client import Metric

from releasebot.runtime.metrics import ServiceMetrics
from tests.support.runprocess import free_port, wait_for
from tests.support.tools import missing_tool

REPO = Path(__file__).resolve().parents[2]
RULE_FILE = REPO / "config" / "components" / "alerts" / "prometheusrule.yaml"
DASHBOARD_FILE = REPO / "config" / "components" / "dashboard" / "releasebot.json"
OPERATIONS = REPO / "docs" / "operations.md"
PROMTOOL_TESTS = REPO / "tests" / "data" / "prometheus" / "alerts-test.yaml"

GRAFANA_VARIABLES = {"$__rate_interval": "1m", "$__range": "1h"}
"""What Grafana puts in place of its built-in variables, for a query Prometheus can run."""


def tool(name: str) -> str:
    """The path of ``promtool`` or ``prometheus``, or skip (fail in CI) saying what to install."""
    found = shutil.which(name)
    if found is None:
        missing_tool(
            f"{name} not found (Debian's prometheus package ships it: apt-get install prometheus)"
        )
    return found


def rule_groups() -> list[dict[str, Any]]:
    rule = yaml.safe_load(RULE_FILE.read_text(encoding="utf-8"))
    assert rule["kind"] == "PrometheusRule"
    groups: list[dict[str, Any]] = rule["spec"]["groups"]
    return groups


def alerts() -> dict[str, dict[str, Any]]:
    return {rule["alert"]: rule for group in rule_groups() for rule in group["rules"]}


def write_rules(path: Path, groups: list[dict[str, Any]]) -> Path:
    path.write_text(yaml.safe_dump({"groups": groups}, sort_keys=False), encoding="utf-8")
    return path


def dashboard() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(DASHBOARD_FILE.read_text(encoding="utf-8"))
    return loaded


def panels(board: dict[str, Any]) -> list[dict[str, Any]]:
    """Every panel, those inside collapsed rows included; rows themselves left out."""
    found = []
    for panel in board["panels"]:
        if panel["type"] == "row":
            found.extend(panel.get("panels", []))
        else:
            found.append(panel)
    return found


def dashboard_queries(board: dict[str, Any] | None = None) -> list[tuple[str, str]]:
    """(panel title, PromQL) of every query target of the dashboard."""
    return [
        (panel["title"], target["expr"])
        for panel in panels(dashboard() if board is None else board)
        for target in panel["targets"]
    ]


def runnable(query: str) -> str:
    """A dashboard query with Grafana's built-in variables replaced."""
    for variable, value in GRAFANA_VARIABLES.items():
        query = query.replace(variable, value)
    return query


SERIES = re.compile(r"\b(releasebot_[a-z_]+)\b")


def exported_series() -> set[str]:
    names = set()
    metric: Metric
    for metric in ServiceMetrics().registry.collect():
        if metric.type == "counter":
            names.add(f"{metric.name}_total")
        elif metric.type == "histogram":
            names.update(f"{metric.name}_{suffix}" for suffix in ("bucket", "sum", "count"))
        else:
            names.add(metric.name)
    return names


def github_anchors(markdown: str) -> set[str]:
    """GitHub's anchors of every heading: lower case, punctuation dropped, spaces to
    hyphens, and a repeated anchor numbered (``-1``, ``-2``). Fenced code is skipped."""
    anchors: set[str] = set()
    seen: dict[str, int] = {}
    fenced = False
    for line in markdown.splitlines():
        if line.startswith("```"):
            fenced = not fenced
            continue
        heading = re.match(r"#{1,6}\s+(.*?)\s*#*\s*$", line)
        if fenced or heading is None:
            continue
        slug = re.sub(r"[^\w\- ]", "", heading.group(1).lower()).replace(" ", "-")
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        anchors.add(slug if count == 0 else f"{slug}-{count}")
    return anchors


class RunningPrometheus:
    """``prometheus`` on 127.0.0.1 with ``config`` (its own file), storage in ``directory``."""

    def __init__(self, config: dict[str, Any], directory: Path) -> None:
        binary = tool("prometheus")
        self.port = free_port()
        config_file = directory / "prometheus.yml"
        config_file.write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
        (directory / "data").mkdir()
        self.log_path = directory / "prometheus.log"
        self._log = self.log_path.open("wb")
        self.process = subprocess.Popen(
            [
                binary,
                f"--config.file={config_file}",
                f"--storage.tsdb.path={directory / 'data'}",
                f"--web.listen-address=127.0.0.1:{self.port}",
            ],
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def wait_ready(self, timeout: float = 60.0) -> None:
        def ready() -> bool:
            if self.process.poll() is not None:
                raise AssertionError(f"prometheus exited early:\n{self.output()}")
            try:
                return httpx.get(f"{self.url}/-/ready", timeout=2).status_code == 200
            except httpx.TransportError:
                return False

        wait_for(ready, timeout=timeout, every=0.2, what="prometheus /-/ready")

    def api(self, path: str, **params: str) -> Any:
        """The ``data`` of a successful API answer; AssertionError with Prometheus' own
        error (a parse error names the query) otherwise."""
        answer = httpx.get(f"{self.url}/api/v1/{path}", params=params, timeout=10)
        body = answer.json()
        assert answer.status_code == 200, (path, params, body)
        assert body["status"] == "success", (path, params, body)
        return body["data"]

    def query(self, promql: str) -> list[dict[str, Any]]:
        """The instant vector (or a scalar as one sample) ``promql`` gives now."""
        data = self.api("query", query=promql, time=f"{time.time():.3f}")
        if data["resultType"] in ("scalar", "string"):
            return [{"metric": {}, "value": data["result"]}]
        result: list[dict[str, Any]] = data["result"]
        return result

    def rules(self) -> list[dict[str, Any]]:
        return [rule for group in self.api("rules")["groups"] for rule in group["rules"]]

    def alerts(self) -> list[dict[str, Any]]:
        found: list[dict[str, Any]] = self.api("alerts")["alerts"]
        return found

    def output(self) -> str:
        self._log.flush()
        return self.log_path.read_text(errors="replace")[-4000:]

    def __enter__(self) -> RunningPrometheus:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)
        self._log.close()
