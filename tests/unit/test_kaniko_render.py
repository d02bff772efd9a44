"""``render_job`` and ``KanikoOptions``: the Kaniko build Job releasebot creates.

Covers every hardening field (no retries of its own, deadline, TTL, no service-account
token, non-root where Kaniko allows it, capabilities, seccomp, node selection, resources,
the termination message), the Kaniko arguments (one list item per build arg and label, the
destination, git vs ConfigMap context, insecure registries only when configured, no shell
anywhere), labels and annotations, digest-pinned executors, deterministic short Job names,
the validation of every option, and that every manifest the bot can render (single-arch,
each arch of a multi-arch target, git context, ConfigMap context, insecure registry, user
namespaces, a 128-character tag) validates with ``kubernetes-validate`` in strict mode
against the Kubernetes 1.29 and 1.33 schemas.
"""

from __future__ import annotations

import copy
from dataclasses import replace
from datetime import timedelta
from typing import Any

import kubernetes_validate
import pytest

from releasebot.builders.kaniko import (
    DEFAULT_EXECUTOR_IMAGE,
    KANIKO_CAPABILITIES,
    KanikoOptions,
    render_job,
    target_label_value,
)
from releasebot.domain.shared.errors import InvalidOptionError
from releasebot.domain.shared.versions import Arch
from releasebot.domain.targets.builds import BuildRequest, build_request
from releasebot.domain.targets.models import Target
from tests.support.targets import make_target

GIT_CONTEXT = "git://git.example.test/gpu/recipes.git#refs/heads/main#" + "0123456789" * 4
DIGEST = "sha256:" + "ab" * 32
# Pod Security Standards, baseline profile: the only capabilities a Pod may add.
BASELINE_CAPABILITIES = {
    "AUDIT_WRITE",
    "CHOWN",
    "DAC_OVERRIDE",
    "FOWNER",
    "FSETID",
    "KILL",
    "MKNOD",
    "NET_BIND_SERVICE",
    "SETFCAP",
    "SETGID",
    "SETPCAP",
    "SETUID",
    "SYS_CHROOT",
}
SCHEMA_VERSIONS = ["1.29", "1.33"]


def target(tag: str = "580.178.04-flatcar4593.2.5", *arches: Arch) -> Target:
    return make_target(tag, arches=arches or (Arch.AMD64,))


def options(**changes: Any) -> KanikoOptions:
    values: dict[str, Any] = {
        "namespace": "gpu-builds",
        "registry_repository": "registry.example.test:5000/gpu/driver",
        "registry_secret": "registry-push",
        "context": GIT_CONTEXT,
        "context_sub_path": "driver/flatcar",
    }
    values.update(changes)
    return KanikoOptions(**values)


def configmap_options(**changes: Any) -> KanikoOptions:
    values: dict[str, Any] = {
        "context": None,
        "context_sub_path": None,
        "context_configmap": "recipe",
    }
    return options(**{**values, **changes})


def pod_spec(job: dict[str, Any]) -> dict[str, Any]:
    spec: dict[str, Any] = job["spec"]["template"]["spec"]
    return spec


def container(job: dict[str, Any]) -> dict[str, Any]:
    containers = pod_spec(job)["containers"]
    assert len(containers) == 1
    only: dict[str, Any] = containers[0]
    return only


def args(job: dict[str, Any]) -> list[str]:
    values: list[str] = container(job)["args"]
    return values


@pytest.fixture
def job() -> dict[str, Any]:
    return render_job(build_request(target(), Arch.AMD64, 1), options())


# -- hardening ---------------------------------------------------------------------------


def test_job_never_retries_by_itself_and_ends(job: dict[str, Any]) -> None:
    assert job["apiVersion"] == "batch/v1"
    assert job["kind"] == "Job"
    assert job["spec"]["backoffLimit"] == 0
    assert job["spec"]["activeDeadlineSeconds"] == 3600
    assert job["spec"]["ttlSecondsAfterFinished"] == 86400
    assert pod_spec(job)["restartPolicy"] == "Never"


