"""The recipe suite's session: stand-ins, the signed mirror, ONE buildah build, the VM boots.

Every test here carries the ``recipe`` marker (``pytest -m recipe`` runs only this suite,
``-m "not recipe"`` everything else) and a long timeout: the first test that needs the
image pays for the build. The parts are session fixtures, each timed; the times are
printed at the end of the run. The suite runs as an UNPRIVILEGED user: rootless buildah,
``mmdebstrap --mode=unshare`` and ``unshare --map-root-user`` give it the root it needs
inside user namespaces (ranges from ``/etc/subuid`` and ``/etc/subgid``, mapped by
``newuidmap``/``newgidmap``). As root it refuses to run (``.ci/recipe-user`` runs it as
the build user ``releasebot-ci``). Without a tool or a user namespace the suite needs, or
when Debian's archive is unreachable, the suite fails in CI with one line naming what is
missing and is skipped elsewhere.
"""

from __future__ import annotations

import os
import shutil
import signal
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from tests.recipe import buildah, user_namespaces, vm
from tests.recipe.debian import Archive, base_image_tar
from tests.recipe.mirror import CHANNEL, VERSION, Key, Mirror
from tests.recipe.node import READY, Init, InitRun, Node
from tests.recipe.parts import CACHE, RECIPE, TIMINGS, UnavailableError, digest, run, unavailable
from tests.recipe.standins import Standins, build_standins

TOOLS = {
    "apt-get": "apt",
    "dpkg-deb": "dpkg",
    "buildah": "buildah",
    "mmdebstrap": "mmdebstrap",
    "newuidmap": "uidmap",
    "newgidmap": "uidmap",
    "unshare": "util-linux",
    "qemu-system-x86_64": "qemu-system-x86",
    "cpio": "cpio",
    "gpg": "gnupg",
    "make": "make",
    "gcc": "gcc",
    "depmod": "kmod",
    "busybox": "busybox-static",
    "chroot": "coreutils",
    "file": "file",
}
NOTES: list[str] = []
STARTED_AT = time.time()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if here in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.recipe)
            item.add_marker(pytest.mark.timeout(3600))


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if TIMINGS.parts:
        terminalreporter.write_sep("-", f"recipe suite: time of each part (cache {CACHE})")
        for line in [*TIMINGS.lines(), *(f"  {note}" for note in NOTES)]:
            terminalreporter.write_line(line)


@pytest.fixture(scope="session")
def recipe_host() -> None:
    if os.geteuid() == 0:
        unavailable(
            "the recipe suite runs unprivileged, not as root: run it as a user with "
            "/etc/subuid and /etc/subgid ranges (bash .ci/recipe-user creates releasebot-ci "
            "and runs it so)"
        )
    missing = [package for tool, package in TOOLS.items() if shutil.which(tool) is None]
    if missing:
        unavailable(f"the recipe suite needs these packages: {' '.join(sorted(set(missing)))}")
    problem = user_namespaces.problem()
    if problem:
        unavailable(problem)
    if "statically linked" not in run(["file", "-L", vm.BUSYBOX]).stdout:
        unavailable(f"{vm.BUSYBOX} is not a static busybox (apt-get install busybox-static)")


@pytest.fixture(scope="session")
def archive(recipe_host: None) -> Archive:
    with TIMINGS.part("apt index (private configuration)"):
        found = Archive(CACHE / "apt")
        try:
            found.update()
        except UnavailableError as error:
            unavailable(str(error))
    return found


@pytest.fixture(scope="session")
def standins(archive: Archive) -> Standins:
    with TIMINGS.part("stand-ins: downloads and assembly") as notes:
        cached = any((CACHE / "standins").glob("*/DONE"))
        try:
            made = build_standins(archive)
        except UnavailableError as error:
            unavailable(str(error))
        notes.append(f"kernel {made.kernel_version}, NVIDIA {made.driver_version}")
        if cached and (made.root / "DONE").stat().st_mtime < STARTED_AT:
            notes.append("cached")
    NOTES.extend(line for line in made.adaptations.splitlines() if line)
    return made


@pytest.fixture(scope="session")
def keys(recipe_host: None) -> Iterator[tuple[Key, Key]]:
    """The throwaway signing key and a foreign one, kept in the cache with the image built
    against them (the image's key is part of its cache key)."""
    made = (
        Key.cached(CACHE / "gnupg" / "flatcar", "flatcar"),
        Key.cached(CACHE / "gnupg" / "foreign", "mallory"),
    )
    yield made
    for key in made:
        key.close()


@pytest.fixture(scope="session")
def mirror(
    standins: Standins, keys: tuple[Key, Key], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Mirror]:
    with TIMINGS.part("signed mirror (DIGESTS, clearsign)"):
        served = Mirror(tmp_path_factory.mktemp("mirror"), *keys)
        served.publish(standins.flatcar, standins.runfile, standins.driver_version)
    with served:
        yield served


@pytest.fixture(scope="session")
def base_image(archive: Archive) -> str:
    with TIMINGS.part("base image: mmdebstrap trixie + buildah import") as notes:
        before = list((CACHE / "base").glob("*.tar"))
        try:
            name = buildah.base_image(base_image_tar(archive))
        except UnavailableError as error:
            unavailable(str(error))
        if before:
            notes.append("cached tar")
    return name


