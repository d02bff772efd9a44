"""The ports: what the use cases need from the outside world, as Protocols.

A port with two implementations has one contract suite in ``tests/contract`` that runs on
each (the in-memory one also serves ``--dry-run`` and the demo):

- ``StateStore``: ``store/memory.py`` and ``store/sql.py`` on SQLite and PostgreSQL;
- ``Registry`` and ``ArtifactRegistry``: the in-memory ones and ORAS on a real registry;
- ``JobLauncher``, ``FleetSource``, ``PodSource``, ``NodeAnnotator`` and ``LeaderElector``:
  the in-memory ones and lightkube's over the fake API server (real HTTP).

The others have one implementation and no contract suite (a suite run on one adapter would
only be its own tests again); each is tested where it talks:

- ``FlatcarFeedParser``, ``DriverFeedParser``: pure functions (``sources/flatcar.py``,
  ``sources/nvidia.py``), tested on real and hostile feeds;
- ``FeedFetcher`` (``sources/fetch.py``), ``ArtifactSource`` (``sources/artifacts.py``) and
  ``MaterialSource`` (``sources/materials.py``): HTTP, tested against local servers; the use
  cases' tests give the fetcher a feed server or a small fake;
- ``RegistryJanitor`` (``registry/janitor.py``) and ``Attestor`` (``signing/attestor.py``):
  tested against the real registry, the attestor over an ``ArtifactRegistry`` whose suite
  runs on both.

A second implementation of any of these gets its contract suite with it.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol, runtime_checkable

from releasebot.domain.fleet.nodes import ParsedNode
from releasebot.domain.fleet.operator import CrdAbsent, DriverSource
from releasebot.domain.fleet.proof import OperatorPod, ProofRecord
from releasebot.domain.fleet.records import FleetRecord
from releasebot.domain.fleet.retention import DeletionRecord, Listing
from releasebot.domain.shared.versions import Arch
from releasebot.domain.targets.attestation import (
    Attestation,
    AttestationRequest,
    Material,
    Verification,
)
from releasebot.domain.targets.bases import BaseRecord
from releasebot.domain.targets.builds import BuildRecord, JobRequest, JobStatus
from releasebot.domain.targets.events import Event, MessageRef, StoredEvent
from releasebot.domain.targets.models import (
    DriverRelease,
    FeedState,
    FlatcarRelease,
    Target,
    TargetRecord,
    TargetState,
    Validators,
)
from releasebot.domain.targets.readiness import Readiness


@dataclass(frozen=True)
class FetchedBody:
    """A feed answered with a body that differs from the last one seen."""

    body: bytes
    validators: Validators
    requests: int = 1


@dataclass(frozen=True)
class Unchanged:
    """The feed is unchanged since the validators were taken (304, or the same body hash)."""

    validators: Validators
    requests: int = 1


FetchResult = FetchedBody | Unchanged


class FlatcarFeedParser(Protocol):
    """Turns a Flatcar feed body into its releases (``sources.flatcar.parse_flatcar_feed``);
    raises ``FeedFormatError`` naming ``feed``."""

    def __call__(self, feed: str, body: bytes) -> list[FlatcarRelease]: ...


class DriverFeedParser(Protocol):
    """Turns NVIDIA's feed body into its releases (``sources.nvidia.parse_nvidia_feed``)."""

    def __call__(self, feed: str, body: bytes) -> list[DriverRelease]: ...


class FeedFetcher(Protocol):
    """Reads one feed URL, conditionally when ``validators`` from a previous read are given.

    Raises ``FeedUnavailableError``, ``FeedRejectedError`` or ``FeedFormatError`` (never a
    transport library's exception).
    """

    def fetch(self, feed: str, url: str, validators: Validators | None) -> FetchResult: ...


