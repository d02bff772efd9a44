"""What releasebot says about an image it published: the facts a signature, an SBOM and a
provenance statement are made of, and what checking them found. Pure.

A published tag is only worth trusting when a cluster can check who built it from what.
releasebot knows every input of its own builds (the Flatcar release files the recipe
verified, the NVIDIA runfile, the recipe revision, the executor image), so at publish time
the service hands an ``AttestationRequest`` to the ``Attestor`` port; the adapter turns it
into cosign signatures, a CycloneDX SBOM and an in-toto/SLSA provenance statement.

Deliberately not here: any encoding (JSON, DSSE, OCI manifests) or key handling; those are
the signing adapter's (``releasebot/signing/``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from releasebot.domain.shared.versions import Arch
from releasebot.domain.targets.base_tags import BaseSpec
from releasebot.domain.targets.builds import BuildRecord, BuildRequest
from releasebot.domain.targets.models import Target


@dataclass(frozen=True)
class Material:
    """One downloaded input of a build: where it came from and its digests."""

    uri: str
    digests: tuple[tuple[str, str], ...]
    """``(algorithm, lower-case hex)``, e.g. ``("sha512", "…")``; may be empty when the
    digest is not known (the input is still named)."""


@dataclass(frozen=True)
class ArchBuild:
    """One arch of a published target: its manifest and the run that made it."""

    arch: Arch
    digest: str
    job_name: str
    build_args: tuple[tuple[str, str], ...]
    started_at: datetime
    finished_at: datetime | None


@dataclass(frozen=True)
class AttestationRequest:
    """Everything needed to sign and describe one published tag."""

    repository: str
    target: Target | BaseSpec
    """What was built: a target (the tag, the driver and Flatcar versions, the kernel, the
    arches) or a driver base (its tag, driver, arch; no Flatcar release, no kernel)."""
    digest: str
    """The tag's digest: the image manifest (one arch) or the OCI index (several)."""
    builds: tuple[ArchBuild, ...]

    @property
    def tag(self) -> str:
        return self.target.tag

    @property
    def multi_arch(self) -> bool:
        return len(self.builds) > 1

    @property
    def signed_digests(self) -> tuple[str, ...]:
        """What gets a signature: the tag's digest and, for an index, every arch's image."""
        per_arch = tuple(b.digest for b in self.builds if b.digest != self.digest)
        return (self.digest, *per_arch)

    def build_arg(self, name: str) -> str | None:
        """A build argument every arch was given alike (e.g. ``RECIPE_REVISION``)."""
        values = {dict(b.build_args).get(name) for b in self.builds}
        return values.pop() if len(values) == 1 else None


@dataclass(frozen=True)
class Attestation:
    """What the ``Attestor`` attached for one tag."""

    fingerprint: str
    """``sha256:<hex>`` of the public key's DER (SubjectPublicKeyInfo) encoding."""
    signed: tuple[str, ...]
    """The manifest digests that carry a signature now."""
    referrers_api: bool
    """Whether the registry took the SBOM and provenance as OCI 1.1 referrers; ``False``:
    they are listed under the referrers tag (``sha256-<hex>``) instead."""


@dataclass(frozen=True)
class Verification:
    """What re-reading a tag's attachments found; only made when everything checked out."""

    digest: str
    fingerprint: str
    signed: tuple[str, ...]
    sbom_components: int
    materials: int
    """How many inputs the verified provenance names."""

    def summary(self) -> str:
        manifests = len(self.signed)
        return (
            f"signed by {self.fingerprint} ({manifests} manifest"
            f"{'s' if manifests != 1 else ''}); SBOM with {self.sbom_components} components, "
            f"provenance with {self.materials} materials"
        )


def attestation_request(
    repository: str,
    target: Target,
    digest: str,
    builds: Sequence[tuple[BuildRecord, BuildRequest]],
) -> AttestationRequest:
    """The request for a target whose attempt just verified: ``builds`` pairs each arch's
    finished build row with the request its Job was made from (for the build args)."""
    arches = []
    for build, request in sorted(builds, key=lambda pair: pair[0].arch.value):
        if build.digest is None:
            raise ValueError(f"{build.tag} {build.arch}: a published build has a digest")
        arches.append(
            ArchBuild(
                arch=build.arch,
                digest=build.digest,
                job_name=build.job_name,
                build_args=request.build_args,
                started_at=build.created_at,
                finished_at=build.finished_at,
            )
        )
    return AttestationRequest(
        repository=repository, target=target, digest=digest, builds=tuple(arches)
    )
