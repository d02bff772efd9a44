"""The ``releasebot`` command: parse arguments, load settings, wire, call the service.

Thin on purpose. Heavy imports (SQLAlchemy, httpx) happen inside the commands so that
``releasebot --help`` stays fast. Every ``ReleasebotError`` becomes one line on stderr and
an exit code; no traceback reaches the user for a problem they can fix.

Exit codes: 0 success; 1 the work could not be done (nothing could be planned, the store is
unreachable, read-only or newer than this releasebot, a registry or the API server
refused); 2 bad usage or configuration. Every line on stderr passes through the credential
mask (``logs.RedactSecrets``: by form always, by value once the settings are loaded).
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from releasebot import __version__
from releasebot.cli import fleet, retention
from releasebot.cli.tables import print_coverage, print_targets, target_json, write_json, write_line
from releasebot.domain.shared.errors import (
    ConfigError,
    ReleasebotError,
    UnknownTargetError,
    VersionError,
)
from releasebot.domain.targets.decisions import Action
from releasebot.logs import RedactSecrets

if TYPE_CHECKING:
    from releasebot.config import Settings
    from releasebot.domain.ports import FleetSource, Registry
    from releasebot.service.plan import FeedOutcome
    from releasebot.service.reconcile import CycleReport, ReconcileService

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    args.redact = RedactSecrets()  # learns the secret values once the settings are loaded
    _configure_logging(quiet=getattr(args, "quiet", False), redact=args.redact)
    if not getattr(args, "handler", None):
        parser.print_help(sys.stderr)
        return EXIT_USAGE
    try:
        return int(args.handler(args))
    except (ConfigError, VersionError, UnknownTargetError) as error:
        _error(str(error), args)
        return EXIT_USAGE
    except ReleasebotError as error:
        _error(str(error), args)
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
        help="run the plan offline on the small feeds and the simulated fleet shipped with it",
    )
    demo.add_argument("--format", choices=("table", "json"), default="table")
    demo.add_argument(
        "--dir",
        metavar="DIR",
        help="keep the demo's SQLite database in DIR (default: a temporary directory)",
    )
    demo.add_argument(
        "--serve",
        action="store_true",
        help="then serve the coverage page on it, with a few simulated builds, until Ctrl-C",
    )
    demo.add_argument(
        "--listen",
        metavar="HOST:PORT",
        default="127.0.0.1:8080",
        help="where --serve listens (default 127.0.0.1:8080; port 0: any free port)",
    )
    demo.set_defaults(handler=_cmd_demo)
    fleet.add_commands(commands, common, _on_outcome)
    retention.add_commands(commands, common)

    reconcile = commands.add_parser(
        "reconcile",
        parents=[common],
        help="one cycle: poll, plan, follow builds, check the registry, launch what is missing",
    )
    reconcile.add_argument("--once", action="store_true", help="run one cycle and exit")
    reconcile.add_argument(
        "--dry-run",
        action="store_true",
        help="print the Job manifests the cycle would create; change nothing",
    )
    reconcile.set_defaults(handler=_cmd_reconcile)

    run = commands.add_parser(
        "run",
        parents=[common],
        help="the service: reconcile on a schedule, serve probes, metrics and Slack commands",
    )
    run.add_argument(
        "--log-format",
        choices=("auto", "json", "text"),
        help="log lines as JSON or text (default: run.log_format; auto = JSON unless a TTY)",
    )
    run.set_defaults(handler=_cmd_run)

    build = commands.add_parser(
        "build", parents=[common], help="launch the build of one target now, by hand"
    )
    build.add_argument("driver", help="NVIDIA driver version, e.g. 580.178.04")
    build.add_argument("flatcar", help="Flatcar version, e.g. 4593.2.5")
    build.add_argument(
        "--arch",
        action="append",
        choices=("amd64", "arm64"),
        help="build only this arch (repeatable; default: the configured arches)",
    )
    build.add_argument(
        "--force", action="store_true", help="build and push again even if the tag exists"
    )
    build.add_argument(
        "--dry-run", action="store_true", help="print the Job manifests; change nothing"
    )
    build.set_defaults(handler=_cmd_build)

    verify = commands.add_parser(
        "verify",
        parents=[common],
        help="check a published tag's signatures, SBOM and provenance against the public key",
    )
    verify.add_argument("tag", help="a tag of registry.repository, e.g. 580.178.04-flatcar4593.2.5")
    verify.set_defaults(handler=_cmd_verify)

    recipe = commands.add_parser("recipe", help="the driver image recipe releasebot ships")
    recipe_commands = recipe.add_subparsers(
        title="recipe commands", metavar="COMMAND", required=True
    )
    configmap = recipe_commands.add_parser(
        "configmap",
        parents=[common],
        help="print the recipe as the ConfigMap the build Jobs mount (kubectl apply -f -)",
    )
    configmap.set_defaults(handler=_cmd_recipe_configmap)

    config = commands.add_parser("config", help="the settings file")
    config_commands = config.add_subparsers(
        title="config commands", metavar="COMMAND", required=True
    )
    example = config_commands.add_parser(
        "example",
        help="print every setting with its default and what it means, as TOML "
        "(config/releasebot.example.toml)",
    )
    example.set_defaults(handler=_cmd_config_example)

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
    from releasebot.config.secrets import secret_values

    settings = load_settings(args.config)
    args.redact.learn(secret_values(settings))
    return settings


def _cmd_plan(args: argparse.Namespace) -> int:
    return _run_plan(_load(args), args)


def _cmd_demo(args: argparse.Namespace) -> int:
    """The plan on the shipped feeds, for a simulated fleet, then that fleet's coverage."""
    from releasebot.wiring import demo_fleet_source, demo_registry, demo_settings

    base = _load(args)
    registry, nodes = demo_registry(base), demo_fleet_source()
    if args.dir is not None:
        directory = Path(args.dir)
        try:
            directory.mkdir(parents=True, exist_ok=True)
        except OSError as error:
            raise ConfigError("--dir", f"cannot use {directory}: {error.strerror}") from None
        return _demo(demo_settings(base, directory), args, registry, nodes)
    with tempfile.TemporaryDirectory(prefix="releasebot-demo-") as temporary:
        return _demo(demo_settings(base, Path(temporary)), args, registry, nodes)


