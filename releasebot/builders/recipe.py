"""The driver image recipe releasebot ships, as a build context Kaniko can read.

The recipe (``releasebot/recipe/``: a Dockerfile and its scripts) travels inside the
package. In the cluster it becomes a ConfigMap mounted into each build Job as the
``dir://`` context; a ConfigMap has no sub-directories, so ``scripts/X`` is stored under the
key ``scripts.X`` and the Dockerfile puts it back. ``recipe_revision`` names the exact
recipe (a digest of its files) so an image says which recipe built it.

Deliberately not here: applying the ConfigMap (``kubectl apply`` of what
``releasebot recipe configmap`` prints does that, with the rights of a person, not the bot's).
"""

from __future__ import annotations

import hashlib
from importlib.resources import files
from pathlib import Path
from typing import Any

CONFIGMAP_NAME = "releasebot-recipe"
_SKIP = {"README.md"}


def recipe_dir() -> Path:
    return Path(str(files("releasebot") / "recipe"))


def recipe_files() -> dict[str, bytes]:
    """The recipe's files by ConfigMap key (``Dockerfile``, ``scripts.fetch-verified`` …)."""
    root = recipe_dir()
    found: dict[str, bytes] = {}
    for path in sorted(root.rglob("*")):
        if not path.is_file() or path.name in _SKIP or "__pycache__" in path.parts:
            continue
        found[".".join(path.relative_to(root).parts)] = path.read_bytes()
    return found


def recipe_revision() -> str:
    """A short digest of the recipe's files: changes whenever any byte of it does."""
    digest = hashlib.sha256()
    for key, content in recipe_files().items():
        digest.update(key.encode() + b"\0" + hashlib.sha256(content).digest())
    return digest.hexdigest()[:12]


def recipe_configmap(namespace: str, name: str = CONFIGMAP_NAME) -> dict[str, Any]:
    """The ConfigMap to apply in the build namespace (``kaniko.context_configmap``)."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {
                "app.kubernetes.io/name": "releasebot",
                "app.kubernetes.io/component": "recipe",
            },
            "annotations": {"releasebot/recipe-revision": recipe_revision()},
        },
        "data": {key: content.decode("utf-8") for key, content in recipe_files().items()},
    }
