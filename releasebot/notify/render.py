"""Chat messages from outbox events: Block Kit blocks plus a plain-text fallback. Pure.

One build attempt (one ``message_key``) is one message, edited in place: ``render_message``
draws its CURRENT state from every event of the key so far (folded by field, later values
winning), so re-rendering after a crash gives the same message. ``render_thread_reply``
draws one event as the detail reply under it. Feed keys get the feed failing/recovered
message the same way.

What is read is the typed events of ``domain.targets.events`` (a ``match`` on the class, their
fields by name), so mypy holds this module and the code that makes the events to one
shape; a field an event does not carry (an older releasebot's row) is left out.

Every interpolated value is escaped for mrkdwn (``&<>``) and every text is trimmed to
Block Kit's limits. No I/O, no clock, no slack_sdk import: ``tests/unit/test_render.py``
checks the output against golden files and slack-sdk's block models.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, fields, replace
from datetime import datetime
from typing import Any, TypeVar

from releasebot.domain.targets.events import (
    BaseFailed,
    BuildEvent,
    BuildFailed,
    BuildIncompatible,
    BuildRetrying,
    BuildStarted,
    Event,
    EventKind,
    FeedFailing,
    FeedRecovered,
    FleetCovered,
    FleetExposed,
    FleetReadable,
    FleetUnreadable,
    ImageProven,
    ImageRefused,
    RetriesExhausted,
    TagDeleted,
    TagPublished,
)
from releasebot.edge.redact import redact

HEADER_MAX_CHARS = 150
SECTION_MAX_CHARS = 3000
FIELD_MAX_CHARS = 2000
FALLBACK_MAX_CHARS = 3000
"""Slack accepts 40,000 characters of ``text``, but truncates past 4,000 in notifications."""
REASON_MAX_CHARS = 600
"""A failure summary is one line per arch; more is noise in a channel."""
LOG_LINES_MESSAGE = 15
LOG_LINES_THREAD = 40
LOG_LINE_MAX_CHARS = 240
LOG_BLOCK_MAX_CHARS = 2000
"""The log's code block stays well under a section's 3,000 characters."""

Block = dict[str, Any]

_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")
_FLEET_TYPES = (FleetExposed, FleetCovered, FleetUnreadable, FleetReadable)
_LOGGED_TYPES = (BuildRetrying, BuildFailed, RetriesExhausted, BuildIncompatible)
"""The build events whose message shows the last log lines."""
_HEADLINES = {
    EventKind.BUILD_STARTED: ":hammer_and_wrench: Building",
    EventKind.TAG_PUBLISHED: ":white_check_mark: Published",
    EventKind.BUILD_RETRYING: ":repeat: Retrying",
    EventKind.BUILD_FAILED: ":x: Build failed:",
    EventKind.RETRIES_EXHAUSTED: ":x: Retries exhausted:",
    EventKind.BUILD_INCOMPATIBLE: ":no_entry: Driver does not build for this kernel:",
    EventKind.FEED_FAILING: ":warning: Feed failing:",
    EventKind.FEED_RECOVERED: ":white_check_mark: Feed recovered:",
    EventKind.FLEET_EXPOSED: ":rotating_light: No driver image:",
    EventKind.FLEET_COVERED: ":white_check_mark: Driver images ready:",
    EventKind.FLEET_UNREADABLE: ":warning: Cannot list",
    EventKind.FLEET_READABLE: ":white_check_mark: Listing works again for",
    EventKind.TAG_DELETED: ":wastebasket: Deleted",
    EventKind.IMAGE_PROVEN: ":white_check_mark: Proven on a GPU node:",
    EventKind.IMAGE_REFUSED: ":octagonal_sign: Refused on a GPU node:",
    EventKind.BASE_FAILED: ":x: Driver base failed:",
}


@dataclass(frozen=True)
class RenderedMessage:
    text: str
    """The plain-text fallback (notifications, screen readers, old clients)."""
    blocks: list[Block]


def render_message(events_for_key: Sequence[Event], repository: str) -> RenderedMessage:
    """The whole message of one key as it stands after ``events_for_key`` (oldest first)."""
    if not events_for_key:
        raise ValueError("render_message needs at least one event")
    first, last = events_for_key[0], events_for_key[-1]
    state = _State.of(events_for_key)
    if not isinstance(last, BuildEvent | ImageProven):
        return _feed_message(last, state, first.created_at)
    return _build_message(last, state, first.created_at, repository)


def render_thread_reply(event: Event, repository: str) -> RenderedMessage:
    """One event's detail, posted as a reply in the thread of its key's message."""
    state = _State.of([event])
    lines = _status_lines(event, state, repository)
    headline = f"*{_HEADLINES[event.kind]} {_escape(event.subject)}*"
    blocks = [_section("\n".join([headline, *lines]))]
    log = _text(state.log_tail)
    if log:
        blocks.append(_section(_log_block(log, LOG_LINES_THREAD)))
    blocks.append(_context(_when(event.created_at)))
    return RenderedMessage(_summary(event, state, repository), blocks)


# -- the events of one key, folded --------------------------------------------------------------

_E = TypeVar("_E", bound=Event)
_HEAD = frozenset({"message_key", "subject", "created_at"})


@dataclass(frozen=True)
class _State:
    """What the events of one key say together, per kind of message: each field its latest
    meaningful value among the events that carry a field of that name (a later ``None`` or
    empty tuple keeps the earlier value: a failure event does not repeat the jobs the start
    event listed)."""

    build: BuildEvent
    incompatible: BuildIncompatible
    proven: ImageProven
    feed: FeedFailing
    exposed: FleetExposed
    unreadable: FleetUnreadable
    deleted: TagDeleted
    refused: ImageRefused
    base: BaseFailed

    @classmethod
    def of(cls, events: Sequence[Event]) -> _State:
        last = events[-1]

        def folded(kind: type[_E]) -> _E:
            blank = kind(
                message_key=last.message_key, subject=last.subject, created_at=last.created_at
            )
            return _fold(blank, events)

        return cls(
            build=folded(BuildEvent),
            incompatible=folded(BuildIncompatible),
            proven=folded(ImageProven),
            feed=folded(FeedFailing),
            exposed=folded(FleetExposed),
            unreadable=folded(FleetUnreadable),
            deleted=folded(TagDeleted),
            refused=folded(ImageRefused),
            base=folded(BaseFailed),
        )

    @property
    def log_tail(self) -> str | None:
        """The last log lines any event of the key carried (a build's, a base's, a
        refused node's driver pod's)."""
        return self.build.log_tail


def _fold(blank: _E, events: Sequence[Event]) -> _E:
    """``blank`` with each of its fields set to the latest meaningful value of that name."""
    names = [item.name for item in fields(blank) if item.name not in _HEAD]
    found: dict[str, Any] = {}
    for event in events:
        for name in names:
            value = getattr(event, name, None)
            if value is not None and value != ():
                found[name] = value
    return replace(blank, **found)


# -- builds ------------------------------------------------------------------------------


def _build_message(
    last: Event, state: _State, started_at: datetime, repository: str
) -> RenderedMessage:
    tag = last.subject
    lines = _status_lines(last, state, repository)
    blocks = [_header(f"{_HEADLINES[last.kind]} {tag}")]
    facts = _facts(state.build)
    if facts:
        blocks.append({"type": "section", "fields": facts})
    if lines and not isinstance(last, BuildStarted):  # its jobs are among the facts
        blocks.append(_section("\n".join(lines)))
    log = _text(state.build.log_tail)
    if log and isinstance(last, _LOGGED_TYPES):
        blocks.append(_section("*Last log lines*\n" + _log_block(log, LOG_LINES_MESSAGE)))
    if isinstance(last, BuildFailed | RetriesExhausted):
        blocks.append(_section(_next_steps(tag, state.build)))
    updated = _when(last.created_at)
    blocks.append(_context(f"Started {_when(started_at)} · updated {updated}"))
    return RenderedMessage(_summary(last, state, repository), blocks)


def _status_lines(event: Event, state: _State, repository: str) -> list[str]:
    """What this event says, as mrkdwn lines (the message body and the thread reply)."""
    build = state.build
    attempt, most = build.attempt, build.max_attempts
    error = _text(build.error)
    reason = _escape(_cut(error, REASON_MAX_CHARS)) if error else "no reason recorded"
    match event:
        case BuildStarted():
            jobs = build.jobs
            return ["*Jobs*", *(f"`{_escape(job)}`" for job in jobs)] if jobs else []
        case TagPublished():
            return _published_lines(event.subject, build, repository)
        case BuildRetrying():
            lines = [f"*{_attempt_text(attempt, most)} failed:* {reason}"]
            next_at = build.next_attempt_at
            if next_at is not None:
                following = _attempt_text(None if attempt is None else attempt + 1, most)
                lines.append(f"*Next:* {following.lower()} starts {_when(next_at)}")
            return lines
        case BuildFailed():
            return [f"*Reason:* {reason}"]
        case RetriesExhausted():
            tried = f"All {most} attempts" if most else "Every attempt"
            return [f"*{tried} failed.* Last: {reason}"]
        case BuildIncompatible():
            return _incompatible_lines(event.subject, state.incompatible)
        case ImageProven():
            node, when = _text(state.proven.proven_node) or "?", state.proven.proven_at
            proven = f"*Proven on* `{_escape(node)}` {_when(when) if when else ''}".rstrip()
            return [*_published_lines(event.subject, build, repository), proven]
    return _feed_lines(event, state)


def _incompatible_lines(tag: str, state: BuildIncompatible) -> list[str]:
    """NVIDIA's make failed for the pair: what builds instead, and how to stop trying."""
    driver, kernel = _text(state.driver_version), _text(state.kernel_release)
    pair = f"NVIDIA {_escape(driver or '?')} does not compile for kernel {_escape(kernel or '?')}"
    lines = [f"*{pair}*; not retried."]
    branch, built = _text(state.alternative_branch), _text(state.alternative_tag)
    if branch and built:
        lines.append(
            f"*Builds for this kernel:* branch {_escape(branch)} (`{_escape(built)}` is published)"
        )
    else:
        lines.append("*Builds for this kernel:* no other selected branch so far")
    lines.append(
        "*What to do next:* use another branch for these nodes, or list the pair in"
        " `nvidia.incompatible` so the plan skips it; once a fixed driver or recipe is out,"
        f" `/releasebot retry {_escape(tag)}`."
    )
    return lines


