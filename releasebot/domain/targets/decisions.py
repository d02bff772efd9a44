"""The vocabulary of what releasebot decides: ``Action``, and a ``Decision`` about one tag.

Every transition of ``domain.targets.lifecycle`` and every step the service takes about a build is
reported as a ``Decision`` (the log line, the CLI's output, the chat's answer, the metrics'
counts all read them), so the kinds are an enum, never free text.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass


class Action(enum.StrEnum):
    """What was decided about a target or one of its builds (the log's and the report's)."""

    PUBLISHED = "published"
    MISSING = "missing"
    WAITING = "waiting"
    DEFERRED = "deferred"
    PAUSED = "paused"
    WOULD_LAUNCH = "would launch"
    LAUNCHED = "launched"
    ADOPTED = "adopted"
    REUSED = "reused"
    LAUNCH_POSTPONED = "launch postponed"
    REJECTED = "rejected"
    BUILD_SUCCEEDED = "build succeeded"
    BUILD_FAILED = "build failed"
    RETRYING = "retrying"
    FAILED = "failed"
    INCOMPATIBLE = "incompatible"
    INDEX_POSTPONED = "index postponed"
    SIGNING_POSTPONED = "signing postponed"

    @property
    def starts_build(self) -> bool:
        """A build Job now exists for the decision's build (created, or adopted)."""
        return self in (Action.LAUNCHED, Action.ADOPTED)

    @property
    def ends_build(self) -> bool:
        """The decision's build is over (its result recorded)."""
        return self in (Action.BUILD_SUCCEEDED, Action.BUILD_FAILED, Action.REJECTED)


@dataclass(frozen=True)
class Decision:
    """One thing decided, for the log and the report: ``action`` on ``tag`` (and ``job``)."""

    action: Action
    tag: str
    detail: str = ""
    job: str = ""

    def __post_init__(self) -> None:
        object.__setattr__(self, "action", Action(self.action))