def _demo(
    settings: Settings, args: argparse.Namespace, registry: Registry, nodes: FleetSource
) -> int:
    code = _run_plan(settings, args, registry, nodes)
    if code != EXIT_OK or not args.serve:
        return code
    import signal
    import threading

    from releasebot.wiring.web import serve_demo

    stop = threading.Event()
    for number in (signal.SIGINT, signal.SIGTERM):
        signal.signal(number, lambda _number, _frame: stop.set())

    def ready(url: str) -> None:
        sys.stdout.write(f"\nThe coverage page: {url}  (Ctrl-C stops)\n")
        sys.stdout.flush()

    return serve_demo(settings, args.listen, stop, ready)


def _run_plan(
    settings: Settings,
    args: argparse.Namespace,
    registry: Registry | None = None,
    fleet_source: FleetSource | None = None,
) -> int:
    """Plan and print the targets; with ``fleet_source`` (the demo), the coverage too."""
    from releasebot.wiring import reconcile_service

    with reconcile_service(
        settings, _on_outcome(args), cluster=False, registry=registry, fleet_source=fleet_source
    ) as service:
        report = service.plan()
    assert report.plan is not None
    for warning in report.plan.warnings:
        _error(f"warning: {warning}", args)
    for problem in report.errors:
        _error(f"{problem} (states are shown as last known)", args)
    targets = report.targets or report.plan.targets
    coverage = fleet.coverage_of(report) if fleet_source is not None else None
    if coverage is None:
        print_targets(targets, args.format, sys.stdout)
    elif args.format == "json":
        from releasebot.domain.fleet.coverage import coverage_json
        from releasebot.wiring import utc_now

        now = utc_now()
        both = {
            "targets": [target_json(t, now) for t in targets],
            "fleet": coverage_json(coverage),
        }
        write_json(both, sys.stdout)
    else:
        print_targets(targets, args.format, sys.stdout)
        sys.stdout.write("\nThe simulated fleet:\n")
        print_coverage(coverage, args.format, sys.stdout)
    if not report.plan.targets and report.plan.failed:
        _error("nothing could be planned: fix the failing feeds above and run again", args)
        return EXIT_FAILED
    if report.errors:  # the registry (or the store) could not say: the states are guesses
        return EXIT_FAILED
    return EXIT_OK


def _on_outcome(args: argparse.Namespace) -> Callable[[FeedOutcome], None]:
    def on_outcome(outcome: FeedOutcome) -> None:
        if outcome.error is not None:
            _error(str(outcome.error), args)
        elif not args.quiet:
            _progress(outcome)

    return on_outcome


def _cmd_reconcile(args: argparse.Namespace) -> int:
    from releasebot.wiring import reconcile_service

    if not args.once:
        _error("reconcile runs one cycle: pass --once")
        return EXIT_USAGE
    settings = _load(args)
    with reconcile_service(settings, _on_outcome(args), dry_run=args.dry_run) as service:
        if args.dry_run:
            report = service.cycle()
        else:
            from releasebot.wiring.guard import guarded

            # Overlapping runs (a slow CronJob run, the Deployment's leader) are harmless:
            # the database guard lets one cycle write at a time; the other skips.
            with guarded(settings) as held:
                if not held:
                    _say(args, "another cycle is running (the database guard is held): skipped")
                    return EXIT_OK
                report = service.cycle()
                _deliver(settings, service)  # under the guard: one deliverer at a time
    return _print_report(report, args)


def _deliver(settings: Settings, service: ReconcileService) -> None:
    """Tell Slack what the cycle did (CronJob mode has no other chance to)."""
    from releasebot.service.delivery import deliver_now, discard_now
    from releasebot.wiring import utc_now
    from releasebot.wiring.slack import notification_service

    notifications = notification_service(settings, service.store)
    if notifications is None:  # nobody delivers: drop what an older releasebot queued
        discard_now(service.store, utc_now)
        return
    delivered = deliver_now(notifications, utc_now)
    if delivered is not None and delivered.backlog:
        _error(f"{delivered.backlog} notification(s) wait for Slack; the next run sends them")


