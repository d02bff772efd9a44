"""The opt-in kustomize components: ``reboot-gate``, ``after-reboot-proof``, ``alerts`` and
``dashboard``, on top of each overlay.

Each component is built with ``kubectl kustomize`` into an overlay (a kustomization in a
temporary directory naming the overlay and the component). Covers: the reboot gate adds
exactly ``patch`` on Nodes, bound to the bot's ServiceAccount, and turns the gate on in
whichever workload the overlay runs (settings loaded as the Pods get them), while the
base alone leaves the gate off and the fleet on; the after-reboot proof adds exactly
``list`` on Pods and ``get`` on Pods/log in the GPU Operator's namespace and ``patch`` on
Nodes, alone and beside the reboot gate; every object still validates strictly;
the PrometheusRule's expressions name only series ``ServiceMetrics`` exports, with label
values it writes; the dashboard is a ConfigMap in the bot's namespace, labelled for
Grafana's sidecar, holding ``releasebot.json`` unchanged, beside the alerts.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import tomllib
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from releasebot.config import load_settings
from releasebot.domain.fleet.coverage import Verdict
from releasebot.domain.fleet.proof import ProofState
from releasebot.domain.targets.models import TargetState
from releasebot.service.plan import PollStatus
from tests.support.prometheus import dashboard, exported_series
from tests.unit.test_manifests import (
    CONFIG,
    NODE_RULES,
    OVERLAYS,
    ROLE_RULES,
    SCHEMA_VERSIONS,
    _environment,
    _kubectl,
    bot_container,
    of_kind,
    pod_templates,
    render,
    rules,
)

GATE_RULES = {("", "nodes", (), "patch")}
PROOF_NAMESPACE_RULES = {("", "pods", (), "list"), ("", "pods/log", (), "get")}
PROOF = "releasebot-after-reboot-proof"
DASHBOARD = "releasebot-dashboard"
BOT = {"kind": "ServiceAccount", "name": "releasebot", "namespace": "releasebot"}
_SERIES = re.compile(r"\b(releasebot_[a-z_]+)\b")
_LABEL = re.compile(r'(\w+)\s*(=~|=)\s*"([^"]*)"')


def with_component(
    overlay: str, component: str, tmp_path: Path, *, also: tuple[str, ...] = ()
) -> list[dict[str, Any]]:
    kubectl = _kubectl()
    if kubectl is None:
        render(overlay)  # skips (or fails in CI) with the reason
    site = tmp_path / "site"
    site.mkdir()
    (site / "kustomization.yaml").write_text(
        yaml.safe_dump(
            {
                "apiVersion": "kustomize.config.k8s.io/v1beta1",
                "kind": "Kustomization",
                # Relative: kustomize refuses absolute roots.
                "resources": [os.path.relpath(CONFIG / "overlays" / overlay, site)],
                "components": [
                    os.path.relpath(CONFIG / "components" / name, site)
                    for name in (component, *also)
                ],
            }
        )
    )
    result = subprocess.run(
        [str(kubectl), "kustomize", str(site)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    return [obj for obj in yaml.safe_load_all(result.stdout) if obj is not None]


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_the_reboot_gate_adds_patch_on_nodes_and_turns_the_gate_on(
    overlay: str, tmp_path: Path
) -> None:
    objects = with_component(overlay, "reboot-gate", tmp_path)
    roles = {role["metadata"]["name"]: rules(role) for role in of_kind(objects, "ClusterRole")}
    assert roles == {"releasebot-node-reader": NODE_RULES, "releasebot-reboot-gate": GATE_RULES}
    [binding] = [
        b for b in of_kind(objects, "ClusterRoleBinding") if b["roleRef"]["name"].endswith("gate")
    ]
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "releasebot", "namespace": "releasebot"}
    ]
    for version in SCHEMA_VERSIONS:
        for obj in objects:
            kubernetes_validate.validate(obj, version, strict=True)
    configmap = next(c for c in of_kind(objects, "ConfigMap") if "releasebot.toml" in c["data"])
    settings_file = tmp_path / "releasebot.toml"
    settings_file.write_text(configmap["data"]["releasebot.toml"], encoding="utf-8")
    for where, template in pod_templates(objects):
        environ = _environment(template, {"releasebot-database": {"url": "postgresql://x/y"}})
        assert environ["RELEASEBOT_FLEET_GATE"] == "true", where
        docker_config = tmp_path / "config.json"
        docker_config.write_text("{}")
        environ["RELEASEBOT_REGISTRY_DOCKER_CONFIG"] = str(docker_config)  # not in-cluster
        fleet = load_settings(settings_file, environ=environ).fleet
        assert (fleet.enabled, fleet.gate) == (True, True)


@pytest.mark.parametrize("overlay", OVERLAYS)
@pytest.mark.parametrize("also", [(), ("reboot-gate",)], ids=["alone", "with-reboot-gate"])
def test_the_after_reboot_proof_grants_exactly_what_it_reads_and_writes(
    overlay: str, also: tuple[str, ...], tmp_path: Path
) -> None:
    objects = with_component(overlay, "after-reboot-proof", tmp_path, also=also)
    roles = {
        (role["metadata"]["namespace"], role["metadata"]["name"]): rules(role)
        for role in of_kind(objects, "Role")
    }
    assert roles == {
        ("releasebot", "releasebot"): ROLE_RULES,
        ("gpu-operator", PROOF): PROOF_NAMESPACE_RULES,
    }
    cluster_roles = {
        role["metadata"]["name"]: rules(role) for role in of_kind(objects, "ClusterRole")
    }
    expected = {"releasebot-node-reader": NODE_RULES, PROOF: GATE_RULES}
    if also:
        expected["releasebot-reboot-gate"] = GATE_RULES
    assert cluster_roles == expected
    [binding] = [b for b in of_kind(objects, "RoleBinding") if b["metadata"]["name"] == PROOF]
    assert binding["metadata"]["namespace"] == "gpu-operator"
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "Role",
        "name": PROOF,
    }
    assert binding["subjects"] == [BOT]
    [cluster_binding] = [
        b for b in of_kind(objects, "ClusterRoleBinding") if b["metadata"]["name"] == PROOF
    ]
    assert cluster_binding["roleRef"]["name"] == PROOF
    assert cluster_binding["subjects"] == [BOT]
    for obj in objects:
        for version in SCHEMA_VERSIONS:
            kubernetes_validate.validate(obj, version, strict=True)
        if obj["kind"] in ("Role", "ClusterRole"):
            assert all("*" not in rule["verbs"] + rule["resources"] for rule in obj["rules"])
    templates = pod_templates(objects)
    assert templates
    for _, template in templates:  # it turns the proof on, and only the gate turns the gate on
        env = {var["name"]: var.get("value") for var in bot_container(template).get("env", [])}
        assert env["RELEASEBOT_FLEET_PROOF"] == "true"
        assert ("RELEASEBOT_FLEET_GATE" in env) is bool(also)


def test_without_the_component_the_fleet_is_read_and_the_gate_stays_off() -> None:
    raw = tomllib.loads((CONFIG / "base" / "releasebot.toml").read_text(encoding="utf-8"))
    assert raw["fleet"]["enabled"] is True
    assert "gate" not in raw["fleet"]
    for _, template in pod_templates(render("postgres")):
        names = {var["name"] for var in bot_container(template).get("env", [])}
        assert "RELEASEBOT_FLEET_GATE" not in names
        assert "RELEASEBOT_FLEET_PROOF" not in names


def test_the_prometheus_rule_watches_what_releasebot_exports(tmp_path: Path) -> None:
    objects = with_component("postgres", "alerts", tmp_path)
    [rule] = of_kind(objects, "PrometheusRule")
    assert rule["apiVersion"] == "monitoring.coreos.com/v1"
    assert rule["metadata"]["namespace"] == "releasebot"
    alerts = {r["alert"]: r for group in rule["spec"]["groups"] for r in group["rules"]}
    assert set(alerts) == {
        "ReleasebotRequiredTagsMissing",
        "ReleasebotBuildsFailed",
        "ReleasebotFeedFailing",
        "ReleasebotFeedNeverAnswered",
        "ReleasebotNoLeaderCycling",
        "ReleasebotNotificationsStuck",
        "ReleasebotDown",
        "ReleasebotFleetNodeWithoutImage",
        "ReleasebotFleetPendingRebootWithoutImage",
        "ReleasebotDriverRefusedOnNode",
    }
    assert alerts["ReleasebotFleetNodeWithoutImage"]["for"] == "10m"
    exported = exported_series()
    values = {
        "verdict": {verdict.value for verdict in Verdict},
        "reason": {"fleet", "pending-reboot"},
        "state": {state.value for state in ProofState} | {state.value for state in TargetState},
        "result": {status.value for status in PollStatus},
    }
    for name, alert in alerts.items():
        expr = alert["expr"]
        assert set(_SERIES.findall(expr)) <= exported, name
        for label, op, value in _LABEL.findall(expr):
            wanted = set(value.split("|")) if op == "=~" else {value}
            assert wanted <= values[label], (name, label, wanted)
        assert alert["annotations"]["summary"]
    for obj in objects:
        if obj["kind"] != "PrometheusRule":  # a CRD: kubernetes-validate has no schema
            kubernetes_validate.validate(obj, SCHEMA_VERSIONS[-1], strict=True)


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_the_dashboard_is_a_configmap_grafanas_sidecar_loads(overlay: str, tmp_path: Path) -> None:
    objects = with_component(overlay, "dashboard", tmp_path, also=("alerts",))
    [configmap] = [c for c in of_kind(objects, "ConfigMap") if c["metadata"]["name"] == DASHBOARD]
    assert configmap["metadata"]["namespace"] == "releasebot"
    assert configmap["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert json.loads(configmap["data"]["releasebot.json"]) == dashboard()
    assert len(of_kind(objects, "PrometheusRule")) == 1
    for obj in objects:
        if obj["kind"] == "PrometheusRule":  # a CRD: kubernetes-validate has no schema
            continue
        for version in SCHEMA_VERSIONS:
            kubernetes_validate.validate(obj, version, strict=True)
