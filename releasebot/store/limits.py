"""What the state store keeps of the values it is given, shared by both stores.

How long an error or a build log may be (the SQL columns follow ``ERROR_MAX_CHARS``), that
no NUL character reaches the database, and which validators an unchanged poll keeps. Both
``SqlStateStore`` and ``MemoryStateStore`` apply these, so the contract suite sees the same
values from each. Deliberately free of SQLAlchemy: the in-memory store, which serves dry
runs, does not import it.
"""

from __future__ import annotations

from releasebot.domain.models import Validators

ERROR_MAX_CHARS = 1000
"""How much of a poll error is kept: enough for an HTTP status and a reason line, never a
whole response body (bodies can be megabytes and may carry secrets)."""

LOG_TAIL_MAX_CHARS = 4000
"""How much of a failed build's log is kept: the last lines, enough to see the error."""


def fit_error(error: str) -> str:
    """``error`` as the store keeps it: at most ``ERROR_MAX_CHARS``, no NUL characters.

    PostgreSQL text cannot hold NUL, and third-party messages occasionally carry one.
    """
    text = error.replace("\x00", "\ufffd")
    if len(text) > ERROR_MAX_CHARS:
        text = text[: ERROR_MAX_CHARS - 1] + "…"
    return text


def fit_log(log: str | None) -> str | None:
    """The end of a build log as the store keeps it (NUL-free, ``LOG_TAIL_MAX_CHARS``)."""
    return None if log is None else log.replace("\x00", "\ufffd")[-LOG_TAIL_MAX_CHARS:]


def kept_validators(kept: Validators, answer: Validators) -> Validators:
    """The validators after an unchanged answer: each one it carried, else the one kept.

    A 304 need not repeat every validator, and a missing one does not mean it is gone.
    """
    return Validators(
        etag=kept.etag if answer.etag is None else answer.etag,
        last_modified=kept.last_modified if answer.last_modified is None else answer.last_modified,
        body_sha256=kept.body_sha256 if answer.body_sha256 is None else answer.body_sha256,
    )
