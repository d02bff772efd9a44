"""The SBOM (CycloneDX 1.6) and the provenance statement (in-toto v1, SLSA provenance v1)
of one published tag, from an ``AttestationRequest``. Pure: no I/O, no clock.

Why these libraries: ``cyclonedx-python-lib`` and ``in-toto-attestation`` are the formats'
own reference models, so a field name that does not exist fails here, not in a verifier.

What the SBOM lists is what releasebot knows, not a scan of the image's files: the image
itself (and its per-arch images), the NVIDIA driver (version, branch, the runfile), Flatcar
Container Linux (version, channel), the kernel release the modules are built for, each
downloaded input with its digest, the recipe (revision) and the Kaniko executor (digest when
pinned). The provenance maps the same facts onto SLSA v1: ``builder`` = releasebot's version
plus the executor image, ``resolvedDependencies`` = every input with its digest,
``externalParameters`` = the build args of each arch's Job.

Both are rendered deterministically (serial number derived from the digest, timestamps from
the builds), so attaching them twice gives the same bytes.

Deliberately not here: base image digests unless a build arg pins them (the recipe's
``BUILDER_IMAGE``/``RUNTIME_IMAGE`` defaults are tags), and Debian packages inside the image.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from releasebot.domain.targets.attestation import AttestationRequest, Material
from releasebot.domain.targets.models import Target
from releasebot.signing import SLSA_PROVENANCE
from releasebot.signing.formats import canonical

BUILD_TYPE = "https://releasebot.invalid/driver-image/kaniko/v1"
"""SLSA ``buildType``: names the template of the build (a Kaniko Job per arch, an OCI index
over them); verifiers compare it as a string."""
_SBOM_NAMESPACE = uuid.UUID("5b0f0f56-92a5-4f3c-9a7b-6d3e0f1c2a10")


@dataclass(frozen=True)
class Builder:
    """Who builds: releasebot and the executor image its Jobs run."""

    version: str
    """releasebot's version (``releasebot --version``)."""
    executor_image: str
    """The configured Kaniko image reference (``kaniko.executor_image``)."""
    context: str = ""
    """The recipe's git context, if the operator builds from one; empty: the shipped recipe."""

    @property
    def executor_digest(self) -> str | None:
        _, _, digest = self.executor_image.partition("@")
        return digest or None

    @property
    def id(self) -> str:
        return f"https://releasebot.invalid/builder@v{self.version}"


def render_sbom(
    request: AttestationRequest, builder: Builder, materials: Sequence[Material]
) -> bytes:
    """The CycloneDX 1.6 JSON document of the tag."""
    from cyclonedx.model import (
        ExternalReference,
        ExternalReferenceType,
        HashAlgorithm,
        HashType,
        Property,
        XsUri,
    )
    from cyclonedx.model.bom import Bom, BomMetaData
    from cyclonedx.model.component import Component, ComponentType
    from cyclonedx.output.json import JsonV1Dot6
    from packageurl import PackageURL

    target = request.target

    def hashes(pairs: Sequence[tuple[str, str]]) -> list[HashType]:
        names = {"sha256": HashAlgorithm.SHA_256, "sha512": HashAlgorithm.SHA_512}
        return [HashType(alg=names[a], content=v) for a, v in pairs if a in names]

    def image_purl(digest: str, tag: str | None, arch: str | None = None) -> PackageURL:
        host_path = request.repository
        qualifiers = {"repository_url": host_path}
        if tag:
            qualifiers["tag"] = tag
        if arch:
            qualifiers["arch"] = arch
        return PackageURL(
            "oci", name=host_path.rsplit("/", 1)[-1], version=digest, qualifiers=qualifiers
        )

    image = Component(
        type=ComponentType.CONTAINER,
        name=request.repository,
        version=request.tag,
        bom_ref=request.digest,
        purl=image_purl(request.digest, request.tag),
        hashes=hashes([("sha256", request.digest.removeprefix("sha256:"))]),
        description="NVIDIA driver image for Flatcar Container Linux",
    )
    components: list[Component] = []
    if request.multi_arch:
        for build in request.builds:
            components.append(
                Component(
                    type=ComponentType.CONTAINER,
                    name=request.repository,
                    version=f"{request.tag} ({build.arch.value})",
                    bom_ref=build.digest,
                    purl=image_purl(build.digest, None, build.arch.value),
                    hashes=hashes([("sha256", build.digest.removeprefix("sha256:"))]),
                    properties=[Property(name="releasebot:arch", value=build.arch.value)],
                )
            )
    runfiles = [m for m in materials if m.uri.endswith(".run")]
    components.append(
        Component(
            type=ComponentType.DEVICE_DRIVER,
            name="nvidia-datacenter-driver",
            supplier=None,
            publisher="NVIDIA Corporation",
            version=target.driver_version.text,
            bom_ref="nvidia-driver",
            properties=[Property(name="releasebot:driver-branch", value=target.driver_branch)],
            external_references=[
                ExternalReference(type=ExternalReferenceType.DISTRIBUTION, url=XsUri(m.uri))
                for m in runfiles
            ],
        )
    )
    if isinstance(target, Target):  # a driver base has no Flatcar release and no kernel
        components.append(
            Component(
                type=ComponentType.OPERATING_SYSTEM,
                name="flatcar-container-linux",
                publisher="Flatcar Container Linux",
                version=target.flatcar_version.text,
                bom_ref="flatcar",
                properties=[
                    Property(name="releasebot:flatcar-channel", value=target.flatcar_channel)
                ],
            )
        )
        components.append(
            Component(
                type=ComponentType.OPERATING_SYSTEM,
                name="linux-kernel",
                version=target.kernel_release,
                bom_ref="kernel",
                description="the kernel release the modules are built for (uname -r on the node)",
            )
        )
    recipe = request.build_arg("RECIPE_REVISION") or builder.context or "unknown"
    components.append(
        Component(
            type=ComponentType.APPLICATION,
            name="releasebot-driver-recipe",
            version=recipe,
            bom_ref="recipe",
        )
    )
    components.append(
        Component(
            type=ComponentType.CONTAINER,
            name=builder.executor_image.partition("@")[0],
            version=builder.executor_digest or "unpinned",
            bom_ref="executor",
            description="the Kaniko executor image that built the layers",
        )
    )
    for index, material in enumerate(materials):
        components.append(
            Component(
                type=ComponentType.FILE,
                name=material.uri.rsplit("/", 1)[-1],
                bom_ref=f"input-{index}",
                hashes=hashes(material.digests),
                external_references=[
                    ExternalReference(
                        type=ExternalReferenceType.DISTRIBUTION, url=XsUri(material.uri)
                    )
                ],
            )
        )
    tool = Component(type=ComponentType.APPLICATION, name="releasebot", version=builder.version)
    bom = Bom(
        serial_number=uuid.uuid5(_SBOM_NAMESPACE, request.digest),
        metadata=BomMetaData(component=image, timestamp=_published_at(request)),
        components=components,
    )
    bom.metadata.tools.components.add(tool)
    bom.register_dependency(image, components)
    rendered = JsonV1Dot6(bom).output_as_string()
    return canonical(json.loads(rendered))


