"""Test helpers for the build loop: a settable clock, a Kaniko stand-in, a crash switch.

``KanikoPlayer`` does what Kaniko does inside a build Job, against the REAL registry and the
fake Kubernetes API: it reads the Job's ``--destination``, pushes a real image for the
Job's arch there, and marks the Job complete with the digest as termination message (or
fails it the way a real cluster would).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from releasebot.builders.kaniko import DESTINATION_ANNOTATION
from tests.support.kubeapi import FakeKubeApi
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

    def push(self, job_name: str, labels: dict[str, str] | None = None) -> str:
        path, tag, arch = self.destination(job_name)
        labels = self.labels(job_name) if labels is None else labels
        return self.registry.push_image(path, tag, arch=arch, labels=labels)

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
