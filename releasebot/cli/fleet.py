"""The fleet's commands: ``releasebot fleet`` and ``releasebot operator-values``; the tables.

``fleet`` plans as ``plan`` does, but as a dry run (the store and the cluster are read,
nothing is written) and prints the coverage: a verdict per GPU node for the version it
runs and the one it will reboot into, and the GPU nodes releasebot ignores, with why.
``operator-values`` prints the GPU Operator's Helm values (and, with ``--nvidia-drivers``,
the NVIDIADriver objects) that make every Flatcar GPU node pull releasebot's images and
every other GPU node keep its own (``domain.fleet.operator_pools``,
``domain.views.operator_values``):
the driver the cluster runs unless ``--driver`` names one; tags not published yet are
warnings, or with ``--strict`` a refusal (exit 1) that prints nothing. Both read the fleet
even when ``fleet.enabled`` is false.

Deliberately not here: anything but arguments and output (``wiring`` builds, the services
decide). Heavy imports happen inside the commands, so ``releasebot --help`` stays fast.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from releasebot.cli.tables import error, print_coverage

if TYPE_CHECKING:
    from releasebot.config import Settings
    from releasebot.domain.fleet.coverage import Coverage
    from releasebot.service.plan import FeedOutcome
    from releasebot.service.reconcile import CycleReport

EXIT_OK = 0
OnOutcome = Callable[[argparse.Namespace], Callable[["FeedOutcome"], None]]


def add_commands(commands: Any, common: argparse.ArgumentParser, on_outcome: OnOutcome) -> None:
    """Register ``fleet`` and ``operator-values``; ``on_outcome`` makes the feed progress
    callback of a command's arguments."""
    fleet = commands.add_parser(
        "fleet",
        parents=[common],
        help="list the GPU nodes and whether the driver image each one needs exists",
    )
    fleet.add_argument("--format", choices=("table", "json"), default="table")
    fleet.set_defaults(handler=lambda args: _cmd_fleet(args, on_outcome(args)))
    values = commands.add_parser(
        "operator-values",
        parents=[common],
        help="print the GPU Operator's Helm values that pull releasebot's images",
    )
    values.add_argument(
        "--driver",
        metavar="VERSION",
        help="driver for every Flatcar pool (default: what the cluster runs from releasebot's "
        "repository, else the newest driver planned)",
    )
    values.add_argument(
        "--nvidia-drivers",
        action="store_true",
        help="print the NVIDIADriver objects, one per OS version (kubectl apply -f -)",
    )
    values.add_argument(
        "--strict",
        action="store_true",
        help="refuse (exit 1) when a tag the nodes would pull is not published and verified",
    )
    values.set_defaults(handler=lambda args: _cmd_operator_values(args, on_outcome(args)))


def _fleet_plan(
    args: argparse.Namespace, on_outcome: Callable[[FeedOutcome], None]
) -> tuple[Settings, CycleReport, frozenset[str]]:
    """The dry-run plan, and the tags the store holds as published (after its registry check)."""
    from releasebot.config import load_settings
    from releasebot.config.secrets import secret_values
    from releasebot.domain.targets.models import TargetState
    from releasebot.wiring import reconcile_service, with_fleet

    settings = load_settings(args.config)
    args.redact.learn(secret_values(settings))
    if not settings.fleet.enabled:
        error("warning: fleet.enabled is false: releasebot's cycles do not build for this fleet")
    with reconcile_service(with_fleet(settings), on_outcome, dry_run=True, cluster=False) as svc:
        report = svc.plan()
        stored = svc.store.targets(required_only=False)
    states = {record.tag: record.state for record in stored}
    states.update((record.tag, record.state) for record in report.targets)
    published = frozenset(tag for tag, state in states.items() if state is TargetState.PUBLISHED)
    assert report.plan is not None
    for warning in report.plan.warnings:
        error(f"warning: {warning}")
    for problem in report.errors:
        error(f"{problem} (states are shown as last known)")
    return settings, report, published


def coverage_of(report: CycleReport) -> Coverage | None:
    from releasebot.service.reconcile import ReconcileService

    return ReconcileService.coverage(report)


def _cmd_fleet(args: argparse.Namespace, on_outcome: Callable[[FeedOutcome], None]) -> int:
    _, report, _ = _fleet_plan(args, on_outcome)
    coverage = coverage_of(report)
    if coverage is None:
        error("the fleet could not be listed (see above)")
        return 1
    proof = None if report.fleet is None else report.fleet.proof
    proofs = {} if proof is None else {record.node: record for record in proof.records}
    print_coverage(coverage, args.format, sys.stdout, proofs)
    return EXIT_OK


def _cmd_operator_values(
    args: argparse.Namespace, on_outcome: Callable[[FeedOutcome], None]
) -> int:
    from releasebot.domain.fleet.operator import OperatorView, resolve_images
    from releasebot.domain.fleet.operator_pools import choose_drivers
    from releasebot.domain.views.operator_values import (
        nvidia_drivers_yaml,
        render_operator_values,
        values_yaml,
    )

    settings, report, published = _fleet_plan(args, on_outcome)
    assert report.plan is not None
    snapshot = report.plan.snapshot
    if snapshot is None or snapshot.nodes is None:
        error("the fleet could not be listed (see above)")
        return 1
    repository = settings.registry.repository
    planned = [record.target.driver_version for record in report.plan.targets]
    choice = choose_drivers(
        snapshot.nodes, snapshot.operator, repository, asked=args.driver, planned=planned
    )
    view = snapshot.operator or OperatorView(None, None)
    mode = resolve_images(snapshot.nodes, view, repository).mode
    result = render_operator_values(
        repository=repository,
        driver_version=choice.default,
        nodes=snapshot.nodes,
        mode=mode,
        view=snapshot.operator,
        drivers=choice.by_version,
        listed=report.plan.listed,
        published=published,
        warnings=choice.warnings,
        notes=(choice.why,),
    )
    if args.strict and result.unpublished:
        for tag in result.unpublished:
            error(f"refused (--strict): {tag} is not published and verified yet")
        error(
            "no values printed: wait until releasebot fleet shows these images verified, "
            "or name a published driver with --driver"
        )
        return 1
    for warning in result.warnings:
        error(f"warning: {warning}")
    if args.nvidia_drivers:
        if not result.nvidia_drivers:
            error("one OS version: the ClusterPolicy's values suffice, no NVIDIADriver")
        sys.stdout.write(nvidia_drivers_yaml(result))
    else:
        sys.stdout.write(values_yaml(result))
    return EXIT_OK
