"""Benchmark: what a GPU node pulls for a Flatcar update, with the two-image recipe.

Reads what the recipe suite (``tests/recipe/test_layers.py``) built and pushed into one OCI
layout, gzip layers as a registry stores them: the driver base and the per-release images
of the stand-in release (``next``, Debian's newest trixie 6.12 kernel) and of the release
before it (``previous``, an older 6.12 kernel of the archive). Prints for the stand-in:

- the image's compressed size (every layer, the Debian base included),
- the bytes a node that holds the previous release's image pulls for the next one (the
  compressed sizes of the layers it does not have), and that share of the image,
- the same for the single-image recipe releasebot shipped before (``--measure-before``
  builds it for real from a copy of that recipe; it shared no layer between releases, so a
  node pulled every layer above the Debian base), or "before: not measured".

Fails (exit 1) when the pull is above 15 % of the image.

    uv run python benchmarks/bench_image_layers.py --short [--cache DIR]
    # as the recipe suite's user, with the old recipe exported to a folder:
    git archive fad940f releasebot/recipe | tar -x -C /tmp/old
    uv run python benchmarks/bench_image_layers.py --measure-before /tmp/old/releasebot/recipe

The cache is the recipe suite's (``$RECIPE_STANDIN_CACHE``, else
``~/.cache/releasebot-recipe``; run as root, the CI build user's
``/var/lib/releasebot-ci/.cache/releasebot-recipe`` when the first has nothing).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

TARGET = 0.15
"""A Flatcar update pulls at most this share of the image's compressed bytes."""
CI_CACHE = Path("/var/lib/releasebot-ci/.cache/releasebot-recipe")


def cache_dir(given: str | None) -> Path:
    if given:
        return Path(given)
    own = Path(os.environ.get("RECIPE_STANDIN_CACHE", Path.home() / ".cache" / "releasebot-recipe"))
    if not (own / "layers" / "summary.json").exists() and os.geteuid() == 0:
        return CI_CACHE
    return own


def megabytes(size: int) -> str:
    return f"{size / 1e6:8.1f} MB"


def read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError) as error:
        raise SystemExit(
            f"bench_image_layers: cannot read {path} ({error.__class__.__name__}): run the "
            "recipe suite first (bash .ci/recipe-user), or pass --cache"
        ) from None


def after(summary: dict[str, Any]) -> tuple[int, int, int]:
    """(image bytes, bytes pulled over the previous release's image, base bytes)."""
    latest = [(str(digest), int(size)) for digest, size in summary["images"]["next"]]
    held = {str(digest) for digest, _ in summary["images"]["previous"]}
    base = sum(int(size) for _, size in summary["images"]["base"])
    total = sum(size for _, size in latest)
    pulled = sum(size for digest, size in latest if digest not in held)
    return total, pulled, base


def short(cache: Path) -> int:
    summary = read_json(cache / "layers" / "summary.json")
    total, pulled, base = after(summary)
    kernels = summary["kernels"]
    print(
        f"stand-in: NVIDIA {summary['driver_version']}, previous kernel {kernels['previous']}"
        f" -> next {kernels['next']} (gzip layers, as a registry stores them)"
    )
    layers = summary["images"]["next"]
    print(
        f"two images (now):  image {megabytes(total)} in {len(layers)} layers "
        f"(driver base {megabytes(base).strip()}, kernel layer {megabytes(layers[-1][1]).strip()})"
    )
    share = pulled / total
    print(f"                   a Flatcar update pulls {megabytes(pulled)} = {share:6.1%} of it")
    before_file = cache / "layers" / "before.json"
    if before_file.exists():
        before = read_json(before_file)
        sizes = [int(size) for _, size in before["layers"]]
        whole = sum(sizes)
        above = sum(sizes[int(before["debian_layers"]) :])
        print(
            f"one image (before): image {megabytes(whole)} in {len(sizes)} layers; a Flatcar "
            f"update pulls every layer above Debian's: {megabytes(above).strip()} "
            f"= {above / whole:6.1%}"
        )
        print(f"                   now/before pulled: {pulled / above:6.1%}")
    else:
        print("one image (before): not measured (run --measure-before as the suite's user)")
    if share > TARGET:
        print(f"FAIL: a Flatcar update pulls {share:.1%} of the image, target <= {TARGET:.0%}")
        return 1
    print(f"ok: {share:.1%} <= {TARGET:.0%}")
    return 0