def _published_lines(tag: str, state: BuildEvent, repository: str) -> list[str]:
    digest = _text(state.digest)
    pulls = [f"{repository}:{tag}"] + ([f"{repository}@{digest}"] if digest else [])
    lines = ["*Pull*", _code("\n".join(pulls))]
    if digest:
        lines.append(f"*Digest* `{_escape(digest)}`")
    per_arch = state.arch_digests
    if per_arch:
        lines.append("*Per arch*")
        lines.extend(f"• `{_escape(item)}`" for item in per_arch)
    signed_by = _text(state.signed_by)
    if signed_by:
        lines.append(f"*Signed* :lock: key `{_escape(signed_by)}` (SBOM and provenance attached)")
    return lines


def _facts(state: BuildEvent) -> list[Block]:
    channel = _text(state.flatcar_channel)
    flatcar = _text(state.flatcar_version)
    attempt, most = state.attempt, state.max_attempts
    pairs = [
        ("Driver", _text(state.driver_version)),
        ("Flatcar", f"{flatcar} ({channel})" if flatcar and channel else flatcar),
        ("Kernel", _text(state.kernel_release)),
        ("Arches", ", ".join(state.arches) or None),
        ("Attempt", _attempt_text(attempt, most).removeprefix("Attempt ") if attempt else None),
        ("Jobs", "\n".join(f"`{job}`" for job in state.jobs) or None),
    ]
    return [
        {"type": "mrkdwn", "text": _cut(f"*{name}*\n{_escape(value)}", FIELD_MAX_CHARS)}
        for name, value in pairs
        if value
    ]