def test_deadline_and_ttl_come_from_the_options() -> None:
    rendered = render_job(
        build_request(target(), Arch.AMD64, 1),
        options(active_deadline=timedelta(minutes=90), ttl_after_finished=timedelta(hours=6)),
    )
    assert rendered["spec"]["activeDeadlineSeconds"] == 5400
    assert rendered["spec"]["ttlSecondsAfterFinished"] == 21600


def test_pod_gets_no_token_no_service_links_and_seccomp(job: dict[str, Any]) -> None:
    spec = pod_spec(job)
    assert spec["automountServiceAccountToken"] is False
    assert spec["enableServiceLinks"] is False
    assert spec["securityContext"] == {"seccompProfile": {"type": "RuntimeDefault"}}
    assert "hostUsers" not in spec
    for forbidden in ("hostNetwork", "hostPID", "hostIPC", "serviceAccountName"):
        assert forbidden not in spec


def test_container_runs_as_root_only_as_far_as_kaniko_needs(job: dict[str, Any]) -> None:
    security = container(job)["securityContext"]
    assert security["runAsUser"] == 0
    assert security["runAsNonRoot"] is False
    assert security["privileged"] is False
    assert security["allowPrivilegeEscalation"] is False
    assert security["capabilities"]["drop"] == ["ALL"]
    added = security["capabilities"]["add"]
    assert added == list(KANIKO_CAPABILITIES)
    assert {"CHOWN", "DAC_OVERRIDE", "FOWNER", "SETUID", "SETGID"} <= set(added)
    assert set(added) <= BASELINE_CAPABILITIES
    assert not {"SYS_ADMIN", "NET_RAW", "MKNOD", "SYS_CHROOT"} & set(added)


def test_user_namespace_maps_root_away_from_the_node() -> None:
    rendered = render_job(build_request(target(), Arch.AMD64, 1), options(user_namespace=True))
    assert pod_spec(rendered)["hostUsers"] is False


@pytest.mark.parametrize("arch", list(Arch))
def test_pod_runs_natively_on_its_arch(arch: Arch) -> None:
    rendered = render_job(build_request(target("t1", Arch.AMD64, Arch.ARM64), arch, 1), options())
    assert pod_spec(rendered)["nodeSelector"] == {
        "kubernetes.io/arch": arch.value,
        "kubernetes.io/os": "linux",
    }


def test_resources_bound_memory_and_disk(job: dict[str, Any]) -> None:
    assert container(job)["resources"] == {
        "requests": {"cpu": "1", "memory": "4Gi", "ephemeral-storage": "10Gi"},
        "limits": {"memory": "8Gi", "ephemeral-storage": "20Gi"},
    }
    rendered = render_job(
        build_request(target(), Arch.AMD64, 1),
        options(memory_request="6Gi", memory_limit="12Gi", ephemeral_storage_limit="40Gi"),
    )
    resources = container(rendered)["resources"]
    assert resources["requests"]["memory"] == "6Gi"
    assert resources["limits"] == {"memory": "12Gi", "ephemeral-storage": "40Gi"}


def test_digest_goes_to_the_termination_message(job: dict[str, Any]) -> None:
    spec = container(job)
    assert spec["terminationMessagePolicy"] == "FallbackToLogsOnError"
    assert spec["terminationMessagePath"] == "/dev/termination-log"
    assert "--digest-file=/dev/termination-log" in args(job)


def test_registry_secret_is_mounted_read_only_as_docker_config(job: dict[str, Any]) -> None:
    assert pod_spec(job)["volumes"] == [
        {
            "name": "docker-config",
            "secret": {
                "secretName": "registry-push",
                "items": [{"key": ".dockerconfigjson", "path": "config.json"}],
            },
        }
    ]
    assert container(job)["volumeMounts"] == [
        {"name": "docker-config", "mountPath": "/kaniko/.docker", "readOnly": True}
    ]


# -- Kaniko's arguments ------------------------------------------------------------------


