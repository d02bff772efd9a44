"""The Kaniko build Job: its settings and the pure function that renders it.

``render_job`` turns one ``JobRequest`` (one target, one arch, one attempt; or one driver
base, ``domain/targets/bases.py``) into the batch/v1 Job manifest that runs the Kaniko executor.
It is pure: no I/O, no clock, the same request and options always give the same manifest,
so ``--dry-run`` shows exactly what ``launch`` would create and a restarted releasebot
derives the same Job name.

What the manifest guarantees, and why:

- Values from the request only ever become separate list items of the container's
  ``args`` (``--build-arg=K=V``, ``--label=K=V``); there is no shell and no ``sh -c``.
- ``backoffLimit: 0``: releasebot owns retries (it keeps the reason and backs off); a Job
  that retried on its own would hide OOM kills and burn node time.
- The digest goes to ``/dev/termination-log`` (``--digest-file``), so it lands in the Pod
  status; Kaniko writes it BEFORE pushing, so the launcher requires exit code 0 and the
  service checks the registry too. ``FallbackToLogsOnError`` puts the last log lines there
  when the build fails without writing the file.
- "Non-root where the executor allows": Kaniko unpacks the base image into its own root
  and must run as UID 0; everything else is taken away. No service-account token, no
  privilege escalation, not privileged, seccomp ``RuntimeDefault``, all capabilities
  dropped except ``KANIKO_CAPABILITIES``. The Pod meets the Pod Security ``baseline``
  profile (not ``restricted``, which forbids UID 0). ``user_namespace=True`` adds
  ``hostUsers: false`` so that UID 0 in the build is an unprivileged UID on the node.
- Only flags the original GoogleContainerTools/kaniko v1.24.0 has (the project was archived
  in June 2025 after that release), so any maintained fork can run it.

The rules of the options are here once: ``KanikoOptions`` checks itself with the
``check_*`` functions, and the settings check each ``[kaniko]`` key with the same
functions (and build ``KanikoOptions`` once at load for the rules between fields), so a
bad setting is reported against its key before any Job exists.

Registry credentials (``registry_auth``): ``dockerconfig`` mounts the Secret
``registry_secret`` as Kaniko's ``config.json``. ``ecr`` and ``gcp`` mount a ``config.json``
that only names Kaniko's built-in credential helper for the registry host
(``{"credHelpers": {host: "ecr-login" | "gcr"}}``: the executor image ships
``docker-credential-ecr-login`` and ``docker-credential-gcr`` in ``/kaniko``); it comes from
a Pod annotation through a downward API volume, so no object is written and no secret
exists, and the helper gets the token from the Pod's own workload identity (the Pods run
as ``service_account``). ``azure`` (Kaniko's ACR helper reads a client secret, not a
workload identity) mounts a per-Job Secret, ``registry_secret_name(job)``, which the
launcher writes with a fresh ACR token just before the Job starts (``render_registry_secret``).

Deliberately not here: talking to a cluster (``kubernetes.py``), choosing what to build
(``domain.targets.policy``), reading settings files (``releasebot.config`` builds
``KanikoOptions``).
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from decimal import Decimal
from types import MappingProxyType
from typing import Any

from releasebot.domain.shared.errors import InvalidOptionError
from releasebot.domain.shared.references import PATH_COMPONENT, SHA256, TAG, is_repository_path
from releasebot.domain.shared.untrusted import strip_controls
from releasebot.domain.targets.builds import JobRequest

DEFAULT_EXECUTOR_IMAGE = "ghcr.io/osscontainertools/kaniko:v1.28.0"
"""The maintained fork's executor (GoogleContainerTools/kaniko is archived). A tag is a
moving pointer: production configs should pin it as ``image:tag@sha256:…``."""

KANIKO_CAPABILITIES = (
    "CHOWN",  # unpacking layers and COPY --chown set file owners
    "DAC_OVERRIDE",  # root must read and write files whatever their mode
    "FOWNER",  # chmod/utime on files root does not own (extracting base images)
    "FSETID",  # keep setuid/setgid bits when restoring file modes
    "KILL",  # RUN steps signal processes they started under other UIDs
    "SETGID",  # USER uid:gid in the Dockerfile: RUN steps switch groups
    "SETUID",  # ... and users
    "SETFCAP",  # file capabilities in base images and package installs (e.g. ping)
)
"""What Kaniko needs as root (kaniko issues #778 and #1171, shipwright's Kaniko strategy);
all are in the Pod Security ``baseline`` profile's allowed list."""

APP_LABEL = "app.kubernetes.io/name"
APP = "releasebot"
COMPONENT_LABEL = "app.kubernetes.io/component"
COMPONENT = "build"
TARGET_LABEL = "releasebot/target"
ARCH_LABEL = "releasebot/arch"
ATTEMPT_LABEL = "releasebot/attempt"
TAG_ANNOTATION = "releasebot/tag"
DESTINATION_ANNOTATION = "releasebot/destination"

BUILD_SELECTOR: Mapping[str, str] = MappingProxyType({APP_LABEL: APP, COMPONENT_LABEL: COMPONENT})
"""The labels every build Job carries: select on them to find releasebot's Jobs."""
RESERVED_LABELS = frozenset({APP_LABEL, COMPONENT_LABEL, TARGET_LABEL, ARCH_LABEL, ATTEMPT_LABEL})

CONTAINER_NAME = "kaniko"
DOCKER_CONFIG_DIR = "/kaniko/.docker"
WORKSPACE_DIR = "/workspace"
REGISTRY_CA_DIR = "/kaniko/registry-ca"
TERMINATION_LOG = "/dev/termination-log"
DOCKER_CONFIG_ANNOTATION = "releasebot/docker-config"
"""The Pod annotation holding the credential-helper ``config.json`` (``ecr``, ``gcp``)."""
REGISTRY_AUTHS = ("dockerconfig", "ecr", "gcp", "azure")
CREDENTIAL_HELPERS = {"ecr": "ecr-login", "gcp": "gcr"}
"""The helper Kaniko's executor image ships for each cloud (``/kaniko/docker-credential-*``)."""

_DNS_LABEL = r"[a-z0-9](?:[-a-z0-9]*[a-z0-9])?"
_DNS_LABEL_RE = re.compile(_DNS_LABEL)
_DNS_SUBDOMAIN_RE = re.compile(rf"{_DNS_LABEL}(?:\.{_DNS_LABEL})*")
_LABEL_VALUE_RE = re.compile(r"(?:[A-Za-z0-9](?:[-A-Za-z0-9_.]*[A-Za-z0-9])?)?")
_QUANTITY_RE = re.compile(r"([0-9]+(?:\.[0-9]+)?)(m|k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei)?")
_PATH_COMPONENT = PATH_COMPONENT  # the distribution grammar, written once in the domain
_HOST = r"(?:localhost|[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)+|[A-Za-z0-9.-]+:[0-9]{1,5})(?::[0-9]{1,5})?"
_REPOSITORY_RE = re.compile(rf"(?P<host>{_HOST})(?:/{_PATH_COMPONENT})+")
_IMAGE_RE = re.compile(
    rf"(?:{_HOST}/)?{_PATH_COMPONENT}(?:/{_PATH_COMPONENT})*"
    rf"(?::(?P<tag>{TAG}))?"
    rf"(?:@(?P<digest>{SHA256}))?"
)
_GIT_CONTEXT_RE = re.compile(r"git://[^#\s]+#refs/(?:heads|tags)/[^#\s]+#[0-9a-f]{40}")
_SAFE_PATH_RE = re.compile(r"[A-Za-z0-9_.@+-]+(?:/[A-Za-z0-9_.@+-]+)*")
_CONFIGMAP_KEY_RE = re.compile(r"[-._a-zA-Z0-9]+")
_SUFFIXES = {
    None: Decimal(1),
    "m": Decimal("0.001"),
    "k": Decimal(10) ** 3,
    "M": Decimal(10) ** 6,
    "G": Decimal(10) ** 9,
    "T": Decimal(10) ** 12,
    "P": Decimal(10) ** 15,
    "E": Decimal(10) ** 18,
    "Ki": Decimal(2) ** 10,
    "Mi": Decimal(2) ** 20,
    "Gi": Decimal(2) ** 30,
    "Ti": Decimal(2) ** 40,
    "Pi": Decimal(2) ** 50,
    "Ei": Decimal(2) ** 60,
}
PUSH_RETRY_MAX = 10
LOG_TAIL_MAX_CHARS = 4000
"""The end of a failed build's log that is kept, so one runaway line cannot flood the store
or a chat message; both launchers trim to it."""


@dataclass(frozen=True, kw_only=True)
class KanikoOptions:
    """How every build Job is shaped. Validated on construction (``InvalidOptionError``).

    The build context is EITHER ``context`` (a pinned git context, optionally with
    ``context_sub_path``) OR ``context_configmap`` (a ConfigMap the bot ships, mounted at
    ``/workspace`` and passed as ``dir:///workspace``). Kaniko's COPY keeps symlinks as
    symlinks and ConfigMap volumes are symlink farms (``..data/…``): a recipe shipped that
    way must ``COPY`` whole directories, not single files (kaniko issue #2762).
    """

    namespace: str
    """Namespace the Jobs run in (a DNS-1123 label)."""
    registry_repository: str
    """``host[:port]/path`` the images are pushed to, without tag or digest."""
    registry_secret: str
    """Name of the ``kubernetes.io/dockerconfigjson`` Secret mounted at /kaniko/.docker."""
    context: str | None = None
    """``git://host/repo.git#refs/heads/<branch>#<40-hex commit>``: the commit is required
    so that a tag is always built from the same recipe."""
    context_sub_path: str | None = None
    """Directory of the recipe inside the git context (relative, git contexts only)."""
    context_configmap: str | None = None
    """Name of the ConfigMap holding the recipe (``dir://`` context)."""
    dockerfile: str = "Dockerfile"
    """Path of the Dockerfile relative to the context (sub-path)."""
    executor_image: str = DEFAULT_EXECUTOR_IMAGE
    """``image:tag`` or ``image[:tag]@sha256:…``; an image without tag or digest is refused."""
    memory_request: str = "4Gi"
    """Kubernetes quantity. Compiling the kernel modules and snapshotting the layers
    (``--compressed-caching=false`` keeps that in bounds) peaks around 3 GiB."""
    memory_limit: str = "8Gi"
    """OOM kills are reported as ``OOMKilled`` and retried; headroom keeps them rare."""
    ephemeral_storage_request: str = "10Gi"
    """The Flatcar container tarball, the driver runfile, their unpacked trees and Kaniko's
    layer snapshots all live on the node's disk."""
    ephemeral_storage_limit: str = "20Gi"
    """Above this the kubelet evicts the Pod (reported as ``Evicted``, retried)."""
    cpu_request: str = "1"
    """No CPU limit on purpose: throttling only makes builds slower, never safer."""
    active_deadline: timedelta = timedelta(hours=1)
    """A build running longer is killed (``DeadlineExceeded``, retried)."""
    ttl_after_finished: timedelta = timedelta(days=1)
    """How long a finished Job stays for the bot (and people) to read; long enough to
    survive a releasebot outage, short enough not to pile up."""
    push_retry: int = 3
    """Kaniko's own retries of a failed push (flaky registries), 0-10."""
    insecure_registry: bool = False
    """Push over plain HTTP (``--insecure``): a registry on a private network without TLS."""
    skip_tls_verify: bool = False
    """Push without checking the registry's certificate (``--skip-tls-verify``): test only."""
    registry_ca_configmap: str | None = None
    """ConfigMap holding the registry's CA as ``ca.crt`` (a private CA), given to Kaniko as
    ``--registry-certificate=<host>=…``."""
    user_namespace: bool = False
    """``hostUsers: false``: UID 0 in the build maps to an unprivileged node UID. Needs
    Kubernetes >= 1.33 nodes with idmapped mounts; off because other nodes fail the Pod."""
    extra_labels: Mapping[str, str] = field(default_factory=dict)
    """More labels on the Job and its Pod (e.g. for cost allocation); releasebot's own win."""
    registry_auth: str = "dockerconfig"
    """How the Pod logs in to push: ``dockerconfig`` (the ``registry_secret``), ``ecr`` or
    ``gcp`` (Kaniko's credential helper and the Pod's workload identity), ``azure`` (a
    Secret per Job the launcher writes). See the module docstring."""
    service_account: str | None = None
    """The build Pods' service account (``ecr``/``gcp``: the one bound to the cloud
    identity that may push); ``None``: the namespace's ``default``. Its token is still not
    mounted: IRSA and EKS Pod Identity inject their own, GKE's metadata server needs none."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "extra_labels", MappingProxyType(dict(self.extra_labels)))
        check_dns_label("namespace", self.namespace)
        if self.registry_ca_configmap is not None:
            check_name("registry_ca_configmap", self.registry_ca_configmap)
        check_repository("registry_repository", self.registry_repository)
        check_name("registry_secret", self.registry_secret)
        if self.registry_auth not in REGISTRY_AUTHS:
            raise InvalidOptionError("registry_auth", f"must be one of {', '.join(REGISTRY_AUTHS)}")
        if self.service_account is not None:
            check_name("service_account", self.service_account)
        self._check_context()
        check_image("executor_image", self.executor_image)
        requests = {
            "memory_request": self.memory_request,
            "ephemeral_storage_request": self.ephemeral_storage_request,
            "cpu_request": self.cpu_request,
        }
        limits = {
            "memory_limit": self.memory_limit,
            "ephemeral_storage_limit": self.ephemeral_storage_limit,
        }
        values = {name: _quantity(name, text) for name, text in {**requests, **limits}.items()}
        for kind in ("memory", "ephemeral_storage"):
            if values[f"{kind}_request"] > values[f"{kind}_limit"]:
                raise InvalidOptionError(
                    f"{kind}_request",
                    f"{requests[f'{kind}_request']} is more than {kind}_limit "
                    f"{limits[f'{kind}_limit']}",
                )
        if self.active_deadline < timedelta(seconds=1) or self.active_deadline % timedelta(
            seconds=1
        ):
            raise InvalidOptionError("active_deadline", "must be a whole number of seconds >= 1")
        if self.ttl_after_finished < timedelta(0) or self.ttl_after_finished % timedelta(seconds=1):
            raise InvalidOptionError("ttl_after_finished", "must be a whole number of seconds >= 0")
        check_push_retry("push_retry", self.push_retry)
        for key, value in self.extra_labels.items():
            _check_label(key, value)

    def _check_context(self) -> None:
        if (self.context is None) == (self.context_configmap is None):
            raise InvalidOptionError(
                "context", "set exactly one of context (git://) and context_configmap"
            )
        if self.context is not None:
            check_git_context("context", self.context)
            if self.context_sub_path is not None:
                check_relative_path("context_sub_path", self.context_sub_path)
            check_relative_path("dockerfile", self.dockerfile)
        else:
            assert self.context_configmap is not None
            check_name("context_configmap", self.context_configmap)
            if self.context_sub_path is not None:
                raise InvalidOptionError(
                    "context_sub_path", "only a git context has sub-paths (a ConfigMap is flat)"
                )
            if _CONFIGMAP_KEY_RE.fullmatch(self.dockerfile) is None or self.dockerfile in (
                ".",
                "..",
            ):
                raise InvalidOptionError(
                    "dockerfile", f"{self.dockerfile!r} is not a ConfigMap key of the context"
                )

    @property
    def executor_pinned(self) -> bool:
        """True when the executor image is pinned by digest (what production should do)."""
        return "@sha256:" in self.executor_image

    @property
    def kaniko_context(self) -> str:
        """The ``--context`` value."""
        return self.context if self.context is not None else f"dir://{WORKSPACE_DIR}"


def target_label_value(tag: str) -> str:
    """The ``releasebot/target`` label value for an image tag.

    The tag itself when it is a valid label value (at most 63 characters, alphanumeric at
    both ends), else ``sha256-`` and 32 hex digits of its hash: deterministic either way,
    so the bot can select a target's Jobs. The full tag is in an annotation.
    """
    if len(tag) <= 63 and _LABEL_VALUE_RE.fullmatch(tag):
        return tag
    return f"sha256-{hashlib.sha256(tag.encode()).hexdigest()[:32]}"


def trim_log_tail(text: str | None, limit: int = LOG_TAIL_MAX_CHARS) -> str | None:
    """The last ``limit`` characters of a build log, trailing whitespace dropped; ``None``
    when nothing is left. Lines stay lines; terminal escapes (a tool's colours, a cursor
    move) and other control characters go (``strip_controls``): the tail is stored and
    shown in Slack."""
    if not text:
        return None
    lines = text[-4 * limit :].splitlines()
    tail = "\n".join(strip_controls(line).rstrip() for line in lines).rstrip()[-limit:]
    return tail or None


def render_job(request: JobRequest, options: KanikoOptions) -> dict[str, Any]:
    """The batch/v1 Job that builds and pushes ``request.destination_tag``."""
    destination = f"{options.registry_repository}:{request.destination_tag}"
    labels = {
        **options.extra_labels,
        **BUILD_SELECTOR,
        TARGET_LABEL: target_label_value(request.subject),
        ARCH_LABEL: request.arch.value,
        ATTEMPT_LABEL: str(request.attempt),
    }
    annotations = {TAG_ANNOTATION: request.subject, DESTINATION_ANNOTATION: destination}
    pod_annotations = dict(annotations)
    if options.registry_auth in CREDENTIAL_HELPERS:
        pod_annotations[DOCKER_CONFIG_ANNOTATION] = helper_docker_config(options)
    container: dict[str, Any] = {
        "name": CONTAINER_NAME,
        "image": options.executor_image,
        "imagePullPolicy": "IfNotPresent",
        "args": _kaniko_args(request, options, destination),
        "resources": {
            "requests": {
                "cpu": options.cpu_request,
                "memory": options.memory_request,
                "ephemeral-storage": options.ephemeral_storage_request,
            },
            "limits": {
                "memory": options.memory_limit,
                "ephemeral-storage": options.ephemeral_storage_limit,
            },
        },
        "securityContext": {
            "runAsUser": 0,  # Kaniko unpacks images into its own root: it must be UID 0
            "runAsGroup": 0,
            "runAsNonRoot": False,
            "privileged": False,
            "allowPrivilegeEscalation": False,
            "readOnlyRootFilesystem": False,  # the build happens in the container's root
            "capabilities": {"drop": ["ALL"], "add": list(KANIKO_CAPABILITIES)},
        },
        "terminationMessagePath": TERMINATION_LOG,
        "terminationMessagePolicy": "FallbackToLogsOnError",
        "volumeMounts": [
            {"name": "docker-config", "mountPath": DOCKER_CONFIG_DIR, "readOnly": True},
        ],
    }
    volumes: list[dict[str, Any]] = [_docker_config_volume(request, options)]
    if options.registry_ca_configmap is not None:
        container["volumeMounts"].append(
            {"name": "registry-ca", "mountPath": REGISTRY_CA_DIR, "readOnly": True}
        )
        volumes.append(
            {
                "name": "registry-ca",
                "configMap": {
                    "name": options.registry_ca_configmap,
                    "items": [{"key": "ca.crt", "path": "ca.crt"}],
                },
            }
        )
    if options.context_configmap is not None:
        container["volumeMounts"].append(
            {"name": "context", "mountPath": WORKSPACE_DIR, "readOnly": True}
        )
        volumes.append({"name": "context", "configMap": {"name": options.context_configmap}})
    pod_spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "nodeSelector": {"kubernetes.io/arch": request.arch.value, "kubernetes.io/os": "linux"},
        "securityContext": {"seccompProfile": {"type": "RuntimeDefault"}},
        "containers": [container],
        "volumes": volumes,
    }
    if options.user_namespace:
        pod_spec["hostUsers"] = False
    if options.service_account is not None:
        pod_spec["serviceAccountName"] = options.service_account
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": request.job_name,
            "namespace": options.namespace,
            "labels": dict(labels),
            "annotations": dict(annotations),
        },
        "spec": {
            "backoffLimit": 0,
            "activeDeadlineSeconds": int(options.active_deadline.total_seconds()),
            "ttlSecondsAfterFinished": int(options.ttl_after_finished.total_seconds()),
            "template": {
                "metadata": {"labels": dict(labels), "annotations": pod_annotations},
                "spec": pod_spec,
            },
        },
    }


def helper_docker_config(options: KanikoOptions) -> str:
    """The ``config.json`` that names the cloud's credential helper for the registry host."""
    host = options.registry_repository.split("/", 1)[0]
    helper = CREDENTIAL_HELPERS[options.registry_auth]
    return json.dumps({"credHelpers": {host: helper}}, sort_keys=True, separators=(",", ":"))


def registry_secret_name(job_name: str) -> str:
    """The per-Job registry Secret of ``registry_auth = "azure"`` (a Job name is a DNS
    label of at most 63 characters, so this stays a valid Secret name)."""
    return f"{job_name}-registry"


def _docker_config_volume(request: JobRequest, options: KanikoOptions) -> dict[str, Any]:
    if options.registry_auth in CREDENTIAL_HELPERS:
        path = f"metadata.annotations['{DOCKER_CONFIG_ANNOTATION}']"
        return {
            "name": "docker-config",
            "downwardAPI": {"items": [{"path": "config.json", "fieldRef": {"fieldPath": path}}]},
        }
    secret = (
        registry_secret_name(request.job_name)
        if options.registry_auth == "azure"
        else options.registry_secret
    )
    return {
        "name": "docker-config",
        "secret": {
            "secretName": secret,
            "items": [{"key": ".dockerconfigjson", "path": "config.json"}],
        },
    }


def render_registry_secret(
    job_name: str, job_uid: str, options: KanikoOptions, basic: str
) -> dict[str, Any]:
    """The ``kubernetes.io/dockerconfigjson`` Secret a Job of ``registry_auth = "azure"``
    mounts: ``basic`` (base64 ``user:token``) for the registry host, owned by the Job
    (``job_uid``) so the garbage collector deletes it with the Job. Holds a secret: never
    log or print what this returns."""
    host = options.registry_repository.split("/", 1)[0]
    config = json.dumps({"auths": {host: {"auth": basic}}}, separators=(",", ":"))
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "kubernetes.io/dockerconfigjson",
        "metadata": {
            "name": registry_secret_name(job_name),
            "namespace": options.namespace,
            "labels": {**BUILD_SELECTOR, "job-name": job_name},
            "ownerReferences": [
                {"apiVersion": "batch/v1", "kind": "Job", "name": job_name, "uid": job_uid}
            ],
        },
        "data": {".dockerconfigjson": base64.b64encode(config.encode()).decode("ascii")},
    }


