"""``releasebot retention [--apply]``: what retention would delete and why, or delete it.

Without ``--apply`` (the default) a dry run: the registry, the store and the cluster are
read, nothing is written or deleted, whatever ``[retention]`` says. ``--apply`` deletes,
and only with ``retention.enabled = true`` (``retention.dry_run`` governs the daily run
of ``releasebot run``, not this command).

Output: one line per tag it would delete (or deleted) with its digest and why; then the
tags it keeps, one line each with why (``--format json`` gives both as JSON). Exit codes:
0 done (nothing to delete included); 1 nothing or not everything was deleted: the fleet
view was unsure, the registry refuses deletes, a delete failed, or the registry or store
could not be read; 2 bad usage or configuration (``--apply`` with retention disabled).
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Any, TextIO

from releasebot.cli.tables import error, write_json
from releasebot.domain.shared.errors import ConfigError

if TYPE_CHECKING:
    from releasebot.service.retention import RetentionReport

EXIT_OK = 0
EXIT_FAILED = 1
KEEP_REASON_CHARS = 100


def add_commands(commands: Any, common: argparse.ArgumentParser) -> None:
    retention = commands.add_parser(
        "retention",
        parents=[common],
        help="print the registry tags nothing needs any more and why (--apply deletes them)",
    )
    retention.add_argument(
        "--apply",
        action="store_true",
        help="delete them (needs retention.enabled = true); default: a dry run",
    )
    retention.add_argument("--format", choices=("table", "json"), default="table")
    retention.set_defaults(handler=_cmd_retention)


def _cmd_retention(args: argparse.Namespace) -> int:
    from releasebot.config import load_settings
    from releasebot.config.secrets import secret_values
    from releasebot.wiring.retention import retention_service

    settings = load_settings(args.config)
    args.redact.learn(secret_values(settings))  # as every command: mask what is configured
    if args.apply and not settings.retention.enabled:
        raise ConfigError(
            "retention.enabled", "is false: set it to true to delete (try without --apply first)"
        )
    if not settings.fleet.enabled:
        error("warning: fleet.enabled is false: retention cannot know what the nodes run")
    with retention_service(settings, apply=args.apply) as service:
        report = service.run(apply=args.apply)
    if args.format == "json":
        write_json(report_json(report), sys.stdout)
    else:
        print_report(report, sys.stdout)
    if report.plan.held is not None:
        error(report.plan.held)
    if report.refused is not None:
        done = len(report.deleted)
        error(
            f"{report.refused}; "
            + (f"{done} tag(s) were deleted before the refusal" if done else "nothing was deleted")
        )
    for problem in report.errors:
        error(problem)
    return EXIT_FAILED if report.failed else EXIT_OK


def print_report(report: RetentionReport, out: TextIO) -> None:
    """``format_report(report)``, in one write."""
    out.write(format_report(report))


def format_report(report: RetentionReport) -> str:
    """Applied: what was deleted as deleted (also when a refusal stopped the run later),
    and, after a refusal, what it left as not deleted; a dry run: what it would delete."""
    lines: list[str] = []
    plan = report.plan
    deleted = {record.tag for record in report.deleted}
    left = 0
    for deletion in plan.delete:
        if not report.applied:
            verb = "would delete"
        elif deletion.tag in deleted:
            verb = "deleted"
        elif report.refused is not None:
            verb = "not deleted"
            left += 1
        else:  # a delete that failed: its error line says why
            continue
        lines.append(f"{verb:<13} {deletion.tag}  {deletion.digest or '-'}\n")
        lines.append(f"{'':<13} {deletion.reason}\n")
    for kept in plan.keep:
        reason = kept.reason
        if len(reason) > KEEP_REASON_CHARS:
            reason = reason[: KEEP_REASON_CHARS - 1] + "…"
        lines.append(f"{'keep':<13} {kept.tag}  {reason}\n")
    if report.applied:
        summary = f"{len(report.deleted)} tag(s) deleted"
        if left:
            summary += f", {left} not deleted (the registry refuses deletes)"
    else:
        summary = f"{len(plan.delete)} tag(s) would delete"
    summary += f", {len(plan.keep)} kept"
    if plan.foreign:
        summary += f", {plan.foreign} other tag(s) not of releasebot's shape left alone"
    if not report.applied and plan.delete:
        summary += " (a dry run: nothing was deleted)"
    lines.append(summary + "\n")
    return "".join(lines)


def report_json(report: RetentionReport) -> dict[str, Any]:
    plan = report.plan
    return {
        "applied": report.applied,
        "held": plan.held,
        "refused": report.refused,
        "delete": [
            {
                "tag": d.tag,
                "digest": d.digest,
                "flatcar_version": d.flatcar.text,
                "reason": d.reason,
            }
            for d in plan.delete
        ],
        "deleted": [
            {
                "tag": r.tag,
                "digest": r.digest,
                "attachments": r.attachments,
                "deleted_at": r.deleted_at.isoformat(),
            }
            for r in report.deleted
        ],
        "keep": [{"tag": k.tag, "reason": k.reason} for k in plan.keep],
        "foreign": plan.foreign,
        "errors": report.errors,
    }