def test_args_build_the_target_and_push_it_to_its_tag(job: dict[str, Any]) -> None:
    assert args(job) == [
        f"--context={GIT_CONTEXT}",
        "--context-sub-path=driver/flatcar",
        "--dockerfile=Dockerfile",
        "--destination=registry.example.test:5000/gpu/driver:580.178.04-flatcar4593.2.5",
        "--build-arg=DRIVER_VERSION=580.178.04",
        "--build-arg=DRIVER_BRANCH=580",
        "--build-arg=FLATCAR_VERSION=4593.2.5",
        "--build-arg=FLATCAR_CHANNEL=stable",
        "--build-arg=KERNEL_VERSION=6.12.102-flatcar",
        "--build-arg=TARGETARCH=amd64",
        "--label=releasebot.driver-version=580.178.04",
        "--label=releasebot.flatcar-version=4593.2.5",
        "--label=releasebot.kernel-version=6.12.102-flatcar",
        "--label=releasebot.flatcar-channel=stable",
        "--label=org.opencontainers.image.version=580.178.04-flatcar4593.2.5",
        "--label=org.opencontainers.image.title=NVIDIA driver for Flatcar Container Linux",
        "--push-retry=3",
        "--digest-file=/dev/termination-log",
        "--compressed-caching=false",
    ]


def test_no_shell_runs_and_request_values_stay_single_arguments() -> None:
    request = build_request(target(), Arch.AMD64, 1)
    hostile = "x; rm -rf / $(reboot) `id` 'quoted' \"double\"\nsecond line"
    request = replace(
        request, build_args=(("DRIVER_VERSION", hostile),), labels=(("a b", hostile),)
    )
    rendered = render_job(request, options())
    assert "command" not in container(rendered)
    assert f"--build-arg=DRIVER_VERSION={hostile}" in args(rendered)
    assert f"--label=a b={hostile}" in args(rendered)
    assert not any(arg in ("sh", "-c", "/bin/sh", "bash") for arg in args(rendered))


def test_multi_arch_builds_push_per_arch_tags() -> None:
    multi = target("580.178.04-flatcar4593.2.5", Arch.AMD64, Arch.ARM64)
    destinations = {
        arch: [
            arg
            for arg in args(render_job(build_request(multi, arch, 1), options()))
            if arg.startswith("--destination=")
        ]
        for arch in Arch
    }
    repository = "registry.example.test:5000/gpu/driver"
    assert destinations == {
        Arch.AMD64: [f"--destination={repository}:580.178.04-flatcar4593.2.5-amd64"],
        Arch.ARM64: [f"--destination={repository}:580.178.04-flatcar4593.2.5-arm64"],
    }


def test_configmap_context_is_mounted_as_a_dir_context() -> None:
    rendered = render_job(build_request(target(), Arch.AMD64, 1), configmap_options())
    assert args(rendered)[:2] == ["--context=dir:///workspace", "--dockerfile=Dockerfile"]
    assert not any(arg.startswith("--context-sub-path") for arg in args(rendered))
    assert {"name": "context", "configMap": {"name": "recipe"}} in pod_spec(rendered)["volumes"]
    assert {"name": "context", "mountPath": "/workspace", "readOnly": True} in container(rendered)[
        "volumeMounts"
    ]


def test_git_context_has_no_context_volume(job: dict[str, Any]) -> None:
    assert [volume["name"] for volume in pod_spec(job)["volumes"]] == ["docker-config"]
    assert f"--context={GIT_CONTEXT}" in args(job)


def test_git_context_without_sub_path_sends_none() -> None:
    rendered = render_job(build_request(target(), Arch.AMD64, 1), options(context_sub_path=None))
    assert not any(arg.startswith("--context-sub-path") for arg in args(rendered))