def dockerfile_for(request: JobRequest, options: KanikoOptions) -> str:
    """The Dockerfile of ``request``: the configured one, or the file it names beside it
    (a driver base's ``Dockerfile.base``, in the same directory of the context)."""
    if request.dockerfile is None:
        return options.dockerfile
    folder, _, _name = options.dockerfile.rpartition("/")
    return f"{folder}/{request.dockerfile}" if folder else request.dockerfile


def _kaniko_args(request: JobRequest, options: KanikoOptions, destination: str) -> list[str]:
    args = [f"--context={options.kaniko_context}"]
    if options.context_sub_path is not None:
        args.append(f"--context-sub-path={options.context_sub_path}")
    args += [
        f"--dockerfile={dockerfile_for(request, options)}",
        f"--destination={destination}",
        *(f"--build-arg={name}={value}" for name, value in request.build_args),
        *(f"--label={name}={value}" for name, value in request.labels),
        f"--push-retry={options.push_retry}",
        f"--digest-file={TERMINATION_LOG}",
        "--compressed-caching=false",  # compressing layers in memory is what OOM-kills builds
    ]
    # The push flags cover the destination only; a per-release image is also PULLED from
    # the same registry (``FROM`` its driver base), so the registry's own flags go too. The
    # CA file is per host already, for pulls and pushes alike.
    host = options.registry_repository.split("/", 1)[0]
    if options.insecure_registry:
        args += ["--insecure", f"--insecure-registry={host}"]
    if options.skip_tls_verify:
        args += ["--skip-tls-verify", f"--skip-tls-verify-registry={host}"]
    if options.registry_ca_configmap is not None:
        args.append(f"--registry-certificate={host}={REGISTRY_CA_DIR}/ca.crt")
    return args