def _cmd_run(args: argparse.Namespace) -> int:
    from releasebot.wiring.run import run_service

    return run_service(_load(args), log_format=args.log_format, quiet=args.quiet)


def _cmd_build(args: argparse.Namespace) -> int:
    from releasebot.domain.shared.versions import Arch
    from releasebot.wiring import reconcile_service

    settings = _load(args)
    arches = frozenset(Arch(arch) for arch in args.arch) if args.arch else None
    with reconcile_service(settings, _on_outcome(args), dry_run=args.dry_run) as service:
        report = service.build_by_hand(args.driver, args.flatcar, arches=arches, force=args.force)
    return _print_report(report, args)


def _print_report(report: CycleReport, args: argparse.Namespace) -> int:
    if args.dry_run:
        write_json(report.manifests, sys.stdout)
    else:
        lines = []
        for decision in report.decisions:
            job = f" [{decision.job}]" if decision.job else ""
            detail = f": {decision.detail}" if decision.detail else ""
            lines.append(f"{decision.action} {decision.tag}{job}{detail}\n")
        sys.stdout.write("".join(lines))
    for problem in report.errors:
        _error(problem, args)
    # Each refusal's reason on stderr itself: the ``rejected`` lines above went to stdout,
    # which a script keeps apart (or a pipe swallows), with --quiet as without.
    refused = [decision for decision in report.decisions if decision.action is Action.REJECTED]
    for decision in refused:
        _error(f"{decision.tag}: {decision.detail}", args)
    rejected = len(refused)
    if rejected:
        _error(
            f"the API server refused {rejected} Job(s), each said why above: fix the "
            "cause, then `releasebot build` or `/releasebot retry` the tags",
            args,
        )
    planned = report.plan is not None and bool(report.plan.targets)
    unplanned = report.plan is not None and report.plan.failed and not planned
    if report.errors or rejected or unplanned:
        return EXIT_FAILED
    return EXIT_OK


def _cmd_verify(args: argparse.Namespace) -> int:
    """One line: ``verified …`` on stdout (exit 0), or why not on stderr (exit 1)."""
    from releasebot.domain.shared.errors import VerificationError
    from releasebot.wiring import verify_tag

    settings = _load(args)
    shown = f"{settings.registry.repository}:{args.tag}"
    try:
        verification = verify_tag(settings, args.tag)
    except VerificationError as error:
        _error(f"NOT verified {shown}: {error}", args)
        return EXIT_FAILED
    write_line(f"verified {shown}@{verification.digest}: {verification.summary()}", sys.stdout)
    return EXIT_OK


def _cmd_recipe_configmap(args: argparse.Namespace) -> int:
    from releasebot.wiring import recipe_manifest

    write_json(recipe_manifest(_load(args)), sys.stdout)
    return EXIT_OK


def _cmd_config_example(args: argparse.Namespace) -> int:
    from releasebot.config.example import render_example

    sys.stdout.write(render_example())
    return EXIT_OK


def _cmd_db_upgrade(args: argparse.Namespace) -> int:
    from releasebot.wiring import db_upgrade

    _say(args, f"database at {db_upgrade(_load(args).database.url, args.revision)}")
    return EXIT_OK


def _cmd_db_downgrade(args: argparse.Namespace) -> int:
    from releasebot.wiring import db_downgrade

    _say(args, f"database at {db_downgrade(_load(args).database.url, args.revision)}")
    return EXIT_OK


def _cmd_db_current(args: argparse.Namespace) -> int:
    from releasebot.wiring import db_current

    write_line(db_current(_load(args).database.url), sys.stdout)
    return EXIT_OK


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


class _StderrHandler(logging.Handler):
    """Writes to whatever ``sys.stderr`` is at the time (tests swap it)."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            sys.stderr.write(self.format(record) + "\n")
        except Exception:  # noqa: BLE001 - logging must never break the command
            self.handleError(record)


def _configure_logging(*, quiet: bool, redact: RedactSecrets) -> None:
    """Adapters' warnings (retries, skipped work) as ``releasebot: ...`` lines on stderr,
    credentials masked by ``redact``."""
    logger = logging.getLogger("releasebot")
    if not logger.handlers:
        stderr = _StderrHandler()
        stderr.setFormatter(logging.Formatter("releasebot: %(message)s"))
        logger.addHandler(stderr)
        logger.propagate = False
    for handler in logger.handlers:
        for old in [f for f in handler.filters if isinstance(f, RedactSecrets)]:
            handler.removeFilter(old)
        handler.addFilter(redact)
    logger.setLevel(logging.ERROR if quiet else logging.WARNING)


def _say(args: argparse.Namespace, message: str) -> None:
    if not args.quiet:
        _error(message, args)


def _error(message: str, args: argparse.Namespace | None = None) -> None:
    """One ``releasebot: ...`` line on stderr, every credential in it masked."""
    redact = getattr(args, "redact", None) or RedactSecrets()
    write_line(f"releasebot: {redact.redact(message)}", sys.stderr)
