"""Use case: run a validated chat command and say what happened, as a Slack message.

``CommandService.run`` takes a ``Command`` that ``chat.commands`` has already parsed and
returns a Slack message payload (``response_type``, fallback ``text``, one mrkdwn section).
Every ``ReleasebotError`` becomes a friendly line; nothing here raises to the chat.

Not here: who may run what (``chat.slack`` checks the allowed users and channels before
calling), answering within Slack's 3 s (the front door runs slow commands in the
background), and the pause itself: ``pause`` only sets the store flag ``paused``; the
reconcile cycle reads it and skips launching. A build or retry asked for by hand still
runs while paused: a human asking is the decision.
"""

from __future__ import annotations

import logging
import re
import threading
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from datetime import datetime
from typing import Any

from releasebot.domain.fleet.proof import ProofState, release
from releasebot.domain.ports import NodeAnnotator, StateStore
from releasebot.domain.shared.errors import ReleasebotError, TargetBusyError
from releasebot.domain.shared.versions import Arch
from releasebot.domain.targets.commands import HELP_TEXT, Command, Verb
from releasebot.domain.targets.decisions import Action
from releasebot.domain.targets.lifecycle import NextStep, is_outstanding, next_step
from releasebot.domain.targets.models import TargetRecord, TargetState
from releasebot.edge.text import one_line
from releasebot.service.reconcile import PAUSED_FLAG, CycleReport, ReconcileService

log = logging.getLogger("releasebot.commands")

MAX_LINES = 15
"""List items shown per message; the rest is counted (a chat message is not a report)."""
_MAX_SECTION = 2900  # Slack refuses a section text over 3000 characters
_MAX_DETAIL = 160  # characters of an error shown per line
_SLACK_ID = re.compile(r"[A-Z0-9]{2,20}")

Payload = dict[str, Any]