def _next_steps(tag: str, state: BuildEvent) -> str:
    retry = f"`/releasebot retry {_escape(tag)}`"
    driver, flatcar = _text(state.driver_version), _text(state.flatcar_version)
    text = f"*What to do next:* fix the cause, then retry with {retry} here"
    if driver and flatcar:
        command = f"releasebot build {driver} {flatcar} --force"
        text += f", or `{_escape(command)}` from a shell"
    return text + "."


def _attempt_text(attempt: int | None, most: int | None) -> str:
    if attempt is None:
        return "The attempt"
    return f"Attempt {attempt} of {most}" if most else f"Attempt {attempt}"


def _summary(event: Event, state: _State, repository: str) -> str:
    """The fallback text: one line, no markup beyond escaping, times in UTC."""
    subject, build = event.subject, state.build
    attempt = _attempt_text(build.attempt, build.max_attempts)
    reason = _cut(_text(build.error) or "no reason recorded", REASON_MAX_CHARS)
    retry = f"Retry with /releasebot retry {subject}"
    match event:
        case BuildStarted():
            arches = ", ".join(build.arches) or "every arch"
            text = f"Building {subject} for {arches} ({attempt.lower()})"
        case TagPublished():
            digest = _text(build.digest)
            text = f"Published {repository}:{subject}" + (f"@{digest}" if digest else "")
            signed_by = _text(build.signed_by)
            text += f", signed by {signed_by}" if signed_by else ""
        case BuildRetrying():
            next_at = build.next_attempt_at
            text = f"Retrying {subject}: {attempt.lower()} failed ({reason})"
            text += f"; next attempt at {_utc(next_at)}" if next_at else ""
        case BuildFailed():
            text = f"Build failed: {subject}: {reason}. {retry}"
        case RetriesExhausted():
            text = f"Retries exhausted: {subject}: {reason}. {retry}"
        case BuildIncompatible():
            found = state.incompatible
            driver, kernel = _text(found.driver_version), _text(found.kernel_release)
            branch = _text(found.alternative_branch)
            text = f"Incompatible: {subject}: NVIDIA {driver} does not compile for kernel {kernel}"
            text += (
                f"; branch {branch} builds for it" if branch else "; no other selected branch does"
            )
        case FeedFailing():
            error = _text(state.feed.error)
            text = f"Feed {subject} failing" + (
                f": {_cut(error, REASON_MAX_CHARS)}" if error else ""
            )
        case FeedRecovered():
            text = f"Feed {subject} recovered"
        case ImageRefused():
            node = _text(state.refused.node) or "?"
            text = f"Refused on node {node}: {subject}: {reason}"
        case ImageProven():
            text = f"Proven on node {_text(state.proven.proven_node) or '?'}: {subject}"
        case BaseFailed():
            driver, arch = _text(state.base.driver_version) or "?", _text(state.base.arch) or "?"
            text = f"Driver base failed: {subject}: {reason}; every {driver} image for {arch} waits"
        case TagDeleted():
            repo = _text(state.deleted.repository) or repository
            text = f"Deleted {repo}:{subject}" if repo else f"Deleted {subject}"
            text += (
                f" (Flatcar {_text(state.deleted.flatcar_version)} is needed by nothing any more)"
            )
        case _:
            text = f"{_HEADLINES[event.kind].split(' ', 1)[1]} {subject}"
    return _cut(_escape(text), FALLBACK_MAX_CHARS)


