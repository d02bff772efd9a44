"""The recipe's Dockerfile built by buildah, as Kaniko would build it, with no registry.

buildah (Debian's) ROOTLESS, run by the suite's unprivileged user, with ``--isolation
chroot`` and the ``vfs`` storage driver: no overlayfs (``fuse-overlayfs`` needs
``/dev/fuse``, which is root's alone on many CI machines, and nothing here reuses layers),
no daemon. The RUN steps run as root of the user's own user namespace (ids from
``/etc/subuid``/``/etc/subgid``) with the capabilities of the Kaniko Job's container
(``KANIKO_CAPABILITIES``) and no others (``--cap-drop ALL`` + ``--cap-add``). They share
the host's network, as Kaniko's share its pod's, so they reach the stand-in mirror on
127.0.0.1. Storage lives in the cache folder (``containers/``), so the imported base
image is kept between runs; its files belong to the subordinate ids, so removing it takes
``buildah unshare rm -rf`` (as the user). The built image is tagged with a key over
everything that goes into it (the recipe's files, the stand-ins, the base image, the
build arguments, the ISO week, so a drifting Debian archive is built against at least
weekly); outside CI a run reuses the image of an unchanged key, in CI (``CI`` set) the
Dockerfile is built every time. Only the latest image is kept. The base image is
``mmdebstrap --mode=unshare --variant=minbase trixie`` imported (``buildah from scratch``
+ ``add`` of the tar + ``commit``) under a tag keyed by its libc6 version; the build
pulls nothing (``--pull=never``). ``--layers=false``: with vfs every kept layer is a full
copy of the root, and nothing here reuses them.

The build compiles the NVIDIA modules once; the suite takes ``/opt/nvidia-driver`` and the
rest of the runtime image out of the result (``buildah from`` + ``buildah mount``) for its
other checks instead of compiling a second time outside. Rootless, ``buildah mount`` works
only inside ``buildah unshare``; with vfs the "mount" is a plain directory of the storage,
so the path it prints serves outside the namespace too, and as the image's root is the
user itself there, the suite reads and writes the image's files directly.

Deliberately not here: the inputs (``standins.py``, ``mirror.py``).
"""

from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass
from pathlib import Path

from releasebot.builders.kaniko import KANIKO_CAPABILITIES
from tests.recipe.parts import CACHE, RECIPE, run

STORE = CACHE / "containers"
REPOSITORY = "localhost/releasebot-driver"
BASE_REPOSITORY = "localhost/releasebot-driver-base"


def buildah(*args: str | Path) -> list[str]:
    return [
        "buildah",
        "--root",
        str(STORE / "storage"),
        "--runroot",
        str(STORE / "run"),
        "--storage-driver",
        "vfs",
        *(str(arg) for arg in args),
    ]


def unshared(*args: str | Path) -> list[str]:
    """A buildah command inside ``buildah unshare`` (the user namespace and mount namespace
    rootless buildah uses), for the commands that do not enter it themselves (``mount``)."""
    return buildah("unshare", *buildah(*args))


def base_image(tar: Path) -> str:
    """The base image's local name, imported from ``tar`` unless already there."""
    name = f"localhost/releasebot-recipe-base:{tar.stem.removeprefix('trixie-minbase-')}"
    name = name.replace("+", "_").replace("~", "_")
    if (
        subprocess.run(
            buildah("inspect", "--type", "image", name), capture_output=True, check=False
        ).returncode
        == 0
    ):
        return name
    # podman import would do, but rootless podman refuses a runroot path over 50
    # characters; buildah adds the tar (owners kept, device nodes skipped as in any
    # user namespace: the build's RUN steps get the host's /dev) and commits it.
    log = CACHE / "logs" / "base-import.log"
    container = run(buildah("from", "--pull=never", "scratch"), log=log).stdout.split()[-1]
    run(unshared("add", container, tar, "/"), what="buildah add of the trixie base", log=log)
    run(unshared("commit", "--rm", "--quiet", container, name), what="buildah commit", log=log)
    return name


