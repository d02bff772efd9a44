"""The kustomize components ``registry-auth-ecr``, ``-gcp`` and ``-azure`` on every overlay
(built with ``kubectl kustomize``, as ``test_manifest_components.py`` does).

Covers: each turns ``registry.auth`` on in whichever workload the overlay runs, with the
docker config off and the registry Secret's mount optional (settings loaded as the Pods get
them, the build Jobs' shape included); ECR and GCP add a build ServiceAccount bound to the
cloud identity and no Kubernetes permission; Azure adds exactly ``create`` and ``delete``
on Secrets in the namespace (the per-Job registry Secret), bound to the bot's
ServiceAccount, and the webhook's Pod label; every object validates strictly.
"""

from __future__ import annotations

from pathlib import Path

import kubernetes_validate
import pytest

from releasebot.config import load_settings
from tests.unit.test_manifest_components import BOT, with_component
from tests.unit.test_manifests import (
    OVERLAYS,
    ROLE_RULES,
    SCHEMA_VERSIONS,
    _environment,
    of_kind,
    pod_templates,
    rules,
)

SECRET_RULES = {("", "secrets", (), "create"), ("", "secrets", (), "delete")}
ANNOTATIONS = {
    "ecr": "eks.amazonaws.com/role-arn",
    "gcp": "iam.gke.io/gcp-service-account",
    "azure": "azure.workload.identity/client-id",
}


@pytest.mark.parametrize("overlay", OVERLAYS)
@pytest.mark.parametrize("cloud", ["ecr", "gcp", "azure"])
def test_the_component_turns_the_cloud_login_on(cloud: str, overlay: str, tmp_path: Path) -> None:
    objects = with_component(overlay, f"registry-auth-{cloud}", tmp_path)
    for version in SCHEMA_VERSIONS:
        for obj in objects:
            kubernetes_validate.validate(obj, version, strict=True)
    accounts = {sa["metadata"]["name"]: sa for sa in of_kind(objects, "ServiceAccount")}
    assert ANNOTATIONS[cloud] in accounts["releasebot"]["metadata"]["annotations"]
    roles = {role["metadata"]["name"]: rules(role) for role in of_kind(objects, "Role")}
    if cloud == "azure":
        assert "releasebot-build" not in accounts
        assert roles["releasebot-registry-secrets"] == SECRET_RULES
        [binding] = [
            b
            for b in of_kind(objects, "RoleBinding")
            if b["roleRef"]["name"] == "releasebot-registry-secrets"
        ]
        assert binding["subjects"] == [BOT]
    else:
        build = accounts["releasebot-build"]
        assert ANNOTATIONS[cloud] in build["metadata"]["annotations"]
        assert build["automountServiceAccountToken"] is False
        assert "releasebot-registry-secrets" not in roles
    assert roles["releasebot"] == ROLE_RULES  # the bot's own Role is untouched

    configmap = next(c for c in of_kind(objects, "ConfigMap") if "releasebot.toml" in c["data"])
    settings_file = tmp_path / "releasebot.toml"
    settings_file.write_text(configmap["data"]["releasebot.toml"], encoding="utf-8")
    templates = list(pod_templates(objects))
    assert templates
    for where, template in templates:
        labels = template["metadata"].get("labels", {})
        assert (labels.get("azure.workload.identity/use") == "true") == (cloud == "azure"), where
        [volume] = [v for v in template["spec"]["volumes"] if v["name"] == "registry-auth"]
        assert volume["secret"]["optional"] is True, where
        environ = _environment(template, {"releasebot-database": {"url": "postgresql://x/y"}})
        settings = load_settings(settings_file, environ=environ)
        assert (settings.registry.auth, settings.registry.docker_config) == (cloud, ""), where
        shape = settings.kaniko_options()
        assert shape.registry_auth == cloud
        expected = None if cloud == "azure" else "releasebot-build"
        assert shape.service_account == expected, where