@pytest.fixture(scope="session")
def image(
    standins: Standins, mirror: Mirror, base_image: str, keys: tuple[Key, Key]
) -> Iterator[buildah.Image]:
    args = {
        "DRIVER_VERSION": standins.driver_version,
        "DRIVER_BRANCH": standins.driver_version.split(".")[0],
        "FLATCAR_VERSION": VERSION,
        "FLATCAR_CHANNEL": CHANNEL,
        "KERNEL_VERSION": standins.kernel_version,
        "TARGETARCH": "amd64",
        "FLATCAR_KEY_FINGERPRINT": keys[0].fingerprint,
        "BUILDER_IMAGE": base_image,
        "RUNTIME_IMAGE": base_image,
        "RECIPE_REVISION": "recipe-suite",
        "MODULE_TYPES": "both",
        "BUILD_JOBS": "2",
    }
    recipe = sorted(path for path in RECIPE.rglob("*") if path.is_file())
    year, week_number, _ = datetime.now(UTC).isocalendar()
    week = f"{year}-W{week_number:02d}"
    key = digest(
        *recipe,
        *map(str, recipe),
        standins.root.name,
        repr(sorted(args.items())),
        repr(buildah.capabilities()),
        week,
    )
    name = f"{buildah.REPOSITORY}:{key}"
    log = CACHE / "logs" / f"buildah-build-{key}.log"
    args |= {  # where the mirror is changes per run, not what it serves
        "FLATCAR_BASE_URL": mirror.flatcar_base_url,
        "NVIDIA_BASE_URL": mirror.nvidia_base_url,
        "FLATCAR_KEY_URL": mirror.key_url,
    }
    reuse = not os.environ.get("CI") and buildah.exists(name) and log.exists()
    with TIMINGS.part("buildah build: both stages, both flavours compiled") as notes:
        if reuse:
            built_at = datetime.fromtimestamp(log.stat().st_mtime, UTC).isoformat(
                timespec="minutes"
            )
            notes.append(f"reused image {key} built {built_at} (CI always builds)")
            text = log.read_text(errors="replace")
        else:
            buildah.remove_other_images(keep="")
            text = buildah.build(name, args, log)
    built = buildah.mount(name)
    try:
        yield buildah.Image(name, built, text, reuse)
    finally:
        buildah.unmount(built)


@pytest.fixture(scope="session")
def banner_boot(standins: Standins, tmp_path_factory: pytest.TempPathFactory) -> vm.Boot:
    work = tmp_path_factory.mktemp("vm-banner")
    with TIMINGS.part("QEMU boot 1: /proc/version"):
        return vm.boot(standins.vmlinuz, vm.initrd(work, [], {}), CACHE / "logs" / "vm-banner.log")


@pytest.fixture(scope="session")
def init_runs(
    image: buildah.Image,
    standins: Standins,
    banner_boot: vm.Boot,
    tmp_path_factory: pytest.TempPathFactory,
) -> dict[str, InitRun]:
    runs: dict[str, InitRun] = {}
    out = tmp_path_factory.mktemp("linked")
    modroot = image.built.driver_root / "modroot"
    for flavour in ("proprietary", "open"):
        with TIMINGS.part(f"nvidia-driver init in the image ({flavour})") as notes:
            node = Node(
                image.built.root, standins.kernel_version, VERSION, banner_boot.proc_version
            )
            node.prepare()
            init = Init(node, KERNEL_MODULE_TYPE=flavour)
            try:
                init.wait_for(READY)
                video = modroot / "lib" / "modules" / standins.kernel_version / "video"
                shutil.copytree(video, out / flavour)
                dependencies = vm.dependency_order(modroot, standins.kernel_version, "nvidia")
                cpu = None
                if flavour == "proprietary":
                    first = init.new_sleeper()
                    os.kill(first, signal.SIGKILL)
                    init.new_sleeper(other_than=first)
                    before = init.cpu_seconds()
                    time.sleep(2.0)
                    cpu = init.cpu_seconds() - before
                    notes.append(
                        f"CPU while waiting after its sleeper was killed: {cpu:.2f} s in 2 s"
                    )
                code = init.terminate()
            finally:
                init.close()
            runs[flavour] = InitRun(
                init.text(), code, out / flavour, dependencies, node.calls(), cpu
            )
    return runs


@pytest.fixture(scope="session")
def module_boots(
    standins: Standins, init_runs: dict[str, InitRun], tmp_path_factory: pytest.TempPathFactory
) -> dict[str, vm.Boot]:
    """One boot per flavour: the kernel warns only once per boot about some things."""
    boots: dict[str, vm.Boot] = {}
    for flavour, result in init_runs.items():
        work = tmp_path_factory.mktemp(f"vm-{flavour}")
        with TIMINGS.part(f"QEMU boot: insmod the {flavour} nvidia.ko"):
            boots[flavour] = vm.boot(
                standins.vmlinuz,
                vm.initrd(work, result.dependencies, {flavour: result.modules / "nvidia.ko"}),
                CACHE / "logs" / f"vm-{flavour}.log",
            )
    return boots