@dataclass(frozen=True)
class Image:
    """The built image: its name, its root mounted on the host, the build's log."""

    name: str
    built: Built
    log: str
    reused: bool


@dataclass(frozen=True)
class Built:
    """The built image, mounted: its root file system on the host."""

    container: str
    root: Path

    @property
    def driver_root(self) -> Path:
        return self.root / "opt" / "nvidia-driver"


def exists(image: str) -> bool:
    return (
        subprocess.run(
            buildah("inspect", "--type", "image", image), capture_output=True, check=False
        ).returncode
        == 0
    )


def capabilities() -> list[str]:
    """The RUN steps get the capabilities of the Kaniko Job's container, no others."""
    words = ["--cap-drop", "ALL"]
    for name in KANIKO_CAPABILITIES:
        words += ["--cap-add", f"CAP_{name}"]
    return words


def build(
    image: str,
    args: dict[str, str],
    log: Path,
    dockerfile: Path = RECIPE / "Dockerfile",
    context: Path = RECIPE,
) -> str:
    """``buildah bud`` of the recipe, written to ``log`` as it goes; returns the log's text.
    A failed build raises with the log's last lines."""
    words: list[str | Path] = [
        "bud",
        "--isolation",
        "chroot",
        *capabilities(),
        "--pull=never",
        "--layers=false",
        "--force-rm",  # a failed build must not leave its working container's copy behind
        "-f",
        dockerfile,
        "-t",
        image,
    ]
    for name, value in args.items():
        words += ["--build-arg", f"{name}={value}"]
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("w") as out:
        result = subprocess.run(
            buildah(*words, context),
            stdout=out,
            stderr=subprocess.STDOUT,
            timeout=3000,
            check=False,
        )
    text = log.read_text(errors="replace")
    if result.returncode != 0:
        tail = "\n".join(text.strip().splitlines()[-30:])
        raise AssertionError(f"buildah bud exited {result.returncode} (log: {log}):\n{tail}")
    return text


def mount(image: str) -> Built:
    container = run(buildah("from", "--pull=never", image)).stdout.strip().splitlines()[-1]
    root = Path(run(unshared("mount", container)).stdout.strip().splitlines()[-1])
    return Built(container, root)


def unmount(built: Built) -> None:
    """Unmount and delete the working container (the image stays)."""
    subprocess.run(unshared("umount", built.container), capture_output=True, check=False)
    subprocess.run(unshared("rm", built.container), capture_output=True, check=False)


def remove_other_images(keep: str, prefix: str) -> None:
    """Delete the built images whose name starts with ``prefix`` but ``keep`` (vfs copies
    are large): older builds of the same image."""
    listing = subprocess.run(
        buildah("images", "--format", "{{.Name}}:{{.Tag}}"),
        capture_output=True,
        text=True,
        check=False,
    ).stdout.split()
    for image in listing:
        if image.startswith(prefix) and image != keep:
            subprocess.run(buildah("rmi", "-f", image), capture_output=True, check=False)


def manifest_digest(image: str) -> str:
    """``sha256:…`` of the image's manifest in the local storage, as a registry would name it."""
    found = run(buildah("images", "--digests", "--format", "{{.Digest}}", image)).stdout.split()
    if not found or not found[0].startswith("sha256:"):
        raise AssertionError(f"buildah gives no manifest digest for {image}: {found}")
    return found[0]


def diff_ids(image: str) -> list[str]:
    """The image's layers, bottom first, by the digest of their uncompressed content."""
    config = json.loads(run(buildah("inspect", "--type", "image", image)).stdout)
    return list(config["OCIv1"]["rootfs"]["diff_ids"])


def push_oci(image: str, layout: Path, tag: str) -> None:
    """``image`` into the OCI layout ``layout`` under ``tag``, layers gzip-compressed as a
    registry would store them; images pushed into one layout share their equal blobs."""
    layout.mkdir(parents=True, exist_ok=True)
    run(
        unshared(
            "push", "--format", "oci", "--compression-format", "gzip", image, f"oci:{layout}:{tag}"
        ),
        what=f"buildah push {image}",
    )
