"""The lines ``releasebot run`` writes about what its scheduled work did.

``log_feed_outcome`` is the cycle's ``on_outcome``: one line per feed poll (a warning with
the error, else its status). ``run_retention`` is the daily retention job: it runs
``RetentionService`` and writes each deletion (or, as a dry run, each candidate), each
problem and a summary. The CLI prints the same reports its own way (``cli/``); a cycle's
decisions are logged as they are recorded (``service.report``). Deliberately not here:
when any of it runs (``runtime.runner``).
"""

from __future__ import annotations

import logging

from releasebot.service.plan import FeedOutcome
from releasebot.service.retention import RetentionService

_feed_log = logging.getLogger("releasebot.feeds")
_retention_log = logging.getLogger("releasebot.retention")


def log_feed_outcome(outcome: FeedOutcome) -> None:
    """One line for a feed's poll: its status, or a warning with its error."""
    extra = {"feed": outcome.feed, "result": outcome.status.value}
    if outcome.error is not None:
        _feed_log.warning("%s", outcome.error, extra=extra)
    else:
        _feed_log.info("feed %s: %s", outcome.feed, outcome.status.value, extra=extra)


def run_retention(service: RetentionService, *, apply: bool) -> None:
    """The daily retention run: each deletion (or, as a dry run, each candidate) a line."""
    report = service.run(apply=apply)
    log = _retention_log
    if not apply:
        for deletion in report.plan.delete:
            log.info("retention (dry run) would delete %s: %s", deletion.tag, deletion.reason)
    for problem in filter(None, (report.plan.held, report.refused, *report.errors)):
        log.warning("retention: %s", problem)
    log.info(
        "retention: %d deleted, %d candidate(s), %d kept",
        len(report.deleted),
        len(report.plan.delete),
        len(report.plan.keep),
        extra={"dry_run": not apply},
    )