def test_insecure_registry_flags_only_when_configured(job: dict[str, Any]) -> None:
    assert not any("insecure" in arg or "skip-tls" in arg for arg in args(job))
    host = options().registry_repository.split("/", 1)[0]
    # The destination (push) and the same registry for pulls: a driver base is pulled there.
    rendered = render_job(build_request(target(), Arch.AMD64, 1), options(insecure_registry=True))
    # plain HTTP only: certificates stay checked
    assert args(rendered)[-2:] == ["--insecure", f"--insecure-registry={host}"]
    rendered = render_job(build_request(target(), Arch.AMD64, 1), options(skip_tls_verify=True))
    assert args(rendered)[-2:] == ["--skip-tls-verify", f"--skip-tls-verify-registry={host}"]
    assert not any(arg.startswith("--insecure") for arg in args(rendered))


def test_a_private_registry_ca_is_mounted_and_named_to_kaniko() -> None:
    rendered = render_job(
        build_request(target(), Arch.AMD64, 1), options(registry_ca_configmap="registry-ca")
    )
    host = options().registry_repository.split("/", 1)[0]
    assert f"--registry-certificate={host}=/kaniko/registry-ca/ca.crt" in args(rendered)
    mounts = {m["name"]: m for m in container(rendered)["volumeMounts"]}
    assert mounts["registry-ca"]["readOnly"] is True
    volumes = {v["name"]: v for v in rendered["spec"]["template"]["spec"]["volumes"]}
    assert volumes["registry-ca"]["configMap"]["name"] == "registry-ca"


def test_push_retry_is_configurable() -> None:
    rendered = render_job(build_request(target(), Arch.AMD64, 1), options(push_retry=0))
    assert "--push-retry=0" in args(rendered)


# -- the executor image ------------------------------------------------------------------


def test_default_executor_is_the_maintained_fork(job: dict[str, Any]) -> None:
    assert container(job)["image"] == DEFAULT_EXECUTOR_IMAGE
    assert DEFAULT_EXECUTOR_IMAGE.startswith("ghcr.io/osscontainertools/kaniko:v")
    assert not options().executor_pinned


@pytest.mark.parametrize(
    "image",
    [
        f"ghcr.io/osscontainertools/kaniko@{DIGEST}",
        f"ghcr.io/osscontainertools/kaniko:v1.27.6@{DIGEST}",
        f"registry.internal:5000/mirror/kaniko-executor:v1.24.0@{DIGEST}",
    ],
)
def test_executor_pinned_by_digest_is_used_verbatim(image: str) -> None:
    pinned = options(executor_image=image)
    assert pinned.executor_pinned
    rendered = render_job(build_request(target(), Arch.AMD64, 1), pinned)
    assert container(rendered)["image"] == image
    assert container(rendered)["imagePullPolicy"] == "IfNotPresent"


# -- names, labels, annotations ----------------------------------------------------------


def test_labels_find_the_build_and_annotations_keep_the_tag(job: dict[str, Any]) -> None:
    labels = {
        "app.kubernetes.io/name": "releasebot",
        "app.kubernetes.io/component": "build",
        "releasebot/target": "580.178.04-flatcar4593.2.5",
        "releasebot/arch": "amd64",
        "releasebot/attempt": "1",
    }
    annotations = {
        "releasebot/tag": "580.178.04-flatcar4593.2.5",
        "releasebot/destination": (
            "registry.example.test:5000/gpu/driver:580.178.04-flatcar4593.2.5"
        ),
    }
    assert job["metadata"]["labels"] == labels
    assert job["metadata"]["annotations"] == annotations
    assert job["metadata"]["namespace"] == "gpu-builds"
    assert job["spec"]["template"]["metadata"] == {"labels": labels, "annotations": annotations}


def test_extra_labels_are_added_but_never_replace_ours() -> None:
    rendered = render_job(
        build_request(target(), Arch.ARM64, 2),
        options(extra_labels={"team": "gpu", "example.com/cost-center": "42"}),
    )
    labels = rendered["metadata"]["labels"]
    assert labels["team"] == "gpu"
    assert labels["example.com/cost-center"] == "42"
    assert labels["releasebot/arch"] == "arm64"
    assert labels["releasebot/attempt"] == "2"


