"""An in-memory ``JobLauncher``: Jobs in a dict, finished by hand.

Serves ``--dry-run`` (``render`` shows the real manifests, nothing leaves the process) and
the unit and contract tests, which play Kaniko with ``succeed`` and ``fail``. It passes the
same contract suite as ``KubernetesJobLauncher``; it deliberately has no clock, no TTL and
no Pods: a Job stays ``running`` until a test finishes it or it is deleted.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from releasebot.builders.kaniko import KanikoOptions, render_job, trim_log_tail
from releasebot.domain.targets.builds import FailureReason, JobPhase, JobRequest, JobStatus


@dataclass
class _Job:
    manifest: dict[str, Any]
    status: JobStatus


class MemoryJobLauncher:
    """Jobs by name. ``created`` lists every Job ever created, in order (twins would show)."""

    def __init__(self, options: KanikoOptions) -> None:
        self._options = options
        self._jobs: dict[str, _Job] = {}
        self.created: list[str] = []

    # -- JobLauncher -------------------------------------------------------------------

    def close(self) -> None:
        pass

    def render(self, request: JobRequest) -> dict[str, Any]:
        return render_job(request, self._options)

    def launch(self, request: JobRequest) -> bool:
        if request.job_name in self._jobs:
            return False
        self._jobs[request.job_name] = _Job(
            self.render(request), JobStatus(request.job_name, JobPhase.RUNNING)
        )
        self.created.append(request.job_name)
        return True

    def status(self, job_name: str) -> JobStatus:
        job = self._jobs.get(job_name)
        return JobStatus(job_name, JobPhase.MISSING) if job is None else job.status

    def delete(self, job_name: str) -> None:
        self._jobs.pop(job_name, None)

    # -- playing Kaniko ----------------------------------------------------------------

    def job_names(self) -> list[str]:
        """The Jobs that exist now, in creation order."""
        return list(self._jobs)

    def manifest(self, job_name: str) -> dict[str, Any]:
        return self._jobs[job_name].manifest

    def succeed(self, job_name: str, termination_message: str | None) -> None:
        """The build exited 0 and wrote ``termination_message`` (normally the digest)."""
        self._jobs[job_name].status = JobStatus(
            job_name, JobPhase.SUCCEEDED, termination_message=termination_message
        )

    def fail(
        self,
        job_name: str,
        reason: FailureReason,
        log: str | None = None,
        message: str | None = None,
    ) -> None:
        """The build failed for ``reason``; ``log`` is the build's log (trimmed as the real
        launcher trims it)."""
        self._jobs[job_name].status = JobStatus(
            job_name,
            JobPhase.FAILED,
            reason=reason,
            message=message or str(reason),
            log_tail=trim_log_tail(log),
        )