# -- feeds -------------------------------------------------------------------------------


def _feed_message(last: Event, state: _State, started_at: datetime) -> RenderedMessage:
    blocks = [
        _header(f"{_HEADLINES[last.kind]} {last.subject}"),
        _section("\n".join(_feed_lines(last, state))),
        _context(f"First told {_when(started_at)} · updated {_when(last.created_at)}"),
    ]
    return RenderedMessage(_summary(last, state, ""), blocks)


def _feed_lines(event: Event, state: _State) -> list[str]:
    match event:
        case FleetExposed() | FleetCovered() | FleetUnreadable() | FleetReadable():
            return _fleet_lines(event, state)
        case TagDeleted():
            return _deletion_lines(state.deleted)
        case ImageRefused():
            return _refusal_lines(state.refused)
        case BaseFailed():
            return _base_lines(event.subject, state.base)
    feed = state.feed
    since = feed.failing_since
    since_text = _when(since) if since else "a while"
    if isinstance(event, FeedRecovered):
        return [
            f"Polls succeed again (failing since {since_text}, recovered "
            f"{_when(event.created_at)}). Planning uses the fresh data from the next cycle."
        ]
    failures = feed.consecutive_failures
    error = _text(feed.error)
    lines = [f"*Failing since* {since_text}" + (f" ({failures} polls)" if failures else "")]
    if error:
        lines.append(f"*Last error:* {_escape(_cut(error, REASON_MAX_CHARS))}")
    lines.append(
        "releasebot keeps the last good data and keeps polling; builds already planned go on. "
        "Check the feed URL and `/releasebot status`."
    )
    return lines