def test_long_tags_get_a_short_deterministic_target_label() -> None:
    long_tag = "580.178.04-" + "x" * 100 + "-flatcar4593.2.5"
    value = target_label_value(long_tag)
    assert value == target_label_value(long_tag)
    assert value != target_label_value(long_tag + "0")
    assert value.startswith("sha256-")
    assert len(value) <= 63
    assert target_label_value("_edge.") != "_edge."  # tags may start and end where labels can't
    rendered = render_job(build_request(target(long_tag), Arch.AMD64, 1), options())
    assert rendered["metadata"]["labels"]["releasebot/target"] == value
    assert rendered["metadata"]["annotations"]["releasebot/tag"] == long_tag


@pytest.mark.parametrize(
    "tag",
    ["580.178.04-flatcar4593.2.5", "580-6.12.102-flatcar-flatcar4593.2.5", "A" * 120 + ".b-c_d"],
)
def test_job_names_are_short_deterministic_and_distinct(tag: str) -> None:
    names = {
        (arch, attempt): render_job(build_request(target(tag), arch, attempt), options())[
            "metadata"
        ]["name"]
        for arch in Arch
        for attempt in (1, 2, 10)
    }
    again = render_job(build_request(target(tag), Arch.AMD64, 1), options())["metadata"]["name"]
    assert again == names[(Arch.AMD64, 1)]
    assert len(set(names.values())) == len(names)
    for name in names.values():
        assert len(name) <= 63
        assert name == name.lower()
        assert name[0].isalnum()
        assert name[-1].isalnum()


def test_rendering_is_pure(job: dict[str, Any]) -> None:
    before = copy.deepcopy(job)
    again = render_job(build_request(target(), Arch.AMD64, 1), options())
    assert again == before
    again["metadata"]["labels"]["mutated"] = "yes"
    assert "mutated" not in job["spec"]["template"]["metadata"]["labels"]


# -- validation of the options -----------------------------------------------------------


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"namespace": "GPU-Builds"}, "namespace"),
        ({"namespace": "x" * 64}, "namespace"),
        ({"registry_repository": "gpu/driver"}, "registry_repository"),
        ({"registry_repository": "registry.example.test/gpu/driver:latest"}, "registry_repository"),
        ({"registry_repository": "registry.example.test/GPU/driver"}, "registry_repository"),
        ({"registry_repository": "registry.example.test"}, "registry_repository"),
        ({"registry_secret": "Push_Creds"}, "registry_secret"),
        ({"context": None}, "context"),
        ({"context_configmap": "recipe"}, "context"),
        ({"context": "git://git.example.test/gpu/recipes.git#refs/heads/main"}, "context"),
        (
            {"context": "https://git.example.test/recipes.git#refs/heads/main#" + "0" * 40},
            "context",
        ),
        ({"context_sub_path": "../etc"}, "context_sub_path"),
        ({"context_sub_path": "/abs"}, "context_sub_path"),
        ({"dockerfile": "a/../../Dockerfile"}, "dockerfile"),
        ({"dockerfile": "Docker file"}, "dockerfile"),
        ({"executor_image": "ghcr.io/osscontainertools/kaniko"}, "executor_image"),
        ({"executor_image": "ghcr.io/osscontainertools/kaniko@sha256:abc"}, "executor_image"),
        ({"executor_image": "kaniko:v1 --privileged"}, "executor_image"),
        ({"memory_request": "4GB"}, "memory_request"),
        ({"memory_limit": "-1Gi"}, "memory_limit"),
        ({"cpu_request": "0"}, "cpu_request"),
        ({"memory_request": "9Gi"}, "memory_request"),
        ({"ephemeral_storage_request": "30Gi"}, "ephemeral_storage_request"),
        ({"active_deadline": timedelta(0)}, "active_deadline"),
        ({"active_deadline": timedelta(seconds=1.5)}, "active_deadline"),
        ({"ttl_after_finished": timedelta(seconds=-1)}, "ttl_after_finished"),
        ({"push_retry": 11}, "push_retry"),
        ({"push_retry": -1}, "push_retry"),
        ({"push_retry": True}, "push_retry"),
        ({"extra_labels": {"releasebot/target": "x"}}, "extra_labels"),
        ({"extra_labels": {"app.kubernetes.io/name": "other"}}, "extra_labels"),
        ({"extra_labels": {"team": "a b"}}, "extra_labels"),
        ({"extra_labels": {"-team": "gpu"}}, "extra_labels"),
    ],
)
def test_invalid_options_name_the_field(changes: dict[str, Any], field: str) -> None:
    with pytest.raises(InvalidOptionError) as raised:
        options(**changes)
    assert raised.value.field == field
    assert str(raised.value).startswith(f"{field}: ")
    assert isinstance(raised.value, ValueError)


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"context_sub_path": "driver"}, "context_sub_path"),
        ({"dockerfile": "sub/Dockerfile"}, "dockerfile"),
        ({"context_configmap": "Recipe"}, "context_configmap"),
    ],
)
def test_invalid_configmap_context_options(changes: dict[str, Any], field: str) -> None:
    with pytest.raises(InvalidOptionError) as raised:
        configmap_options(**changes)
    assert raised.value.field == field