class StateStore(Protocol):
    """Everything releasebot remembers. Each method is one transaction.

    Nothing is ever deleted because a feed changed: releases that vanish stay known, targets
    that drop out of the plan are kept with ``required=False``.
    """

    def feed_state(self, feed: str) -> FeedState | None: ...

    def feed_states(self) -> list[FeedState]: ...

    def record_flatcar_feed(
        self,
        feed: str,
        url: str,
        releases: Sequence[FlatcarRelease],
        validators: Validators,
        now: datetime,
    ) -> None:
        """Store a changed Flatcar feed body: upsert releases, mark which the feed lists."""

    def record_driver_feed(
        self,
        feed: str,
        url: str,
        drivers: Sequence[DriverRelease],
        validators: Validators,
        now: datetime,
    ) -> None:
        """Store a changed NVIDIA feed body."""

    def record_feed_unchanged(
        self, feed: str, url: str, validators: Validators, now: datetime
    ) -> None:
        """A poll found nothing new: only poll timestamps (and fresh validators) change."""

    def record_feed_failure(self, feed: str, url: str, error: str, now: datetime) -> None:
        """A poll failed: the error is kept, the last good data is left untouched."""

    def flatcar_releases(self, feed: str) -> list[FlatcarRelease]:
        """Every release the feed has ever listed, whether it still lists it or not."""

    def driver_releases(self, feed: str) -> list[DriverRelease]:
        """Every driver release the NVIDIA feed has ever listed."""

    def sync_targets(self, planned: Sequence[Target], now: datetime) -> list[TargetRecord]:
        """Make ``planned`` the required targets; return them as stored, in plan order.

        New targets are inserted, changed ones updated, targets no longer planned are kept
        with ``required=False``. A plan identical to the stored one writes nothing.
        """

    def targets(
        self, *, required_only: bool = True, state: TargetState | None = None
    ) -> list[TargetRecord]:
        """The targets by tag; only the required ones, and only those in ``state`` if given."""

    def target(self, tag: str) -> TargetRecord | None: ...

    def ensure_target(self, target: Target, now: datetime) -> TargetRecord:
        """The stored target for ``target.tag``; inserted as not required if new.

        For targets asked for by hand: the policy's ``sync_targets`` makes it required if
        the policy ever selects it, and never deletes it.
        """

    def builds(self, *, tag: str | None = None, active_only: bool = False) -> list[BuildRecord]:
        """Build rows, oldest first; only those of ``tag`` and/or only launching/running."""

    def save(
        self,
        *,
        targets: Sequence[TargetRecord] = (),
        builds: Sequence[BuildRecord] = (),
        events: Sequence[Event] = (),
    ) -> None:
        """Write targets' build status, build rows and outbox events in ONE transaction.

        For targets only the status fields change (state, digest, attempts,
        next_attempt_at, last_error, published_at, updated_at); the plan fields belong to
        ``sync_targets``. Builds are upserted by (tag, arch, attempt). Events are appended
        to the outbox, to be delivered later.
        """

    # -- the outbox (notifications) -------------------------------------------------------

    def pending_events(self, now: datetime, limit: int = 50) -> list[StoredEvent]:
        """Undelivered events whose next attempt is due, oldest first (by id)."""

    def outbox_events(self, message_key: str) -> list[StoredEvent]:
        """Every event of ``message_key``, delivered or not, oldest first (by id): what a
        message edited in place must show."""

    def outbox_backlog(self) -> int:
        """How many events wait for delivery."""

    def mark_delivered(self, event_id: int, now: datetime, ref: MessageRef | None = None) -> None:
        """The event reached the chat; ``ref`` (if given) is stored for its key, atomically."""

    def mark_undelivered(
        self, event_id: int, error: str, next_attempt_at: datetime, now: datetime
    ) -> None:
        """Delivery failed: count the attempt, keep the error, try again later."""

    def message_ref(self, message_key: str) -> MessageRef | None: ...

    # -- flags (pause) and alert bookkeeping --------------------------------------------

    def flag(self, name: str) -> str | None: ...

    def set_flag(
        self, name: str, value: str | None, now: datetime, events: Sequence[Event] = ()
    ) -> None:
        """Set (or with ``None`` clear) a named flag, e.g. ``paused``; ``events`` are
        appended to the outbox in the same transaction."""

    # -- fleet history -------------------------------------------------------------------

    def record_fleet(self, nodes: Sequence[ParsedNode], now: datetime) -> None:
        """One listing of the fleet, in one transaction: a node in the same state as its
        latest record moves that record's ``last_seen_at``; a new node or a new state
        gets a new record (``fleet_records.diff_fleet``). Unlisted nodes are kept."""

    def fleet_nodes(self) -> list[FleetRecord]:
        """The latest record of every node ever seen, by name."""

    def fleet_history(self, name: str) -> list[FleetRecord]:
        """Every record of one node, oldest first."""

    # -- retention -------------------------------------------------------------------------

    def flatcar_listings(self) -> list[Listing]:
        """Every (Flatcar feed, release) ever listed: whether the feed still lists it, and
        when it last did."""

    def record_deletion(self, deletion: DeletionRecord, events: Sequence[Event] = ()) -> None:
        """Record one tag retention deleted; ``events`` go to the outbox in the same
        transaction."""

    def deletions(self) -> list[DeletionRecord]:
        """Every deletion retention recorded, oldest first."""

    # -- change counters ---------------------------------------------------------------

    def revisions(self) -> dict[str, int]:
        """One change counter per table (``targets``, ``builds``, ``feeds``, ``outbox``...):
        each write transaction adds one to the counter of every table it wrote. A table
        never written has no entry (take it as 0). One cheap read: a reader that kept what
        it read compares counters to skip a table that did not move. Edits made behind
        releasebot's back do not move them, so such readers still read everything now and
        then."""

    def forget(self) -> None:
        """Drop whatever this store kept from earlier reads (decoded rows kept while their
        table's counter did not move): the next read reads everything again. The periodic
        full pass calls it, so an edit behind releasebot's back is seen within one."""

    # -- the after-reboot proof -------------------------------------------------------------

    def proofs(self) -> list[ProofRecord]:
        """Every node's proof record, by node name."""

    def save_proofs(
        self,
        *,
        proofs: Sequence[ProofRecord] = (),
        removed: Sequence[str] = (),
        targets: Sequence[TargetRecord] = (),
        events: Sequence[Event] = (),
    ) -> None:
        """Upsert ``proofs`` (by node), delete the records of the ``removed`` nodes, save the
        targets' status fields (as ``save`` does, with ``proven_at``/``proven_node``) and
        append ``events`` to the outbox, in ONE transaction."""

    # -- driver bases ------------------------------------------------------------------------

    def bases(self) -> list[BaseRecord]:
        """Every driver base ever recorded, by tag (``domain/targets/bases.py``)."""

    def save_bases(
        self,
        *,
        bases: Sequence[BaseRecord] = (),
        targets: Sequence[TargetRecord] = (),
        events: Sequence[Event] = (),
    ) -> None:
        """Upsert ``bases`` (by tag), save the targets' status fields (as ``save`` does) and
        append ``events`` to the outbox, in ONE transaction."""