# -- the rules of single options (the settings check their keys with these too) ------------


def is_dns_label(value: str) -> bool:
    """A DNS-1123 label of at most 63 characters: a namespace's or a Job's name."""
    return len(value) <= 63 and _DNS_LABEL_RE.fullmatch(value) is not None


def check_dns_label(name: str, value: str) -> str:
    """A namespace: a DNS-1123 label of at most 63 characters."""
    _check(_DNS_LABEL_RE, value, name, "a Kubernetes name (a DNS-1123 label)", limit=63)
    return value


def check_name(name: str, value: str) -> str:
    """A Secret's or ConfigMap's name: a DNS-1123 subdomain."""
    _check(_DNS_SUBDOMAIN_RE, value, name, "a Kubernetes name (a DNS-1123 subdomain)")
    return value


def check_repository(name: str, value: str) -> str:
    """Where the images go: ``host[:port]/path`` without tag or digest."""
    if (
        not isinstance(value, str)
        or _REPOSITORY_RE.fullmatch(value) is None
        or not is_repository_path(value.split("/", 1)[1])
    ):
        raise InvalidOptionError(
            name,
            f"{value!r} is not a repository like registry.example.com/nvidia/driver "
            "(host[:port]/path: lower-case path, no tag or digest; the host needs a dot, a port "
            "or localhost)",
        )
    return value