def measure_before(old_recipe: Path, cache: Path) -> int:
    """Build the single-image recipe in ``old_recipe`` for the stand-in release, exactly
    as the suite built it before (one buildah build, both flavours), and record its gzip
    layers in ``<cache>/layers/before.json``."""
    os.environ.setdefault("RECIPE_STANDIN_CACHE", str(cache))
    from tests.recipe import buildah
    from tests.recipe.debian import Archive, base_image_tar
    from tests.recipe.mirror import CHANNEL, VERSION, Key, Mirror
    from tests.recipe.parts import CACHE
    from tests.recipe.standins import build_both

    if not (old_recipe / "Dockerfile").is_file():
        raise SystemExit(f"bench_image_layers: {old_recipe} has no Dockerfile")
    archive = Archive(CACHE / "apt")
    archive.update()
    latest, _ = build_both(archive)
    keys = (
        Key.cached(CACHE / "gnupg" / "flatcar", "flatcar"),
        Key.cached(CACHE / "gnupg" / "foreign", "mallory"),
    )
    base = buildah.base_image(base_image_tar(archive))
    name = "localhost/releasebot-driver-before:single-image"
    layout = CACHE / "layers" / "oci-before"
    with tempfile.TemporaryDirectory() as scratch:
        mirror = Mirror(Path(scratch), *keys)
        mirror.publish(latest.flatcar, latest.runfile, latest.driver_version)
        with mirror:
            args = {
                "DRIVER_VERSION": latest.driver_version,
                "DRIVER_BRANCH": latest.driver_version.split(".")[0],
                "FLATCAR_VERSION": VERSION,
                "FLATCAR_CHANNEL": CHANNEL,
                "KERNEL_VERSION": latest.kernel_version,
                "TARGETARCH": "amd64",
                "FLATCAR_KEY_FINGERPRINT": keys[0].fingerprint,
                "BUILDER_IMAGE": base,
                "RUNTIME_IMAGE": base,
                "RECIPE_REVISION": "before",
                "MODULE_TYPES": "both",
                "BUILD_JOBS": "2",
                "FLATCAR_BASE_URL": mirror.flatcar_base_url,
                "NVIDIA_BASE_URL": mirror.nvidia_base_url,
                "FLATCAR_KEY_URL": mirror.key_url,
            }
            log = CACHE / "logs" / "buildah-build-before.log"
            print(f"building the single-image recipe of {old_recipe} (log: {log})")
            buildah.build(name, args, log, dockerfile=old_recipe / "Dockerfile", context=old_recipe)
    debian = len(buildah.diff_ids(base))
    image = buildah.diff_ids(name)
    assert image[:debian] == buildah.diff_ids(base)
    shutil.rmtree(layout, ignore_errors=True)
    buildah.push_oci(name, layout, "before")
    index = json.loads((layout / "index.json").read_text())
    digest = index["manifests"][0]["digest"].split(":", 1)[1]
    manifest = json.loads((layout / "blobs" / "sha256" / digest).read_text())
    layers = [(layer["digest"], layer["size"]) for layer in manifest["layers"]]
    out = CACHE / "layers" / "before.json"
    out.write_text(json.dumps({"layers": layers, "debian_layers": debian}, indent=1) + "\n")
    subprocess.run(buildah.buildah("rmi", "-f", name), capture_output=True, check=False)
    print(f"wrote {out}")
    return short(CACHE) if (CACHE / "layers" / "summary.json").exists() else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--short", action="store_true", help="read what the suite built (CI)")
    parser.add_argument("--cache", help="the recipe suite's cache folder")
    parser.add_argument(
        "--measure-before",
        metavar="OLD_RECIPE",
        help="build the single-image recipe in this folder and record its layers",
    )
    options = parser.parse_args()
    cache = cache_dir(options.cache)
    if options.measure_before:
        return measure_before(Path(options.measure_before).resolve(), cache)
    return short(cache)


if __name__ == "__main__":
    sys.exit(main())