class Registry(Protocol):
    """One repository in one OCI registry (``repository`` is ``host[:port]/path``).

    A missing tag is an answer (``None``), not an error. Raises ``RegistryAuthError`` for
    401/403 (permanent: credentials or rights), ``RegistryUnavailableError`` for network
    problems, timeouts, 429 and 5xx after the adapter's own bounded retries, and
    ``RegistryError`` for anything else the registry refuses.
    """

    @property
    def repository(self) -> str: ...

    def digest(self, tag: str) -> str | None:
        """The manifest (or index) digest the tag points at; ``None`` when there is no tag."""

    def tags(self) -> set[str]:
        """Every tag of the repository (all pages); empty when the repository does not exist."""

    def labels(self, reference: str) -> dict[str, str]:
        """The image config's labels (or the index's annotations) for a tag or digest."""

    def push_index(self, tag: str, manifests: Sequence[tuple[Arch, str]]) -> str:
        """Publish ``tag`` as an OCI image index over per-arch manifest digests; its digest."""

    def close(self) -> None:
        """Release connections; the adapter is not used afterwards."""


class RegistryJanitor(Protocol):
    """What retention needs of releasebot's repository: its tags, their digests, what is
    attached to a digest, and deleting a manifest by digest (the OCI distribution API's
    ``DELETE /v2/<name>/manifests/<digest>``, which removes every tag pointing at it).

    Raises the same errors as ``Registry``; ``delete`` raises ``DeleteRefusedError`` when
    the registry does not allow deletes at all.
    """

    @property
    def repository(self) -> str: ...

    def tags(self) -> set[str]: ...

    def digest(self, tag: str) -> str | None: ...

    def attachments(self, digest: str) -> tuple[str, ...]:
        """Digests of the manifests that belong to ``digest`` and its index's images: the
        cosign ``sha256-<hex>.sig``/``.att`` tags, the referrers tag ``sha256-<hex>``, and
        what the OCI 1.1 referrers API lists."""

    def reachable(self, digests: Collection[str]) -> dict[str, frozenset[str]]:
        """For each digest, every manifest it reaches (itself, an index's images, their
        signatures, attestations and referrers, transitively). Raises when any of it
        cannot be read: retention then deletes nothing."""

    def delete(self, digest: str) -> bool:
        """Delete the manifest ``digest``; False when the registry no longer has it."""