def check_image(name: str, value: str) -> str:
    """The executor image: a reference with a tag, a digest, or both."""
    match = _IMAGE_RE.fullmatch(value) if isinstance(value, str) else None
    if match is None or (match["tag"] is None and match["digest"] is None):
        raise InvalidOptionError(
            name,
            f"{value!r} is not an image reference with a tag or digest "
            "(image:tag or image[:tag]@sha256:<64 hex>)",
        )
    return value


def check_git_context(name: str, value: str) -> str:
    """A git build context pinned to its commit."""
    if not isinstance(value, str) or _GIT_CONTEXT_RE.fullmatch(value) is None:
        raise InvalidOptionError(
            name,
            f"{value!r} is not git://host/repo.git#refs/heads/<branch>#<commit> "
            "(the 40-hex commit pins the recipe)",
        )
    return value


def check_relative_path(name: str, path: str) -> str:
    """A path inside the context: relative, no ``.`` or ``..``, no special characters."""
    if (
        not isinstance(path, str)
        or _SAFE_PATH_RE.fullmatch(path) is None
        or any(part in (".", "..") for part in path.split("/"))
    ):
        raise InvalidOptionError(
            name, f"{path!r} is not a relative path without '.', '..' or special characters"
        )
    return path


def check_quantity(name: str, text: str) -> str:
    """A Kubernetes quantity above zero (``8Gi``, ``500m``)."""
    _quantity(name, text)
    return text


