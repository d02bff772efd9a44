"""How a build Job logs in to the registry for each ``registry.auth``
(``builders/kaniko.py``): the mounted Secret (``dockerconfig``); a ``config.json`` naming
Kaniko's ECR or GCR credential helper, projected from a Pod annotation, with the Pod on
the service account bound to the cloud identity (``ecr``, ``gcp``); a per-Job Secret,
owned by the Job, holding a fresh ACR token (``azure``). Every manifest validates with
``kubernetes-validate`` in strict mode against the Kubernetes 1.29 and 1.33 schemas.
"""

from __future__ import annotations

import base64
import json
from typing import Any

import kubernetes_validate
import pytest

from releasebot.builders.kaniko import (
    DOCKER_CONFIG_ANNOTATION,
    KanikoOptions,
    registry_secret_name,
    render_job,
    render_registry_secret,
)
from releasebot.domain.shared.errors import InvalidOptionError
from releasebot.domain.shared.versions import Arch
from releasebot.domain.targets.builds import build_request
from tests.support.targets import make_target

GIT_CONTEXT = "git://git.example.test/gpu/recipes.git#refs/heads/main#" + "0123456789" * 4
SCHEMA_VERSIONS = ["1.29", "1.33"]
REQUEST = build_request(make_target(), Arch.AMD64, 1)


def options(**changes: Any) -> KanikoOptions:
    values: dict[str, Any] = {
        "namespace": "gpu-builds",
        "registry_repository": "123456789012.dkr.ecr.eu-west-1.amazonaws.com:443/gpu/driver",
        "registry_secret": "registry-push",
        "context": GIT_CONTEXT,
    }
    values.update(changes)
    return KanikoOptions(**values)


def docker_config_volume(job: dict[str, Any]) -> dict[str, Any]:
    volumes = job["spec"]["template"]["spec"]["volumes"]
    return next(volume for volume in volumes if volume["name"] == "docker-config")


@pytest.mark.parametrize(("auth", "helper"), [("ecr", "ecr-login"), ("gcp", "gcr")])
def test_ecr_and_gcp_jobs_name_kanikos_helper_for_the_host(auth: str, helper: str) -> None:
    job = render_job(REQUEST, options(registry_auth=auth, service_account="releasebot-build"))
    pod = job["spec"]["template"]
    config = json.loads(pod["metadata"]["annotations"][DOCKER_CONFIG_ANNOTATION])
    # Docker looks credHelpers up by host:port exactly as the image reference spells it.
    assert config == {"credHelpers": {"123456789012.dkr.ecr.eu-west-1.amazonaws.com:443": helper}}
    volume = docker_config_volume(job)
    assert "secret" not in volume  # no Secret: nothing to leak, nothing to rotate
    [item] = volume["downwardAPI"]["items"]
    assert item == {
        "path": "config.json",
        "fieldRef": {"fieldPath": f"metadata.annotations['{DOCKER_CONFIG_ANNOTATION}']"},
    }
    assert pod["spec"]["serviceAccountName"] == "releasebot-build"
    assert pod["spec"]["automountServiceAccountToken"] is False
    assert DOCKER_CONFIG_ANNOTATION not in job["metadata"]["annotations"]


def test_dockerconfig_keeps_the_mounted_secret_and_the_default_account() -> None:
    job = render_job(REQUEST, options())
    assert docker_config_volume(job)["secret"]["secretName"] == "registry-push"
    assert "serviceAccountName" not in job["spec"]["template"]["spec"]
    assert DOCKER_CONFIG_ANNOTATION not in job["spec"]["template"]["metadata"]["annotations"]


def test_azure_jobs_mount_their_own_secret() -> None:
    job = render_job(REQUEST, options(registry_auth="azure"))
    secret = docker_config_volume(job)["secret"]
    assert secret["secretName"] == registry_secret_name(REQUEST.job_name)
    assert secret["items"] == [{"key": ".dockerconfigjson", "path": "config.json"}]


def test_the_azure_secret_is_owned_by_its_job_and_holds_the_login() -> None:
    kaniko = options(registry_auth="azure", registry_repository="fleet.azurecr.io/gpu/driver")
    login = base64.b64encode(b"00000000-0000-0000-0000-000000000000:refresh").decode()
    secret = render_registry_secret(REQUEST.job_name, "uid-1", kaniko, login)
    assert secret["type"] == "kubernetes.io/dockerconfigjson"
    assert secret["metadata"]["name"] == f"{REQUEST.job_name}-registry"
    assert secret["metadata"]["namespace"] == "gpu-builds"
    [owner] = secret["metadata"]["ownerReferences"]
    assert owner == {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "name": REQUEST.job_name,
        "uid": "uid-1",
    }
    config = json.loads(base64.b64decode(secret["data"][".dockerconfigjson"]))
    assert config == {"auths": {"fleet.azurecr.io": {"auth": login}}}


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"registry_auth": "aws"}, "registry_auth"),
        ({"service_account": "Bad_Name"}, "service_account"),
    ],
)
def test_bad_options_name_the_field(changes: dict[str, Any], field: str) -> None:
    with pytest.raises(InvalidOptionError) as caught:
        options(**changes)
    assert caught.value.field == field


@pytest.mark.parametrize("version", SCHEMA_VERSIONS)
@pytest.mark.parametrize("auth", ["dockerconfig", "ecr", "gcp", "azure"])
def test_every_login_validates_strictly(auth: str, version: str) -> None:
    kaniko = options(registry_auth=auth, service_account="releasebot-build")
    assert kubernetes_validate.validate(render_job(REQUEST, kaniko), version, strict=True)
    secret = render_registry_secret(REQUEST.job_name, "uid-1", kaniko, "dXNlcjpwdw==")
    assert kubernetes_validate.validate(secret, version, strict=True) == version