def render_provenance(
    request: AttestationRequest, builder: Builder, materials: Sequence[Material]
) -> bytes:
    """The in-toto v1 statement with the SLSA v1 provenance predicate, as JSON bytes."""
    from google.protobuf import json_format
    from in_toto_attestation.predicates.provenance.v1 import provenance_pb2
    from in_toto_attestation.v1.resource_descriptor import ResourceDescriptor
    from in_toto_attestation.v1.statement import Statement

    target = request.target

    subjects = [
        ResourceDescriptor(
            name=f"{request.repository}:{request.tag}",
            digest={"sha256": request.digest.removeprefix("sha256:")},
        ).pb
    ]
    for build in request.builds:
        if build.digest != request.digest:
            subjects.append(
                ResourceDescriptor(
                    name=f"{request.repository}@{build.digest} ({build.arch.value})",
                    digest={"sha256": build.digest.removeprefix("sha256:")},
                ).pb
            )
    dependencies = [ResourceDescriptor(uri=m.uri, digest=dict(m.digests)).pb for m in materials]
    executor_digest = builder.executor_digest
    executor = ResourceDescriptor(
        uri=f"docker://{builder.executor_image.partition('@')[0]}",
        digest={"sha256": executor_digest.removeprefix("sha256:")} if executor_digest else {},
        name="kaniko-executor",
    ).pb
    for subject in (*subjects, *dependencies, executor):
        ResourceDescriptor.copy_from_pb(subject).validate()
    release = (
        {
            "flatcarVersion": target.flatcar_version.text,
            "flatcarChannel": target.flatcar_channel,
            "kernelRelease": target.kernel_release,
        }
        if isinstance(target, Target)
        else {"driverBase": target.label}  # a driver base: no release, no kernel
    )
    parameters = {
        "tag": request.tag,
        "driverVersion": target.driver_version.text,
        "driverBranch": target.driver_branch,
        **release,
        "builds": [
            {
                "arch": build.arch.value,
                "job": build.job_name,
                "buildArgs": dict(build.build_args),
            }
            for build in request.builds
        ],
    }
    if builder.context:
        parameters["context"] = builder.context
    provenance = provenance_pb2.Provenance()
    definition = provenance.build_definition
    definition.build_type = BUILD_TYPE
    definition.external_parameters.update(parameters)
    definition.resolved_dependencies.extend(dependencies)
    details = provenance.run_details
    details.builder.id = builder.id
    details.builder.version["releasebot"] = builder.version
    details.builder.builder_dependencies.append(executor)
    details.metadata.invocation_id = ",".join(build.job_name for build in request.builds)
    details.metadata.started_on.FromDatetime(min(b.started_at for b in request.builds))
    details.metadata.finished_on.FromDatetime(_published_at(request))
    predicate = json_format.MessageToDict(provenance)
    statement = Statement(subjects, SLSA_PROVENANCE, predicate)
    statement.validate()
    return canonical(json_format.MessageToDict(statement.pb))


def _published_at(request: AttestationRequest) -> datetime:
    finished = [b.finished_at or b.started_at for b in request.builds]
    return max(finished).astimezone(UTC)