def check_push_retry(name: str, value: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= PUSH_RETRY_MAX:
        raise InvalidOptionError(name, f"must be an integer 0-{PUSH_RETRY_MAX}")
    return value


def _check(pattern: re.Pattern[str], value: str, name: str, what: str, limit: int = 253) -> None:
    if not isinstance(value, str) or len(value) > limit or pattern.fullmatch(value) is None:
        raise InvalidOptionError(name, f"{value!r} is not {what} (lower-case, at most {limit})")


def _check_label(key: str, value: str) -> None:
    prefix, _, name = key.rpartition("/")
    valid_key = (
        0 < len(name) <= 63
        and _LABEL_VALUE_RE.fullmatch(name) is not None
        and (not prefix or (len(prefix) <= 253 and _DNS_SUBDOMAIN_RE.fullmatch(prefix) is not None))
    )
    if not valid_key:
        raise InvalidOptionError("extra_labels", f"{key!r} is not a label key")
    if key in RESERVED_LABELS or prefix == APP:
        raise InvalidOptionError("extra_labels", f"{key!r} is releasebot's own label")
    if not isinstance(value, str) or len(value) > 63 or not _LABEL_VALUE_RE.fullmatch(value):
        raise InvalidOptionError("extra_labels", f"{value!r} is not a label value (for {key!r})")


def _quantity(name: str, text: str) -> Decimal:
    match = _QUANTITY_RE.fullmatch(text) if isinstance(text, str) else None
    if match is None:
        raise InvalidOptionError(name, f"{text!r} is not a Kubernetes quantity (e.g. 4Gi, 500m)")
    value = Decimal(match[1]) * _SUFFIXES[match[2]]
    if value <= 0:
        raise InvalidOptionError(name, f"{text!r} must be more than zero")
    return value