class CommandService:
    """Runs chat commands against the store and the reconcile service."""

    def __init__(
        self,
        *,
        store: StateStore,
        reconciler: ReconcileService,
        clock: Callable[[], datetime],
        annotator: NodeAnnotator | None = None,
    ) -> None:
        self._annotator = annotator
        self._store = store
        self._reconciler = reconciler
        self._clock = clock
        # Two chat builds of one target at once would race for the same attempt number.
        self._launching = threading.Lock()

    def run(self, command: Command, user: str) -> Payload:
        """The answer to ``command`` asked by Slack user ``user``; never raises
        ``ReleasebotError`` (it becomes the answer)."""
        handlers: dict[Verb, Callable[[Command, str], Payload]] = {
            Verb.STATUS: self._status,
            Verb.PLAN: self._plan,
            Verb.MISSING: self._missing,
            Verb.BUILD: self._build,
            Verb.RETRY: self._retry,
            Verb.REBUILD: self._rebuild,
            Verb.RELEASE: self._release,
            Verb.PAUSE: self._pause,
            Verb.RESUME: self._resume,
            Verb.HELP: self._help,
        }
        try:
            return handlers[command.verb](command, user)
        except ReleasebotError as error:
            log.warning("chat command %s failed: %s", command, error)
            return message(f"Could not run `{command}`: {_escape(str(error))}")

    # -- read-only ---------------------------------------------------------------------

    def _status(self, command: Command, user: str) -> Payload:
        targets = self._store.targets()
        counts = Counter(record.state for record in targets)
        summary = ", ".join(
            f"{counts[state]} {state.value}" for state in TargetState if counts[state]
        )
        paused = self._store.flag(PAUSED_FLAG)
        head = "*Status*: automatic builds are " + (
            f"*paused* (by {_escape(paused)})" if paused is not None else "running"
        )
        lines = [head, f"Targets: {summary or 'none planned yet'}"]
        running = self._store.builds(active_only=True)
        lines.append(f"Running builds: {len(running) or 'none'}")
        lines += _items(
            f"`{b.tag}` {b.arch.value}: job `{b.job_name}` ({b.state.value} since"
            f" {_when(b.created_at)})"
            for b in running
        )
        feeds = self._store.feed_states()
        lines.append("Feeds:" if feeds else "Feeds: not polled yet")
        lines += _items(
            f"{_escape(f.name)}: polled {_when(f.last_polled_at)}, last success"
            f" {_when(f.last_success_at)}"
            + (
                f", last error {_when(f.last_error_at)}: {_detail(f.last_error)}"
                f" ({f.consecutive_failures} in a row)"
                if f.last_error and f.consecutive_failures
                else ""
            )
            for f in feeds
        )
        return message(*lines)

    def _plan(self, command: Command, user: str) -> Payload:
        """What the next cycle launches, asked of the rules the cycle launches by."""
        report = self._reconciler.plan(digest_reads=0)
        now = self._clock()
        paused = self._store.flag(PAUSED_FLAG) is not None
        fleet = None if report.plan is None else report.plan.fleet
        urgent = frozenset() if fleet is None else fleet.urgent_tags()
        plan = self._reconciler.launch_plan(report.targets, urgent)
        if report.errors and not report.targets:
            lines = ["*Plan*: unknown, the registry could not be checked."]
        else:
            when = "once resumed" if paused else "now"
            lines = [
                f"*Plan*: {_count(len(report.targets), 'target')} required, "
                + (
                    f"{len(plan.launch)} would be built {when}:"
                    if plan.launch
                    else f"nothing to build {when}."
                )
            ]
        lines += _items(
            f"`{r.tag}` ({_arches(r.target.arches)}, {r.state.value})" for r in plan.launch
        )
        lines += _items(
            f"then: `{r.tag}` waits for a free build slot (max_concurrent_builds)"
            for r in plan.deferred
        )
        later = [r for r in report.targets if next_step(r, now) is NextStep.WAIT]
        lines += _items(
            f"later: `{r.tag}` retries {_when(r.next_attempt_at)}"
            if r.state is TargetState.RETRYING
            else f"later: `{r.tag}` waits for its inputs, checked again {_when(r.next_attempt_at)}"
            for r in later
        )
        if paused:
            lines.append("Automatic launching is *paused*: `resume` to let the cycle build.")
        return message(*lines, *_problems(report))

    def _missing(self, command: Command, user: str) -> Payload:
        report = self._reconciler.plan(digest_reads=0)
        targets, problems = report.targets, _problems(report)
        if report.errors:  # the registry could not say: show what the store knows
            targets = self._store.targets()
            problems.append("The states shown are as last recorded.")
        missing = [r for r in targets if is_outstanding(r)]
        lines = [
            f"*Missing*: {len(missing)} of {_count(len(targets), 'target')} not published"
            + (":" if missing else ".")
        ]
        lines += _items(
            f"`{r.tag}` {r.state.value}"
            + (f", next attempt {_when(r.next_attempt_at)}" if r.next_attempt_at else "")
            + (f": {_detail(r.last_error)}" if r.last_error else "")
            for r in missing
        )
        return message(*lines, *problems)

    def _help(self, command: Command, user: str) -> Payload:
        lines = ["*/releasebot* subcommands:"]
        for line in HELP_TEXT.splitlines():
            usage, _, meaning = line.partition(": ")
            lines.append(f"• `{_escape(usage)}`: {_escape(meaning)}")
        return message(*lines)

    # -- changes -------------------------------------------------------------------------

    def _build(self, command: Command, user: str) -> Payload:
        assert command.driver is not None
        assert command.flatcar is not None
        driver, flatcar = command.driver, command.flatcar
        arches = None if command.arch is None else frozenset({command.arch})
        return self._launch(
            lambda: self._reconciler.build_by_hand(driver, flatcar, arches=arches, force=False),
            user,
        )

    def _known(self, command: Command) -> TargetRecord | Payload:
        """The stored target ``command`` names, or the answer that it is unknown."""
        assert command.tag is not None
        record = self._store.target(command.tag)
        if record is None:
            return message(
                f"I don't know `{command.tag}`: no plan or build ever named it. "
                "`missing` lists the targets."
            )
        return record

    def _retry(self, command: Command, user: str) -> Payload:
        record = self._known(command)
        if not isinstance(record, TargetRecord):
            return record
        if record.state is TargetState.PUBLISHED:
            return message(
                f"`{record.tag}` is already published ({record.digest or 'digest not read'})."
            )
        if record.state is TargetState.BUILDING:
            return message(f"`{record.tag}` is building right now; nothing to retry.")
        return self._launch(lambda: self._reconciler.retry(record), user)

    def _rebuild(self, command: Command, user: str) -> Payload:
        record = self._known(command)
        if not isinstance(record, TargetRecord):
            return record
        if record.state is not TargetState.REFUSED:
            return message(
                f"`{record.tag}` is {record.state.value}: `rebuild` is for an image a GPU node "
                "refused. `retry` starts a failed build; a forced push of a published image "
                "is only offered by the `releasebot build --force` CLI."
            )
        target = record.target
        driver, flatcar = target.driver_version.text, target.flatcar_version.text
        return self._launch(
            lambda: self._reconciler.build_by_hand(driver, flatcar, arches=None, force=True),
            user,
        )

    def _release(self, command: Command, user: str) -> Payload:
        """A person lets FLUO go on after a node that could not prove its image (they rolled
        it back, or accept it): the proof annotation is set; an image refused stays refused."""
        assert command.node is not None
        if self._annotator is None:
            return message("The after-reboot proof is off (`fleet.proof`): nothing to release.")
        node = command.node
        records = {record.node: record for record in self._store.proofs()}
        record = records.get(node)
        if record is None or record.state not in (ProofState.REFUSED, ProofState.PROVING):
            shown = "no proof" if record is None else f"its proof is {record.state.value}"
            return message(f"`{node}` waits for no proof ({shown}): nothing to release.")
        if not self._annotator.set_proof(node):
            return message(f"`{node}` is not in the cluster any more.")
        released = release(record, node, _who(user), self._clock())
        self._store.save_proofs(proofs=[released])
        log.info("chat: %s released node %s (%s)", user or "chat", node, record.reason)
        tag = f" (`{record.tag}` stays refused)" if record.state is ProofState.REFUSED else ""
        return message(
            f"{_who(user)} released `{node}`: FLUO goes on with the next node{tag}.",
            in_channel=True,
        )

    def _launch(self, start: Callable[[], CycleReport], user: str) -> Payload:
        with self._launching:
            try:
                report = start()
            except TargetBusyError as error:
                return message(
                    f"Not started: {_escape(str(error))} "
                    "(a forced rebuild is only offered by the `releasebot build` CLI)."
                )
        lines = _launched(report, _who(user))
        if any(decision.action.starts_build for decision in report.decisions):
            most = self._reconciler.rules.max_attempts
            lines.append(
                f"A build or retry asked for by a person gets the full retry budget: up to"
                f" {_count(most, 'attempt')} if builds fail for a passing reason."
            )
        return message(*lines, in_channel=True)

    def _pause(self, command: Command, user: str) -> Payload:
        if self._store.flag(PAUSED_FLAG) is not None:
            return message("Automatic builds are already paused. `resume` restarts them.")
        # The flag's value says who paused (``status`` shows it); the cycle reads presence.
        self._store.set_flag(PAUSED_FLAG, user or "chat", self._clock())
        return message(
            f"{_who(user)} paused automatic builds: no new build is launched until `resume`."
            " Running builds finish.",
            in_channel=True,
        )

    def _resume(self, command: Command, user: str) -> Payload:
        if self._store.flag(PAUSED_FLAG) is None:
            return message("Automatic builds are not paused.")
        self._store.set_flag(PAUSED_FLAG, None, self._clock())
        return message(
            f"{_who(user)} resumed automatic builds: the next cycle launches what is missing.",
            in_channel=True,
        )


