"""Log lines for the long-running service: JSON for collectors, text for people, no secrets.

``configure_logging`` points the ``releasebot`` and ``apscheduler`` loggers at stderr:

- ``json``: one object per line with ``ts`` (UTC, ISO 8601, milliseconds), ``level``,
  ``logger``, ``message`` and every ``extra`` field the call passed (``tag``, ``job``,
  ``action``, ``detail``, ``feed``, ``reason``...), plus ``exc`` for a traceback;
- ``text``: ``HH:MM:SS level logger: message key=value ...``;
- ``auto``: JSON unless stderr is a terminal (a Pod's stderr never is).

``RedactSecrets`` masks every credential (``edge.redact``: by its form always, and every
known secret value the caller lists: tokens, passwords, the database URL's) by ``***`` in
the message, string extras and tracebacks, before any formatter sees the record: a secret
that slips into an exception message from a library still never reaches the log.

Deliberately not here: what to log (the modules log their decisions with ``extra``), the
one-shot commands' ``releasebot: ...`` lines (``cli``), log shipping or rotation (the
container runtime's business).
"""

from __future__ import annotations

import json
import logging
import sys
import traceback
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any, TextIO

from releasebot.edge.redact import Redactor

FORMATS = ("auto", "json", "text")
_STANDARD = frozenset(vars(logging.LogRecord("", 0, "", 0, "", (), None))) | {
    "message",
    "asctime",
    "taskName",
}


def _extras(record: logging.LogRecord) -> dict[str, Any]:
    return {k: v for k, v in vars(record).items() if k not in _STANDARD and not k.startswith("_")}


class JsonFormatter(logging.Formatter):
    """One JSON object per record; values JSON cannot hold become strings."""

    def format(self, record: logging.LogRecord) -> str:
        stamp = datetime.fromtimestamp(record.created, UTC)
        payload: dict[str, Any] = {
            "ts": stamp.isoformat(timespec="milliseconds").replace("+00:00", "Z"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        for key, value in _extras(record).items():
            payload.setdefault(key, value)
        exc = record.exc_text or (self.formatException(record.exc_info) if record.exc_info else "")
        if exc:
            payload["exc"] = exc
        return json.dumps(payload, default=str, ensure_ascii=False)


class TextFormatter(logging.Formatter):
    """``12:00:00 warning releasebot.runtime.leader: became the leader lease=releasebot-leader``."""

    def format(self, record: logging.LogRecord) -> str:
        stamp = datetime.fromtimestamp(record.created, UTC).strftime("%H:%M:%S")
        message = record.getMessage()
        # Fields the message already shows (a decision's tag and job) are not repeated.
        extras = _extras(record).items()
        fields = " ".join(
            f"{k}={v}" for k, v in extras if v not in ("", None) and str(v) not in message
        )
        line = f"{stamp} {record.levelname.lower()} {record.name}: {message}"
        line = f"{line} {fields}" if fields else line
        exc = record.exc_text or (self.formatException(record.exc_info) if record.exc_info else "")
        return f"{line}\n{exc}" if exc else line


class RedactSecrets(logging.Filter):
    """Masks every credential in a record: the given secret values, and any text shaped
    like one (``edge.redact``) even when no value is known."""

    def __init__(self, secrets: Iterable[str] = ()) -> None:
        super().__init__()
        self.redact = Redactor(secrets)

    def learn(self, secrets: Iterable[str]) -> None:
        """Mask these values too from now on (known once the settings are loaded)."""
        self.redact.learn(secrets)

    def filter(self, record: logging.LogRecord) -> bool:
        record.msg, record.args = self.redact(record.getMessage()), None
        for key, value in _extras(record).items():
            if isinstance(value, str):
                setattr(record, key, self.redact(value))
        if record.exc_info:
            text = record.exc_text or "".join(traceback.format_exception(*record.exc_info))
            record.exc_text, record.exc_info = self.redact(text.rstrip("\n")), None
        elif record.exc_text:
            record.exc_text = self.redact(record.exc_text)
        return True


class _StderrHandler(logging.Handler):
    """Writes to whatever ``sys.stderr`` is at the time (tests swap it)."""

    def __init__(self, stream: TextIO | None = None) -> None:
        super().__init__()
        self._stream = stream

    def emit(self, record: logging.LogRecord) -> None:
        try:
            stream = self._stream or sys.stderr
            stream.write(self.format(record) + "\n")
            stream.flush()
        except Exception:  # noqa: BLE001 - logging must never break the service
            self.handleError(record)


def resolve_format(fmt: str, stream: TextIO | None = None) -> str:
    """``json`` or ``text`` for ``fmt`` (``auto``: JSON unless ``stream`` is a terminal)."""
    if fmt not in FORMATS:
        raise ValueError(f"log format must be one of {', '.join(FORMATS)}, got {fmt!r}")
    if fmt != "auto":
        return fmt
    stream = stream or sys.stderr
    try:
        return "text" if stream.isatty() else "json"
    except (AttributeError, ValueError):  # a closed or fake stream
        return "json"


def configure_logging(
    fmt: str = "auto",
    *,
    level: int = logging.INFO,
    secrets: Iterable[str] = (),
    stream: TextIO | None = None,
) -> logging.Handler:
    """Send ``releasebot`` (at ``level``) and ``apscheduler`` (warnings) logs to stderr.

    Replaces the handlers those loggers had; returns the new handler.
    """
    handler = _StderrHandler(stream)
    handler.setFormatter(
        JsonFormatter() if resolve_format(fmt, stream) == "json" else TextFormatter()
    )
    handler.addFilter(RedactSecrets(secrets))
    for name, logger_level in (("releasebot", level), ("apscheduler", logging.WARNING)):
        logger = logging.getLogger(name)
        for old in list(logger.handlers):
            logger.removeHandler(old)
        logger.addHandler(handler)
        logger.setLevel(logger_level)
        logger.propagate = False
    return handler
