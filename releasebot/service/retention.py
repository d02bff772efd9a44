"""Use case: retention, the deletion of registry tags nothing needs any more.

``RetentionService.run`` reads, through the ports, what ``domain.fleet.retention`` decides from:
the repository's tags (``RegistryJanitor``), the fleet as listed now (``FleetSource``; no
source, or a listing that fails, holds everything), the store's fleet history, when each
Flatcar feed last listed each release, and the current targets. It resolves the digest of
every tag that could share a manifest with a candidate (a delete by digest removes every
tag on it), and with ``apply`` deletes each candidate's manifest, then what is attached to
it (cosign signatures and attestations, SBOM and provenance referrers), and records each
deletion with its Slack event in one transaction, so each is told once. A manifest already
gone (a delete whose answer was lost, then retried) is treated as deleted: its attachments
are deleted and it is recorded, its reason saying it was already gone. Before anything is
deleted it asks what every tag's digest reaches (``RegistryJanitor.reachable``: an index's
images, signatures, attestations, referrers); whatever a kept tag reaches is never
deleted, even when a deleted tag's referrers answer lists it (an error line says so), and
when it cannot be read nothing is deleted.

A registry that refuses deletes stops the run at its first refusal: what was deleted
before it (normally nothing: a registry refuses every delete or none) is recorded and in
the report's ``deleted``, nothing after it is tried, the report says so in one line.
Problems are the report's, for the caller to show (the CLI's lines, the service's log);
each deletion is logged here.
Deliberately not here: the decision (``domain.fleet.retention``), HTTP (``registry/janitor.py``),
scheduling (``runtime.runner``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from releasebot.domain.fleet.nodes import ParsedNode
from releasebot.domain.fleet.retention import (
    DEFAULT_AFTER,
    DEFAULT_MAX_DELETIONS,
    Deletion,
    DeletionRecord,
    RetentionInputs,
    RetentionPlan,
    guard_shared_digests,
    hold_plan,
    plan_retention,
)
from releasebot.domain.ports import FleetSource, RegistryJanitor, StateStore
from releasebot.domain.shared.errors import DeleteRefusedError, ReleasebotError
from releasebot.domain.targets.events import TagDeleted, deletion_key

log = logging.getLogger("releasebot.retention")

ATTACHMENT_PREFIX = "sha256-"
"""Tags signing writes (``sha256-<hex>.sig``/``.att``, the referrers tag): deleted with
their subject, never on their own, and never sharing a digest with an image tag."""


@dataclass
class RetentionReport:
    """What one run decided and did."""

    plan: RetentionPlan
    applied: bool
    deleted: list[DeletionRecord] = field(default_factory=list)
    refused: str | None = None
    """The registry refused deletes (the one line to show); nothing after the refusal was
    deleted, what was before it is in ``deleted``."""
    errors: list[str] = field(default_factory=list)
    """Problems that did not stop the run (an attachment that could not be deleted)."""

    @property
    def failed(self) -> bool:
        return self.plan.held is not None or self.refused is not None or bool(self.errors)


class RetentionService:
    """Decides, and with ``apply`` deletes, the tags nothing needs; one per process."""

    def __init__(
        self,
        *,
        store: StateStore,
        janitor: RegistryJanitor,
        fleet: FleetSource | None,
        clock: Callable[[], datetime],
        after: timedelta = DEFAULT_AFTER,
        max_deletions: int = DEFAULT_MAX_DELETIONS,
    ) -> None:
        self._store = store
        self._janitor = janitor
        self._fleet = fleet
        self._clock = clock
        self._after = after
        self._max_deletions = max_deletions

    def run(self, *, apply: bool) -> RetentionReport:
        """Decide; with ``apply`` delete. Raises the registry's and store's errors when
        what the decision needs cannot be read (then nothing was deleted)."""
        nodes, problem, unsure = self._nodes()
        now = self._clock()
        tags = self._janitor.tags()
        inputs = RetentionInputs(
            tags=tags,
            nodes=nodes,
            listings=self._store.flatcar_listings(),
            targets=self._store.targets(required_only=True),
            history=self._store.fleet_nodes() if nodes is not None else (),
            fleet_problem=problem,
            fleet_unsure=unsure,
        )
        plan = plan_retention(inputs, now=now, after=self._after, max_deletions=self._max_deletions)
        if plan.held is not None:
            return RetentionReport(plan, applied=apply)
        if plan.delete:
            digests = {
                tag: self._janitor.digest(tag)
                for tag in sorted(tags)
                if not tag.startswith(ATTACHMENT_PREFIX)
            }
            # Before anything is deleted: everything each tag reaches, so that no delete
            # (a candidate, or what a candidate's referrers answer lists) touches what a
            # kept tag needs. Unreadable: a doubt, and a doubt keeps everything.
            try:
                reaches = self._janitor.reachable({d for d in digests.values() if d is not None})
            except ReleasebotError as error:
                why = f"what the tags reach could not be read ({error}): deleting nothing"
                return RetentionReport(hold_plan(plan, why), applied=apply)
            plan = guard_shared_digests(plan, digests, reaches)
        report = RetentionReport(plan, applied=apply)
        if apply and plan.held is None:
            self._apply(report, plan.protected)
        return report

    def _nodes(self) -> tuple[tuple[ParsedNode, ...] | None, str | None, str | None]:
        """The listed nodes (``None``: not listed), why not, and why they may not be all."""
        if self._fleet is None:
            no_fleet = "fleet.enabled is false, so releasebot does not know what nodes run"
            return None, no_fleet, None
        try:
            listing = self._fleet.nodes()
        except ReleasebotError as error:
            return None, str(error), None
        return listing.nodes, None, listing.unsure

    def _apply(self, report: RetentionReport, kept: frozenset[str]) -> None:
        """Delete the plan's manifests; ``kept``: every digest a kept tag reaches, which no
        attachment delete may touch (a delete by digest removes every tag on it)."""
        for deletion in report.plan.delete:
            assert deletion.digest is not None  # guard_shared_digests sets it
            try:
                attachments = self._janitor.attachments(deletion.digest)
                # Already gone: most likely an earlier delete whose answer was lost (the
                # retry meets 404). Its attachments are still there; record it all the same.
                gone = not self._janitor.delete(deletion.digest)
            except DeleteRefusedError as error:
                report.refused = str(error)
                return
            except ReleasebotError as error:
                report.errors.append(f"cannot delete {deletion.tag}: {error}")
                continue
            if gone:
                log.info("retention: %s was already gone from the registry", deletion.tag)
            removed = self._delete_attachments(deletion, attachments, kept, report)
            reason = f"{deletion.reason} (already gone from the registry)" if gone else None
            record = DeletionRecord(
                deletion.tag,
                deletion.digest,
                deletion.flatcar.text,
                reason or deletion.reason,
                self._clock(),
                removed,
            )
            self._store.record_deletion(record, events=[self._event(record)])
            report.deleted.append(record)
            log.info(
                "retention: deleted %s (%s): %s",
                deletion.tag,
                deletion.digest,
                deletion.reason,
                extra={"tag": deletion.tag, "digest": deletion.digest},
            )

    def _delete_attachments(
        self,
        deletion: Deletion,
        attachments: tuple[str, ...],
        kept: frozenset[str],
        report: RetentionReport,
    ) -> int:
        removed = 0
        for digest in attachments:
            if digest in kept:
                report.errors.append(
                    f"{deletion.tag}: attachment {digest} not deleted: a kept tag reaches it"
                )
                continue
            try:
                removed += self._janitor.delete(digest)
            except ReleasebotError as error:
                report.errors.append(f"{deletion.tag}: attachment {digest}: {error}")
        return removed

    def _event(self, record: DeletionRecord) -> TagDeleted:
        return TagDeleted(
            message_key=deletion_key(record.tag, record.digest),
            subject=record.tag,
            created_at=record.deleted_at,
            tag=record.tag,
            repository=self._janitor.repository,
            digest=record.digest,
            flatcar_version=record.flatcar_version,
            reason=record.reason,
            attachments=record.attachments,
        )