# -- rendering ---------------------------------------------------------------------------


def message(*lines: str, in_channel: bool = False) -> Payload:
    """A Slack message: ``lines`` (mrkdwn, already escaped) as one section, cut to fit."""
    text = "\n".join(lines)
    if len(text) > _MAX_SECTION:
        text = text[: _MAX_SECTION - 1].rsplit("\n", 1)[0] + "\n…"
    return {
        "response_type": "in_channel" if in_channel else "ephemeral",
        "text": text,
        "blocks": [{"type": "section", "text": {"type": "mrkdwn", "text": text}}],
    }


def _launched(report: CycleReport, who: str) -> list[str]:
    lines = []
    for decision in report.decisions:
        if decision.action.starts_build:
            lines.append(
                f"{who} started `{decision.tag}` ({_escape(decision.detail)}): job `{decision.job}`"
            )
        elif decision.action is Action.REUSED:
            lines.append(f"`{decision.tag}`: reusing {_escape(decision.detail)}")
        elif decision.action is Action.PUBLISHED:
            lines.append(f"`{decision.tag}` is published: {_escape(decision.detail)}")
        elif decision.action in (Action.REJECTED, Action.LAUNCH_POSTPONED):
            lines.append(f"`{decision.tag}` {decision.action}: {_detail(decision.detail)}")
    postponed = any(d.action is Action.LAUNCH_POSTPONED for d in report.decisions)
    if report.errors and not postponed:
        lines += [f"Problem: {_detail(error)}" for error in report.errors]
    return lines or [f"{who} asked for a build; nothing had to be launched."]


def _problems(report: CycleReport) -> list[str]:
    problems = [f"Registry not checked: {_detail(error)}" for error in report.errors]
    if report.plan is not None:
        problems += [
            f"Feed {_escape(o.feed)} failed: {_detail(str(o.error))}" for o in report.plan.failed
        ]
        problems += [f"Warning: {_detail(w)}" for w in report.plan.warnings]
    return problems


def _items(lines: Iterable[str]) -> list[str]:
    items = [f"• {line}" for line in lines]
    if len(items) > MAX_LINES:
        return [*items[:MAX_LINES], f"… and {len(items) - MAX_LINES} more"]
    return items


def _count(number: int, noun: str) -> str:
    return f"{number} {noun}" + ("" if number == 1 else "s")


def _who(user: str) -> str:
    return f"<@{user}>" if _SLACK_ID.fullmatch(user) else "Someone"


def _arches(arches: Sequence[Arch]) -> str:
    return "+".join(arch.value for arch in arches)


def _when(moment: datetime | None) -> str:
    return "never" if moment is None else moment.strftime("%Y-%m-%d %H:%M UTC")


def _detail(text: str | None) -> str:
    return _escape(one_line(text or "", _MAX_DETAIL))


def _escape(text: str) -> str:
    """Slack's three control characters, so store or upstream text cannot ping or link."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