def test_options_are_frozen_including_extra_labels() -> None:
    labels = {"team": "gpu"}
    frozen = options(extra_labels=labels)
    labels["team"] = "changed"
    assert frozen.extra_labels["team"] == "gpu"
    with pytest.raises(TypeError):
        frozen.extra_labels["team"] = "x"  # type: ignore[index]


# -- every manifest the bot renders is valid Kubernetes ----------------------------------


def _renderings() -> list[tuple[str, BuildRequest, KanikoOptions]]:
    single = target()
    multi = target("580.178.04-flatcar4593.2.5", Arch.AMD64, Arch.ARM64)
    longest = target("9" * 100 + "-flatcar" + "1234.5.6" + "x" * 12)
    assert len(longest.tag) == 128
    return [
        ("single-arch git", build_request(single, Arch.AMD64, 1), options()),
        ("multi-arch amd64", build_request(multi, Arch.AMD64, 1), options()),
        ("multi-arch arm64", build_request(multi, Arch.ARM64, 3), options()),
        ("configmap context", build_request(single, Arch.AMD64, 1), configmap_options()),
        (
            "insecure registry",
            build_request(single, Arch.ARM64, 2),
            options(insecure_registry=True),
        ),
        (
            "private CA, unchecked TLS",
            build_request(single, Arch.AMD64, 1),
            options(skip_tls_verify=True, registry_ca_configmap="registry-ca"),
        ),
        ("user namespace", build_request(single, Arch.AMD64, 1), options(user_namespace=True)),
        (
            "pinned, labelled",
            build_request(multi, Arch.ARM64, 7),
            options(
                executor_image=f"ghcr.io/osscontainertools/kaniko:v1.27.6@{DIGEST}",
                extra_labels={"team": "gpu"},
                context_sub_path=None,
            ),
        ),
        ("128-character tag", build_request(longest, Arch.AMD64, 12), options()),
    ]


RENDERINGS = _renderings()


@pytest.mark.parametrize("version", SCHEMA_VERSIONS)
@pytest.mark.parametrize(
    ("request_", "kaniko"),
    [(request, kaniko) for _, request, kaniko in RENDERINGS],
    ids=[name for name, _, _ in RENDERINGS],
)
def test_manifest_validates_strictly(
    request_: BuildRequest, kaniko: KanikoOptions, version: str
) -> None:
    manifest = render_job(request_, kaniko)
    assert kubernetes_validate.validate(manifest, version, strict=True) == version


@pytest.mark.parametrize("version", SCHEMA_VERSIONS)
def test_strict_validation_would_catch_a_misspelt_field(job: dict[str, Any], version: str) -> None:
    broken = copy.deepcopy(job)
    pod_spec(broken)["automountServiceAcountToken"] = False  # sic
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, version, strict=True)