def _refusal_lines(state: ImageRefused) -> list[str]:
    """A node that could not prove its image: where the rollout stands, what to do."""
    node, tag = _text(state.node) or "?", _text(state.tag)
    error = _cut(_text(state.error) or "no reason recorded", REASON_MAX_CHARS)
    lines = [f"*Node:* `{_escape(node)}`", f"*Reason:* {_escape(error)}"]
    if tag:
        lines.insert(1, f"*Image:* `{_escape(tag)}`")
    if state.image_refused and tag:
        lines.append(
            "The image is *refused*: no other node's reboot gate opens for it. FLUO holds "
            f"`{_escape(node)}` cordoned and reboots no other node. Roll the node back or fix "
            f"it, then `/releasebot release {_escape(node)}`; or `/releasebot rebuild "
            f"{_escape(tag)}` (a rebuilt image is proven again)."
        )
    else:
        lines.append(
            f"FLUO holds `{_escape(node)}` cordoned and reboots no other node. Look at the "
            f"node, then `/releasebot release {_escape(node)}`."
        )
    log = _text(state.log_tail)
    if log:
        lines.append("*Last log lines of the driver pod*\n" + _log_block(log, LOG_LINES_MESSAGE))
    return lines


def _fleet_lines(event: Event, state: _State) -> list[str]:
    """The fleet's alerts: which nodes, which images, what happens next."""
    exposed, error = state.exposed, _text(state.exposed.error)
    since = exposed.exposed_since or state.unreadable.failing_since
    since_text = _when(since) if since else "a while"
    match event:
        case FleetUnreadable():
            return [
                f"*Last error:* {_escape(_cut(error or 'unknown', REASON_MAX_CHARS))}",
                "Planning follows the channel policy until the fleet can be listed; the reboot "
                "gate stays as it is. Check releasebot's ClusterRole and the API server.",
            ]
        case FleetReadable():
            return [f"The fleet is listed again (failing since {since_text})."]
        case FleetCovered():
            return [
                f"No GPU node runs or reboots into it without its image any more ({since_text})."
            ]
    lines = []
    for nodes, count, what in (
        (exposed.running, exposed.running_count or 0, "run it now"),
        (exposed.pending, exposed.pending_count or 0, "will reboot into it"),
    ):
        if nodes:
            more = f" and {count - len(nodes)} more" if count > len(nodes) else ""
            shown = ", ".join(f"`{_escape(node)}`" for node in nodes)
            lines.append(f"*{count} GPU node(s) {what}:* {shown}{more}")
    lines += ["*Images*", *(f"• `{_escape(image)}`" for image in exposed.images)]
    if error:
        lines.append(f"*Why:* {_escape(_cut(error, REASON_MAX_CHARS))}")
    lines.append(
        "A node without its image loses its GPUs at the next driver start. `releasebot fleet` "
        "shows each node's verdict; with the reboot gate on, FLUO holds the reboot."
    )
    return lines


