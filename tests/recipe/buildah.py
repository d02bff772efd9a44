"""The recipe's Dockerfile built by buildah, as Kaniko would build it, with no registry.

buildah (Debian's) with ``--isolation chroot`` and the ``vfs`` storage driver: no
overlayfs, no user namespaces, no daemon. Its storage lives in the cache folder
(``containers/``), so the imported base image is kept between runs; the built image is
removed again after the run. The base image is ``debootstrap --variant=minbase trixie``
imported with ``podman import`` under a tag keyed by its libc6 version; the build pulls
nothing (``--pull=never``). ``--layers=false``: with vfs every kept layer is a full copy
of the root, and nothing here reuses them.

The build compiles the NVIDIA modules once; the suite takes ``/opt/nvidia-driver`` and the
rest of the runtime image out of the result (``buildah from`` + ``buildah mount``) for its
other checks instead of compiling a second time outside.

Deliberately not here: the inputs (``standins.py``, ``mirror.py``).
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

from tests.recipe.parts import CACHE, RECIPE, run

STORE = CACHE / "containers"
IMAGE = "localhost/releasebot-driver:standin"


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
    run(
        [
            "podman",
            "--root",
            STORE / "storage",
            "--runroot",
            STORE / "run",
            "--storage-driver",
            "vfs",
            "import",
            tar,
            name,
        ],
        what="podman import of the trixie base image",
        log=CACHE / "logs" / "podman-import.log",
    )
    return name


@dataclass(frozen=True)
class Built:
    """The built image, mounted: its root file system on the host."""

    container: str
    root: Path

    @property
    def driver_root(self) -> Path:
        return self.root / "opt" / "nvidia-driver"


def build(args: dict[str, str], log: Path) -> str:
    """``buildah bud`` of the recipe, written to ``log`` as it goes; returns the log's text.
    A failed build raises with the log's last lines."""
    words: list[str | Path] = [
        "bud",
        "--isolation",
        "chroot",
        "--pull=never",
        "--layers=false",
        "-f",
        RECIPE / "Dockerfile",
        "-t",
        IMAGE,
    ]
    for name, value in args.items():
        words += ["--build-arg", f"{name}={value}"]
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("w") as out:
        result = subprocess.run(
            buildah(*words, RECIPE), stdout=out, stderr=subprocess.STDOUT, timeout=3000, check=False
        )
    text = log.read_text(errors="replace")
    if result.returncode != 0:
        tail = "\n".join(text.strip().splitlines()[-30:])
        raise AssertionError(f"buildah bud exited {result.returncode} (log: {log}):\n{tail}")
    return text


def mount() -> Built:
    container = run(buildah("from", "--pull=never", IMAGE)).stdout.strip().splitlines()[-1]
    root = Path(run(buildah("mount", container)).stdout.strip())
    return Built(container, root)


def remove(built: Built | None) -> None:
    """Unmount and delete the working container and the image (vfs copies are large)."""
    if built is not None:
        subprocess.run(buildah("umount", built.container), capture_output=True, check=False)
        subprocess.run(buildah("rm", built.container), capture_output=True, check=False)
    subprocess.run(buildah("rmi", "-f", IMAGE), capture_output=True, check=False)
