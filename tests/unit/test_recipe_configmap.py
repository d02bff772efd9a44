"""The recipe releasebot ships, as the ConfigMap build Jobs mount: complete, valid, versioned."""

from __future__ import annotations

import json

import kubernetes_validate
import pytest

from releasebot.builders.recipe import recipe_configmap, recipe_files, recipe_revision
from releasebot.cli import main


def test_every_recipe_file_is_in_the_configmap_under_a_flat_key() -> None:
    files = recipe_files()
    shipped = {"Dockerfile", "Dockerfile.base", "nvidia-driver", "scripts.fetch-verified"}
    assert shipped <= set(files)
    assert all("/" not in key for key in files)  # a ConfigMap key cannot hold a directory
    configmap = recipe_configmap("builds")
    assert set(configmap["data"]) == set(files)
    assert configmap["metadata"]["annotations"]["releasebot/recipe-revision"] == recipe_revision()
    assert sum(len(v) for v in configmap["data"].values()) < 1024 * 1024  # the object limit


@pytest.mark.parametrize("version", ["1.29", "1.33"])
def test_the_configmap_is_valid_kubernetes(version: str) -> None:
    manifest = recipe_configmap("releasebot")
    assert kubernetes_validate.validate(manifest, version, strict=True) == version


def test_the_revision_is_a_digest_of_the_files() -> None:
    assert len(recipe_revision()) == 12
    assert recipe_revision() == recipe_revision()


def test_the_cli_prints_it_for_kubectl(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["recipe", "configmap"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["metadata"] == {**printed["metadata"], "name": "releasebot-recipe"}
    assert printed["metadata"]["namespace"] == "releasebot"