class JobLauncher(Protocol):
    """Runs build Jobs in a cluster and reports on them.

    ``launch`` is idempotent by Job name: a Job that already exists is adopted (returns
    False), never duplicated. Raises ``ClusterUnavailableError`` (retry later) or
    ``ClusterRejectedError`` (the API server refused the Job: permanent).
    """

    def render(self, request: JobRequest) -> dict[str, Any]:
        """The Job manifest ``launch`` would create (for ``--dry-run`` and validation)."""

    def launch(self, request: JobRequest) -> bool:
        """Create the Job; True when created, False when it existed already (adopted)."""

    def status(self, job_name: str) -> JobStatus:
        """Where the Job stands; ``JobPhase.MISSING`` when nobody has it (deleted)."""

    def delete(self, job_name: str) -> None:
        """Delete the Job and its Pods (e.g. stuck pulling the executor image); no-op if gone."""

    def close(self) -> None:
        """Release connections; the adapter is not used afterwards."""


class ArtifactSource(Protocol):
    """Tells whether a build's inputs are published (Flatcar artefacts, NVIDIA runfile).

    A missing input is an answer (``Readiness.missing``), not an error; an upstream that
    cannot be reached raises a ``TemporaryError``.
    """

    def readiness(self, target: Target, arch: Arch) -> Readiness: ...


class LeaderElector(Protocol):
    """Acquires, renews and gives up the leadership of one process.

    ``ensure`` is called periodically (every third of the lease) and right before each
    cycle; it is not called from two threads at once (the runner serialises it).
    """

    @property
    def identity(self) -> str:
        """This process's name in the election."""

    @property
    def is_leader(self) -> bool:
        """Whether this process leads now: False as soon as a renewal is overdue."""

    def ensure(self) -> bool:
        """Acquire the leadership if free (or lapsed), renew it if held; whether we lead.

        Raises ``ClusterUnavailableError`` (try again next round) or
        ``ClusterRejectedError`` (e.g. no RBAC for Leases: a human must fix it), after
        updating ``is_leader``.
        """

    def release(self) -> None:
        """Give the leadership up so another replica takes over at once; never raises."""

    def close(self) -> None:
        """Release connections; the elector is not used afterwards."""


# -- signing: attachments in the registry, and the attestor ---------------------------


@dataclass(frozen=True)
class StoredManifest:
    """A manifest as the registry serves it: its media type, exact bytes and digest."""

    media_type: str
    body: bytes
    digest: str


class ArtifactRegistry(Protocol):
    """The raw OCI distribution calls signing needs, on the driver repository.

    Raises the same errors as ``Registry``. ``blob`` checks the bytes against the digest.
    """

    @property
    def repository(self) -> str: ...

    def manifest(self, reference: str) -> StoredManifest | None:
        """The manifest a tag or digest names; ``None`` when there is none."""

    def blob(self, digest: str) -> bytes | None:
        """A blob's bytes (at most a few MiB); ``None`` when the repository lacks it."""

    def push_blob(self, data: bytes) -> str:
        """Upload ``data`` (skipped when the repository has it already); its digest."""

    def push_manifest(self, reference: str, media_type: str, body: bytes) -> bool:
        """Store ``body`` under a tag or its digest; True when the registry said it
        indexed the manifest's ``subject`` (the ``OCI-Subject`` header of OCI 1.1)."""

    def referrers(self, digest: str) -> bytes | None:
        """The referrers API's index for ``digest``; ``None`` when the registry has no
        referrers API (then the referrers tag ``sha256-<hex>`` stands in for it)."""


class MaterialSource(Protocol):
    """The inputs a build downloaded, with their digests, as their publishers state them."""

    def materials(self, target: Target, arch: Arch) -> tuple[Material, ...]: ...


class Attestor(Protocol):
    """Signs a published tag and attaches its SBOM and provenance; checks them again.

    ``attest`` is idempotent: attaching the same facts twice leaves one valid signature per
    manifest and key. Raises ``SigningError`` (permanent: a key or a refusal) or a
    ``TemporaryError`` (the registry is down). ``verify`` re-reads everything from the
    registry and raises ``VerificationError`` unless it all checks out against the key.
    """

    @property
    def fingerprint(self) -> str: ...

    def attest(self, request: AttestationRequest) -> Attestation: ...

    def verify(self, reference: str) -> Verification: ...