def _base_lines(tag: str, state: BaseFailed) -> list[str]:
    """A driver base that failed for good: one message, whatever number of images wait."""
    driver, arch = _text(state.driver_version) or "?", _text(state.arch) or "?"
    error = _cut(_text(state.error) or "no reason recorded", REASON_MAX_CHARS)
    lines = [
        f"*Base* `{_escape(tag)}` (attempt {state.attempt or '?'})",
        f"*Reason:* {_escape(error)}",
        f"No image of driver {_escape(driver)} for {_escape(arch)} is built until it is: "
        "they wait for it. Read the Job's log, fix the cause, then `/releasebot retry` one "
        "of the waiting tags: that builds the base again.",
    ]
    jobs = state.jobs
    if jobs:
        lines.insert(1, "*Job* " + ", ".join(f"`{_escape(job)}`" for job in jobs))
    return lines


def _deletion_lines(state: TagDeleted) -> list[str]:
    """Retention's deletion of one tag: what, which digest, why, what went with it."""
    repository, digest = _text(state.repository), _text(state.digest)
    lines = [f"*Image* `{_escape(repository or '?')}:{_escape(_text(state.tag) or '?')}`"]
    if digest:
        lines.append(f"*Digest* `{_escape(digest)}`")
    reason = _cut(_text(state.reason) or "not recorded", REASON_MAX_CHARS)
    lines.append(f"*Why:* {_escape(reason)}")
    attachments = state.attachments or 0
    if attachments:
        lines.append(f"*Also deleted:* {attachments} signature/attestation manifest(s)")
    lines.append(
        "Recorded in the store; `releasebot retention` shows what it would delete next and "
        "why. The registry's garbage collection frees the blobs."
    )
    return lines


def _text(value: str | None) -> str | None:
    """A text field; any credential in it (a URL's password, a token) masked."""
    return redact(value) if value else None


# -- Block Kit and mrkdwn ------------------------------------------------------------------


def _header(text: str) -> Block:
    plain = {"type": "plain_text", "text": _cut(text, HEADER_MAX_CHARS), "emoji": True}
    return {"type": "header", "text": plain}


def _section(text: str) -> Block:
    return {"type": "section", "text": {"type": "mrkdwn", "text": _cut(text, SECTION_MAX_CHARS)}}


def _context(text: str) -> Block:
    return {"type": "context", "elements": [{"type": "mrkdwn", "text": text}]}


def _escape(text: str) -> str:
    """Slack's three control characters in mrkdwn (and in the fallback text)."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _code(text: str) -> str:
    # A ``` inside would close the block early: a zero-width space keeps it literal.
    return "```" + _escape(text).replace("```", "`\u200b`\u200b`") + "```"


def _log_block(log: str, max_lines: int) -> str:
    """The last lines of a build log as a code block, within ``LOG_BLOCK_MAX_CHARS``."""
    clean = _CONTROL.sub("", _ANSI.sub("", log.replace("\r\n", "\n").replace("\r", "\n")))
    lines = [_cut(line.rstrip(), LOG_LINE_MAX_CHARS) for line in clean.strip("\n").split("\n")]
    lines = lines[-max_lines:]
    while len(lines) > 1 and len(_code("\n".join(lines))) > LOG_BLOCK_MAX_CHARS:
        lines = lines[1:]
    return _cut(_code("\n".join(lines)), LOG_BLOCK_MAX_CHARS)


def _when(moment: datetime) -> str:
    """A time every reader sees in their own zone; the fallback after ``|`` is UTC."""
    return f"<!date^{int(moment.timestamp())}^{{date_short_pretty}} {{time}}|{_utc(moment)}>"


def _utc(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%d %H:%M UTC")


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"
