"""The ``releasebot`` command: parse arguments, load settings, wire, call the service.

Thin on purpose. Heavy imports (SQLAlchemy, httpx) happen inside the commands so that
``releasebot --help`` stays fast. Every ``ReleasebotError`` becomes one line on stderr and
an exit code; no traceback reaches the user for a problem they can fix.

Exit codes: 0 success; 1 the work could not be done (nothing could be planned, the store is
unreachable); 2 bad usage or configuration.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from releasebot import __version__
from releasebot.domain.errors import ConfigError, ReleasebotError

if TYPE_CHECKING:
    from releasebot.config import Settings
    from releasebot.domain.models import TargetRecord
    from releasebot.service.plan import FeedOutcome, PlanResult

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if not getattr(args, "handler", None):
        parser.print_help(sys.stderr)
        return EXIT_USAGE
    try:
        return int(args.handler(args))
    except ConfigError as error:
        _error(str(error))
        return EXIT_USAGE
    except ReleasebotError as error:
        _error(str(error))
        return EXIT_FAILED
    except KeyboardInterrupt:
        _error("interrupted")
        return 130
    except BrokenPipeError:
        # The reader went away (`releasebot plan | head`): not an error worth a traceback.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return EXIT_FAILED


def _parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--config",
        metavar="PATH",
        help="TOML settings file (default: $RELEASEBOT_CONFIG, else built-in defaults)",
    )
    common.add_argument("--quiet", "-q", action="store_true", help="no progress lines on stderr")

    parser = argparse.ArgumentParser(
        prog="releasebot",
        description="Keeps NVIDIA driver images ready for every Flatcar version a fleet runs.",
    )
    parser.add_argument("--version", action="version", version=f"releasebot {__version__}")
    commands = parser.add_subparsers(title="commands", metavar="COMMAND")

    plan = commands.add_parser(
        "plan", parents=[common], help="poll the feeds and print the targets that must exist"
    )
    plan.add_argument("--format", choices=("table", "json"), default="table")
    plan.set_defaults(handler=_cmd_plan)

    demo = commands.add_parser(
        "demo",
        parents=[common],
        help="run the plan offline on the small feeds shipped with releasebot",
    )
    demo.add_argument("--format", choices=("table", "json"), default="table")
    demo.add_argument(
        "--dir",
        metavar="DIR",
        help="keep the demo's SQLite database in DIR (default: a temporary directory)",
    )
    demo.set_defaults(handler=_cmd_demo)

    db = commands.add_parser("db", help="manage the state store's schema")
    db_commands = db.add_subparsers(title="db commands", metavar="COMMAND", required=True)
    upgrade = db_commands.add_parser(
        "upgrade", parents=[common], help="migrate the database to the newest schema"
    )
    upgrade.add_argument("revision", nargs="?", default="head")
    upgrade.set_defaults(handler=_cmd_db_upgrade)
    downgrade = db_commands.add_parser(
        "downgrade", parents=[common], help="migrate the database back to REVISION"
    )
    downgrade.add_argument("revision", help="target revision, e.g. base or 0001")
    downgrade.set_defaults(handler=_cmd_db_downgrade)
    current = db_commands.add_parser("current", parents=[common], help="print the schema revision")
    current.set_defaults(handler=_cmd_db_current)
    return parser


def _load(args: argparse.Namespace) -> Settings:
    from releasebot.config import load_settings

    return load_settings(args.config)


def _cmd_plan(args: argparse.Namespace) -> int:
    return _run_plan(_load(args), args)


def _cmd_demo(args: argparse.Namespace) -> int:
    from releasebot.wiring import demo_settings

    base = _load(args)
    if args.dir is not None:
        directory = Path(args.dir)
        directory.mkdir(parents=True, exist_ok=True)
        return _run_plan(demo_settings(base, directory), args)
    with tempfile.TemporaryDirectory(prefix="releasebot-demo-") as temporary:
        return _run_plan(demo_settings(base, Path(temporary)), args)


def _run_plan(settings: Settings, args: argparse.Namespace) -> int:
    from releasebot.wiring import plan_service

    def on_outcome(outcome: FeedOutcome) -> None:
        if outcome.error is not None:
            _error(str(outcome.error))
        elif not args.quiet:
            _progress(outcome)

    with plan_service(settings, on_outcome) as service:
        result = service.plan()
    for warning in result.warnings:
        _error(f"warning: {warning}")
    _print_targets(result, args.format, sys.stdout)
    if not result.targets and result.failed:
        _error("nothing could be planned: fix the failing feeds above and run again")
        return EXIT_FAILED
    return EXIT_OK


def _cmd_db_upgrade(args: argparse.Namespace) -> int:
    from releasebot.store import migrate
    from releasebot.store.engine import make_engine

    engine = make_engine(_load(args).database.url)
    try:
        migrate.upgrade(engine, args.revision)
        _say(args, f"database at {migrate.current_revision(engine) or 'base'}")
    finally:
        engine.dispose()
    return EXIT_OK


def _cmd_db_downgrade(args: argparse.Namespace) -> int:
    from releasebot.store import migrate
    from releasebot.store.engine import make_engine

    engine = make_engine(_load(args).database.url)
    try:
        migrate.downgrade(engine, args.revision)
        _say(args, f"database at {migrate.current_revision(engine) or 'base'}")
    finally:
        engine.dispose()
    return EXIT_OK


def _cmd_db_current(args: argparse.Namespace) -> int:
    from releasebot.store import migrate
    from releasebot.store.engine import make_engine

    engine = make_engine(_load(args).database.url)
    try:
        print(migrate.current_revision(engine) or "base")
    finally:
        engine.dispose()
    return EXIT_OK


def _print_targets(result: PlanResult, fmt: str, out: TextIO) -> None:
    if fmt == "json":
        json.dump([_target_json(target) for target in result.targets], out, indent=2)
        out.write("\n")
        return
    if not result.targets:
        out.write("no targets\n")
        return
    header = ("TAG", "DRIVER", "FLATCAR", "CHANNEL", "KERNEL", "ARCHES", "STATE")
    rows = [header] + [
        (
            t.tag,
            t.driver_version,
            t.flatcar_version,
            t.flatcar_channel,
            t.kernel,
            ",".join(t.arches),
            t.state.value,
        )
        for t in result.targets
    ]
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    for row in rows:
        cells = (cell.ljust(width) for cell, width in zip(row, widths, strict=True))
        out.write("  ".join(cells).rstrip() + "\n")


def _target_json(target: TargetRecord) -> dict[str, Any]:
    return {
        "tag": target.tag,
        "driver_version": target.driver_version,
        "driver_branch": target.driver_branch,
        "flatcar_version": target.flatcar_version,
        "flatcar_channel": target.flatcar_channel,
        "kernel": target.kernel,
        "kernel_release": f"{target.kernel}-flatcar",
        "arches": [arch.value for arch in target.arches],
        "state": target.state.value,
        "first_planned_at": target.first_planned_at.isoformat(),
    }


def _progress(outcome: FeedOutcome) -> None:
    seconds = outcome.elapsed.total_seconds()
    detail = outcome.status.value
    if outcome.releases:
        detail += f", {outcome.releases} releases"
    if outcome.requests == 0:
        via = "local file"
    else:
        via = f"{outcome.requests} request" + ("s" if outcome.requests > 1 else "")
    _error(f"feed {outcome.feed}: {detail} ({via}, {seconds:.2f} s)")


def _say(args: argparse.Namespace, message: str) -> None:
    if not args.quiet:
        _error(message)


def _error(message: str) -> None:
    print(f"releasebot: {message}", file=sys.stderr)
