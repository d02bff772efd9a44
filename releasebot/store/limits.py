"""What the state store keeps of the values it is given, shared by both stores.

How long an error or a build log may be (the SQL columns follow ``ERROR_MAX_CHARS``), that
no NUL character reaches the database, that no credential does either, and which
validators an unchanged poll keeps. Both ``SqlStateStore`` and ``MemoryStateStore`` apply
these, so the contract suite sees the same values from each. Deliberately free of
SQLAlchemy: the in-memory store, which serves dry runs, does not import it.

Every text that comes from outside (a feed's error, a build's message and log tail, a
target's last error, an undelivered event's error, an ignored node's reason, a deletion's
reason, the texts inside an event's payload) is masked by ``edge.redact`` BEFORE it is
stored: a registry or an API server quoting a URL with its password, a build log printing
an ``Authorization`` header, must not sit in clear text in the database and its backups.
Masking comes before cutting, so a cut never leaves half a credential unrecognised.
Migration 0008 masks what older releases stored the same way. The configured secrets are
masked by value at every exit too (logs, Slack, the page); the store masks by form only,
as it does not hold the settings.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from releasebot.domain.targets.models import Validators
from releasebot.edge.redact import redact

ERROR_MAX_CHARS = 1000
"""How much of a poll error is kept: enough for an HTTP status and a reason line, never a
whole response body (bodies can be megabytes and may carry secrets)."""

LOG_TAIL_MAX_CHARS = 4000
"""How much of a failed build's log is kept: the last lines, enough to see the error."""
_MASK_WINDOW_CHARS = 4 * LOG_TAIL_MAX_CHARS
"""How much of a log's end is masked: room for masks shorter than what they hide."""


def fit_error(error: str) -> str:
    """``error`` as the store keeps it: credentials masked, at most ``ERROR_MAX_CHARS``, no
    NUL characters.

    PostgreSQL text cannot hold NUL, and third-party messages occasionally carry one.
    """
    text = redact(error.replace("\x00", "\ufffd"))
    if len(text) > ERROR_MAX_CHARS:
        text = text[: ERROR_MAX_CHARS - 1] + "…"
    return text


def fit_log(log: str | None) -> str | None:
    """The end of a build log as the store keeps it (credentials masked, NUL-free, the last
    ``LOG_TAIL_MAX_CHARS``). Whole lines are masked before the tail is cut, so the cut
    never leaves the rest of a credential unrecognised; a log far longer than the tail is
    first cut at a line's start (masking must not cost a megabyte's scan)."""
    if log is None:
        return None
    window = log[-_MASK_WINDOW_CHARS:]
    if len(window) < len(log) and "\n" in window:
        window = window[window.index("\n") + 1 :]
    return redact(window.replace("\x00", "\ufffd"))[-LOG_TAIL_MAX_CHARS:]


def mask_payload(payload: Mapping[str, Any]) -> dict[str, Any]:
    """An event's payload with every text in it masked (the same rule as ``fit_error``)."""
    return {key: _masked(value) for key, value in payload.items()}


def _masked(value: Any) -> Any:
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, Mapping):
        return {key: _masked(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_masked(item) for item in value]
    return value


def kept_validators(kept: Validators, answer: Validators) -> Validators:
    """The validators after an unchanged answer: each one it carried, else the one kept.

    A 304 need not repeat every validator, and a missing one does not mean it is gone.
    """
    return Validators(
        etag=kept.etag if answer.etag is None else answer.etag,
        last_modified=kept.last_modified if answer.last_modified is None else answer.last_modified,
        body_sha256=kept.body_sha256 if answer.body_sha256 is None else answer.body_sha256,
    )
