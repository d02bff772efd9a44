"""The ``/releasebot`` vocabulary: the verbs, their usage, and a validated ``Command``.

Shared by the chat front door (``chat.commands`` parses text into a ``Command``) and the use
case that runs it (``service.commands``), so neither imports the other. Pure values: no
parsing, no Slack.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from releasebot.domain.shared.versions import Arch


class Verb(enum.StrEnum):
    STATUS = "status"
    PLAN = "plan"
    MISSING = "missing"
    BUILD = "build"
    RETRY = "retry"
    REBUILD = "rebuild"
    RELEASE = "release"
    PAUSE = "pause"
    RESUME = "resume"
    HELP = "help"

    @property
    def mutates(self) -> bool:
        """True for commands that change something: only allowed users may run them."""
        return self in (
            Verb.BUILD,
            Verb.RETRY,
            Verb.REBUILD,
            Verb.RELEASE,
            Verb.PAUSE,
            Verb.RESUME,
        )

    @property
    def slow(self) -> bool:
        """True for commands that may take longer than Slack's 3 s: answered later."""
        return self in (Verb.PLAN, Verb.MISSING, Verb.BUILD, Verb.RETRY, Verb.REBUILD)


USAGE: dict[Verb, str] = {
    Verb.STATUS: "status: targets by state, running builds, feeds, paused or not",
    Verb.PLAN: "plan: what would be built now (polls the feeds, checks the registry)",
    Verb.MISSING: "missing: every target that is not published yet",
    Verb.BUILD: "build <driver> <flatcar> [amd64|arm64]: build one image now",
    Verb.RETRY: "retry <tag>: start the next attempt of a failed target now",
    Verb.REBUILD: "rebuild <tag>: build a published or refused image again (proven again after)",
    Verb.RELEASE: "release <node>: let FLUO go on after a node that could not prove its image",
    Verb.PAUSE: "pause: stop launching new builds",
    Verb.RESUME: "resume: launch builds again",
    Verb.HELP: "help: this list",
}

HELP_TEXT = "\n".join(USAGE[verb] for verb in Verb)
"""One line per subcommand, in a fixed order."""


@dataclass(frozen=True)
class Command:
    """A validated command. Arguments are set only for the verbs that take them."""

    verb: Verb
    driver: str | None = None
    flatcar: str | None = None
    arch: Arch | None = None
    tag: str | None = None
    node: str | None = None

    def __str__(self) -> str:
        """The canonical text (validated characters only: safe for logs and messages)."""
        words = [self.verb.value, self.driver, self.flatcar, self.arch, self.tag, self.node]
        return " ".join(str(word) for word in words if word)
