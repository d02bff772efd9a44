"""Test helpers for the build loop: a settable clock, a Kaniko stand-in, a crash switch.

``KanikoPlayer`` does what Kaniko does inside a build Job, against the REAL registry and the
fake Kubernetes API: it reads the Job's ``--destination``, pushes a real image for the
Job's arch there, and marks the Job complete with the digest as termination message (or
fails it the way a real cluster would). It plays both kinds of Job: a driver base's
(``--dockerfile=…Dockerfile.base``) pushes a few small layers and a config with the
labels; a per-release Job given ``DRIVER_BASE`` pushes an image whose manifest lists that
base's layer blobs (read from the registry by the digest) plus one new kernel layer.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from releasebot.builders.kaniko import DESTINATION_ANNOTATION
from tests.support.kubeapi import FakeKubeApi
from tests.support.layers import push_layered
from tests.support.registryserver import RunningRegistry


@dataclass
class Clock:
    now: datetime = field(default_factory=lambda: datetime(2026, 11, 30, 12, 0, tzinfo=UTC))

    def __call__(self) -> datetime:
        return self.now

    def advance(self, delta: timedelta) -> None:
        self.now += delta


class Crash(BaseException):
    """Stands for the process being killed: nothing after it runs, no handler catches it."""


def crash_after(method: Callable[..., Any], *, times: int = 1) -> Callable[..., Any]:
    """``method``, that really runs and then 'kills the process' on its first ``times`` calls."""
    calls = {"n": 0}

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        result = method(*args, **kwargs)
        calls["n"] += 1
        if calls["n"] <= times:
            raise Crash(method.__name__)
        return result

    return wrapper


def crash_before(method: Callable[..., Any]) -> Callable[..., Any]:
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        raise Crash(method.__name__)

    return wrapper


class KanikoPlayer:
    """Plays the Kaniko executor for the Jobs releasebot creates."""

    def __init__(self, api: FakeKubeApi, registry: RunningRegistry) -> None:
        self.api = api
        self.registry = registry

    def job_names(self) -> list[str]:
        return sorted(job["metadata"]["name"] for job in self.api.jobs())

    def destination(self, job_name: str) -> tuple[str, str, str]:
        """(repository path, tag, arch) the Job pushes to."""
        job = self.api.job(job_name)
        reference = job["metadata"]["annotations"][DESTINATION_ANNOTATION]
        repository, tag = reference.rsplit(":", 1)
        path = repository.split("/", 1)[1]
        arch = job["spec"]["template"]["spec"]["nodeSelector"]["kubernetes.io/arch"]
        return path, tag, arch

    def labels(self, job_name: str) -> dict[str, str]:
        """The ``--label`` arguments of the Job: Kaniko writes them into the image config."""
        args = self.api.job(job_name)["spec"]["template"]["spec"]["containers"][0]["args"]
        labels = {}
        for arg in args:
            if arg.startswith("--label="):
                key, _, value = arg.removeprefix("--label=").partition("=")
                labels[key] = value
        return labels

    def args(self, job_name: str) -> list[str]:
        args: list[str] = self.api.job(job_name)["spec"]["template"]["spec"]["containers"][0][
            "args"
        ]
        return args

    def build_arg(self, job_name: str, name: str) -> str | None:
        for arg in self.args(job_name):
            key, _, value = arg.removeprefix("--build-arg=").partition("=")
            if arg.startswith("--build-arg=") and key == name:
                return value
        return None

    def is_base(self, job_name: str) -> bool:
        """Whether the Job builds a driver base (``Dockerfile.base``)."""
        return any(
            arg.startswith("--dockerfile=") and arg.endswith("Dockerfile.base")
            for arg in self.args(job_name)
        )

    def push(self, job_name: str, labels: dict[str, str] | None = None) -> str:
        path, tag, arch = self.destination(job_name)
        labels = self.labels(job_name) if labels is None else labels
        driver = self.build_arg(job_name, "DRIVER_VERSION") or "?"
        if self.is_base(job_name):  # the runtime OS, the NVIDIA userspace, the firmware
            layers = [
                {"usr/lib/os-release": f"base os {arch}\n".encode()},
                {f"usr/bin/nvidia-smi-{driver}": f"userspace {driver} {arch}\n".encode()},
                {"lib/firmware/nvidia/gsp.bin": f"gsp {driver} {arch}\n".encode()},
            ]
            return push_layered(self.registry, path, tag, arch=arch, labels=labels, layers=layers)
        base = self.build_arg(job_name, "DRIVER_BASE")
        if base is None:  # a single-image recipe (bases off): one layer, as before
            return self.registry.push_image(path, tag, arch=arch, labels=labels)
        kernel = self.build_arg(job_name, "KERNEL_VERSION") or "?"
        layer = {f"opt/nvidia-driver/{kernel}/nvidia.ko": f"{driver} {kernel} {arch}\n".encode()}
        return push_layered(
            self.registry, path, tag, arch=arch, labels=labels, layers=[layer], base=base
        )

    def build(self, job_name: str) -> str:
        """Push the image and complete the Job with its digest; returns the digest."""
        digest = self.push(job_name)
        self.api.succeed(job_name, digest)
        return digest

    def build_all(self) -> dict[str, str]:
        done = {}
        for name in self.job_names():
            job = self.api.job(name)
            if not job.get("status", {}).get("conditions"):
                done[name] = self.build(name)
        return done
