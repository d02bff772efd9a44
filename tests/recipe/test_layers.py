"""Two Flatcar releases of one driver: their images share every layer but the kernel layer.

The driver base is built once (``Dockerfile.base``); the stand-in release and the one
before it (two 6.12 kernels of Debian's archive, same gcc major) are built FROM it, pinned
by digest as the bot pins it. Checked: each image is the base's layers plus exactly one;
those lower layers are the same digests in both; the kernel layer holds only the
kernel-specific tree under /opt/nvidia-driver. The images and the base are pushed into
one OCI layout (gzip layers, as a registry stores them), and the sizes a node pulls are
written to ``layers/summary.json`` in the cache for ``benchmarks/bench_image_layers.py``.
"""

from __future__ import annotations

import json
import tarfile
from pathlib import Path

from tests.recipe import buildah
from tests.recipe.conftest import RELEASES, DriverBase, Layers
from tests.recipe.parts import CACHE
from tests.recipe.standins import Standins


def manifest(layout: Path, tag: str) -> dict[str, object]:
    index = json.loads((layout / "index.json").read_text())
    entry = next(
        item
        for item in index["manifests"]
        if item.get("annotations", {}).get("org.opencontainers.image.ref.name") == tag
    )
    return dict(json.loads(blob(layout, entry["digest"]).read_text()))


def blob(layout: Path, digest: str) -> Path:
    algorithm, _, value = digest.partition(":")
    return layout / "blobs" / algorithm / value


def layer_list(layout: Path, tag: str) -> list[tuple[str, int]]:
    layers = manifest(layout, tag)["layers"]
    assert isinstance(layers, list)
    return [(str(layer["digest"]), int(layer["size"])) for layer in layers]


def test_the_releases_share_every_layer_but_the_kernel_layer(
    layers: Layers, driver_base: DriverBase
) -> None:
    base = buildah.diff_ids(layers.base)
    previous = buildah.diff_ids(layers.images["previous"])
    latest = buildah.diff_ids(layers.images["next"])
    assert previous[:-1] == base
    assert latest[:-1] == base
    assert len(latest) == len(base) + 1
    assert previous[-1] != latest[-1]
    # As a registry holds them: the same compressed blobs below the kernel layer.
    compressed = {tag: layer_list(layers.layout, tag) for tag in ("base", *RELEASES)}
    assert compressed["next"][:-1] == compressed["base"]
    assert compressed["previous"][:-1] == compressed["base"]


def test_the_kernel_layer_holds_only_the_kernel_specific_tree(
    layers: Layers, all_standins: dict[str, Standins]
) -> None:
    for release, standins in all_standins.items():
        kv = standins.kernel_version
        digest, _ = layer_list(layers.layout, release)[-1]
        with tarfile.open(blob(layers.layout, digest)) as tar:
            names = [member.name.removeprefix("./").rstrip("/") for member in tar.getmembers()]
        assert not [name for name in names if ".wh." in name], names
        files = {name for name in names if name not in ("", "opt", "opt/nvidia-driver")}
        assert files, release
        allowed = (
            f"opt/nvidia-driver/kernel/precompiled/nvidia-modules-{kv}",
            f"opt/nvidia-driver/kernel-open/precompiled/nvidia-modules-{kv}",
            "opt/nvidia-driver/build-info",
        )
        directories = {
            "opt/nvidia-driver/kernel",
            "opt/nvidia-driver/kernel/precompiled",
            "opt/nvidia-driver/kernel-open",
            "opt/nvidia-driver/kernel-open/precompiled",
            "opt/nvidia-driver/modroot",
        }
        unexpected = [
            name
            for name in files
            if name not in allowed
            and name not in directories
            and not name.startswith("opt/nvidia-driver/modroot/")
        ]
        assert unexpected == [], unexpected
        assert set(allowed) <= files
        assert any(
            name.startswith(f"opt/nvidia-driver/modroot/lib/modules/{kv}/kernel/") for name in files
        )


def test_the_sizes_a_node_pulls_are_recorded(
    layers: Layers, all_standins: dict[str, Standins]
) -> None:
    """What ``bench_image_layers`` reads: every layer's compressed size per image."""
    summary = {
        "driver_version": all_standins["next"].driver_version,
        "kernels": {release: standins.kernel_version for release, standins in all_standins.items()},
        "images": {tag: layer_list(layers.layout, tag) for tag in ("base", *RELEASES)},
    }
    out = CACHE / "layers" / "summary.json"
    out.write_text(json.dumps(summary, indent=1) + "\n")
    latest = summary["images"]["next"]
    previous = {digest for digest, _ in summary["images"]["previous"]}
    total = sum(size for _, size in latest)
    pulled = sum(size for digest, size in latest if digest not in previous)
    assert 0 < pulled < total