@dataclass(frozen=True)
class NodeListing:
    """Every Node the fleet selector names, parsed, in the API server's order."""

    nodes: tuple[ParsedNode, ...]
    restarts: int = 0
    """How often the listing started over (an expired continue token mid-listing)."""
    problems: tuple[str, ...] = ()
    """One line each: an item skipped (not an object), names shown alike, a bound hit."""
    unsure: str | None = None
    """Why ``nodes`` may not be every selected Node (an item skipped, the listing cut
    short); ``None``: the whole listing was read. Retention deletes nothing while set."""
    cut: bool = False
    """The listing stopped at a bound (pages, objects, time): the reboot gate then opens
    nothing new, since the rest of the listing is unknown."""


class FleetSource(Protocol):
    """Reads the fleet and the GPU Operator's configuration from the cluster (read-only).

    Raises ``ClusterForbiddenError`` when RBAC refuses a list (naming what to grant),
    ``ClusterUnavailableError`` when the API server cannot be reached after the adapter's
    bounded retries, ``ClusterRejectedError`` for other refusals. A resource type the
    server does not know is ``CrdAbsent``, not an error: the GPU Operator is optional.
    """

    def nodes(self) -> NodeListing:
        """Every selected Node, all pages, each parsed by ``fleet.parse_node``."""

    def cluster_policies(self) -> tuple[DriverSource, ...] | CrdAbsent:
        """The driver part of every ClusterPolicy (``nvidia.com/v1``)."""

    def nvidia_drivers(self) -> tuple[DriverSource, ...] | CrdAbsent:
        """Every NVIDIADriver (``nvidia.com/v1alpha1``)."""

    def close(self) -> None:
        """Release connections; the adapter is not used afterwards."""


@runtime_checkable
class PodSource(Protocol):
    """Reads the GPU Operator's pods on one node, and a container's last log lines
    (read-only: ``list`` on ``pods``, ``get`` on ``pods/log``, in the operator's namespace).

    Raises ``ClusterForbiddenError`` when RBAC refuses (naming what to grant),
    ``ClusterUnavailableError`` after the adapter's bounded retries,
    ``ClusterRejectedError`` for other refusals. Nothing else escapes.
    """

    def pods_on(self, node: str) -> tuple[OperatorPod, ...]:
        """The driver and validator pods scheduled on ``node`` (one list call, selected by
        ``spec.nodeName``), each parsed by ``proof.parse_pod``; other pods are left out."""

    def log_tail(self, namespace: str, pod: str, container: str | None, *, previous: bool) -> str:
        """The last ``proof.LOG_TAIL_LINES`` lines of a container's log (of its last
        terminated run with ``previous``), at most ``proof.LOG_TAIL_CHARS`` characters,
        control characters removed and credentials masked; ``""`` when there is none."""

    def close(self) -> None:
        """Release connections; the adapter is not used afterwards."""


@runtime_checkable
class NodeAnnotator(Protocol):
    """Writes the reboot gate's two annotations on Nodes: the one write releasebot makes to
    a Node, and only with ``fleet.gate`` on (``domain.fleet.gate`` decides what to write).

    Raises ``ClusterForbiddenError`` when RBAC refuses (``patch`` on ``nodes``: the
    ``reboot-gate`` component), ``ClusterUnavailableError`` after the adapter's retries,
    ``ClusterRejectedError`` for other refusals.
    """

    def open_gate(self, node: str, version: str, resource_version: str | None) -> bool:
        """Set the gate annotation to ``"true"`` and the version annotation to ``version``,
        on the condition that the Node is still at ``resource_version`` (unconditionally
        when ``None``). False when it changed since it was read, or is gone: the caller
        decides again from a fresh listing, next cycle."""

    def close_gate(self, node: str) -> None:
        """Remove both annotations (a Node without them, or gone, needs nothing)."""

    def set_proof(self, node: str, resource_version: str | None = None) -> bool:
        """Set the after-reboot proof annotation (``fleet.proof_annotation``) to ``"true"``:
        FLUO lets the node go and reboots the next one. With ``resource_version``, only if
        the Node has not changed since it was read (the proof was judged on it as listed).
        False when it changed since, or is gone: judged again from a fresh listing."""

    def close(self) -> None:
        """Release connections; the adapter is not used afterwards."""
