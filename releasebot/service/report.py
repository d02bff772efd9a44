"""``CycleReport``: what one cycle (or a plan, or a hand build) did, for its caller.

The CLI prints it, the chat answers from it, the metrics count from it. Every decision
added is also logged as one line (``action tag [job]: detail``, with the action, tag and
job as structured fields), so the log and the report never tell different stories.
Deliberately not here: deciding anything (``domain.targets.lifecycle``), printing.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from releasebot.domain.ports import JobLauncher
from releasebot.domain.shared.errors import ReleasebotError
from releasebot.domain.targets.decisions import Action, Decision
from releasebot.domain.targets.models import TargetRecord
from releasebot.service.fleet import FleetOutcome
from releasebot.service.plan import PlanResult

log = logging.getLogger("releasebot.reconcile")


@dataclass
class CycleReport:
    plan: PlanResult | None = None
    decisions: list[Decision] = field(default_factory=list)
    manifests: list[dict[str, Any]] = field(default_factory=list)
    """The Job manifests a dry run would create (a real launch renders each Job once, in
    the launcher, and reports the decision only)."""
    errors: list[str] = field(default_factory=list)
    targets: list[TargetRecord] = field(default_factory=list)
    """The required targets after the registry check (empty if it failed)."""
    fleet: FleetOutcome | None = None
    """The fleet's coverage and reboot gate after the launches (``None``: not judged)."""
    full_pass: bool = False
    """This cycle read everything again (nothing kept from earlier cycles was used)."""

    def launched(self) -> list[Decision]:
        """The decisions that started a build Job (created, or adopted after a crash)."""
        return [decision for decision in self.decisions if decision.action.starts_build]

    def decide(self, action: Action, tag: str, detail: str = "", job: str = "") -> None:
        self.add(Decision(action, tag, detail, job))

    def add(self, decision: Decision | None) -> None:
        """Record (and log) ``decision``; ``None`` (a silent transition) is skipped."""
        if decision is None:
            return
        self.decisions.append(decision)
        job = decision.job
        log.info(
            "%s %s%s%s",
            decision.action,
            decision.tag,
            f" [{job}]" if job else "",
            f": {decision.detail}" if decision.detail else "",
            extra={"action": decision.action.value, "tag": decision.tag, "job": job},
        )


def delete_quietly(launcher: JobLauncher, job: str, report: CycleReport) -> None:
    """Delete the Job ``job`` is done with; a failure is the report's error, not the
    cycle's end (the next cycle deletes it again)."""
    try:
        launcher.delete(job)
    except ReleasebotError as error:
        report.errors.append(str(error))
