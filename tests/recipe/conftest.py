"""The recipe suite's session: stand-ins, the signed mirror, buildah builds (the driver base
and two releases FROM it), the VM boots.

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
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import pytest

from tests.recipe import buildah, user_namespaces, vm
from tests.recipe.debian import Archive, base_image_tar
from tests.recipe.mirror import CHANNEL, PREVIOUS_VERSION, VERSION, Key, Mirror
from tests.recipe.node import READY, Init, InitRun, Node
from tests.recipe.parts import CACHE, RECIPE, TIMINGS, UnavailableError, digest, run, unavailable
from tests.recipe.standins import Standins, build_both

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
RELEASES = {"next": VERSION, "previous": PREVIOUS_VERSION}
"""The stand-in release and the one before it, by Flatcar version."""
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
def all_standins(archive: Archive) -> dict[str, Standins]:
    """The stand-in release (``next``: the newest 6.12 kernel) and the one before it
    (``previous``: an older 6.12 kernel of the archive, same gcc major)."""
    with TIMINGS.part("stand-ins: downloads and assembly (two kernels)") as notes:
        cached = len(list((CACHE / "standins").glob("*/DONE"))) >= 2
        try:
            latest, before = build_both(archive)
        except UnavailableError as error:
            unavailable(str(error))
        notes.append(
            f"kernels {latest.kernel_version} and {before.kernel_version}, "
            f"NVIDIA {latest.driver_version}"
        )
        if cached and (latest.root / "DONE").stat().st_mtime < STARTED_AT:
            notes.append("cached")
    NOTES.extend(line for line in latest.adaptations.splitlines() if line)
    return {"next": latest, "previous": before}


@pytest.fixture(scope="session", params=list(RELEASES))
def release(request: pytest.FixtureRequest) -> str:
    """Which stand-in release the image checks run on: every one runs on both."""
    return str(request.param)


@pytest.fixture(scope="session")
def standins(all_standins: dict[str, Standins], release: str) -> Standins:
    return all_standins[release]


@pytest.fixture(scope="session")
def flatcar_version(release: str) -> str:
    return RELEASES[release]


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
    all_standins: dict[str, Standins],
    keys: tuple[Key, Key],
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Mirror]:
    latest = all_standins["next"]
    with TIMINGS.part("signed mirror (DIGESTS, clearsign)"):
        served = Mirror(tmp_path_factory.mktemp("mirror"), *keys)
        served.publish(
            latest.flatcar,
            latest.runfile,
            latest.driver_version,
            previous=all_standins["previous"].flatcar,
        )
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


def week() -> str:
    """The ISO week: a drifting Debian archive is built against at least weekly."""
    year, week_number, _ = datetime.now(UTC).isocalendar()
    return f"{year}-W{week_number:02d}"


def recipe_files() -> list[Path]:
    return sorted(path for path in RECIPE.rglob("*") if path.is_file())


BUILT: dict[str, buildah.Built | None] = {}
"""Image name -> nothing: what this session built or reused already (built once)."""


def build_once(
    name: str, key: str, args: dict[str, str], dockerfile: Path, prefix: str, what: str
) -> tuple[str, bool]:
    """Build ``name`` (or reuse it outside CI when its log is there); its log's text and
    whether it was reused."""
    log = CACHE / "logs" / f"buildah-build-{key}.log"
    if name in BUILT:
        return log.read_text(errors="replace"), True
    reuse = not os.environ.get("CI") and buildah.exists(name) and log.exists()
    with TIMINGS.part(what) as notes:
        if reuse:
            built_at = datetime.fromtimestamp(log.stat().st_mtime, UTC).isoformat(
                timespec="minutes"
            )
            notes.append(f"reused image {key} built {built_at} (CI always builds)")
            text = log.read_text(errors="replace")
        else:
            buildah.remove_other_images(keep=name, prefix=prefix)
            text = buildah.build(name, args, log, dockerfile=dockerfile)
    BUILT[name] = None
    return text, reuse


@dataclass(frozen=True)
class DriverBase:
    """The driver base built from ``Dockerfile.base``: local name, ``DRIVER_BASE`` value
    (``<repository>@sha256:<digest>``, as the bot passes it), build log."""

    name: str
    reference: str
    log: str


@pytest.fixture(scope="session")
def driver_base(all_standins: dict[str, Standins], mirror: Mirror, base_image: str) -> DriverBase:
    latest = all_standins["next"]
    args = {
        "DRIVER_VERSION": latest.driver_version,
        "DRIVER_BRANCH": latest.driver_version.split(".")[0],
        "TARGETARCH": "amd64",
        "RUNTIME_IMAGE": base_image,
        "RECIPE_REVISION": "recipe-suite",
    }
    recipe = recipe_files()
    key = digest(
        *recipe,
        *map(str, recipe),
        latest.runfile,
        repr(sorted(args.items())),
        repr(buildah.capabilities()),
        week(),
    )
    name = f"{buildah.BASE_REPOSITORY}:{key}"
    args |= {"NVIDIA_BASE_URL": mirror.nvidia_base_url}  # where, per run; not what
    text, _ = build_once(
        name,
        key,
        args,
        RECIPE / "Dockerfile.base",
        f"{buildah.BASE_REPOSITORY}:",
        "buildah build: driver base (Dockerfile.base)",
    )
    return DriverBase(name, f"{buildah.BASE_REPOSITORY}@{buildah.manifest_digest(name)}", text)


def release_image(
    release: str,
    all_standins: dict[str, Standins],
    mirror: Mirror,
    base_image: str,
    keys: tuple[Key, Key],
    driver_base: DriverBase,
) -> tuple[str, str, bool]:
    """The per-release image of ``release`` built FROM the driver base: name, log, reused."""
    standins = all_standins[release]
    args = {
        "DRIVER_VERSION": standins.driver_version,
        "DRIVER_BRANCH": standins.driver_version.split(".")[0],
        "FLATCAR_VERSION": RELEASES[release],
        "FLATCAR_CHANNEL": CHANNEL,
        "KERNEL_VERSION": standins.kernel_version,
        "TARGETARCH": "amd64",
        "FLATCAR_KEY_FINGERPRINT": keys[0].fingerprint,
        "BUILDER_IMAGE": base_image,
        "DRIVER_BASE": driver_base.reference,
        "RECIPE_REVISION": "recipe-suite",
        "MODULE_TYPES": "both",
        "BUILD_JOBS": "2",
    }
    recipe = recipe_files()
    key = digest(
        *recipe,
        *map(str, recipe),
        standins.root.name,
        repr(sorted(args.items())),
        repr(buildah.capabilities()),
        week(),
    )
    name = f"{buildah.REPOSITORY}:{release}-{key}"
    args |= {  # where the mirror is changes per run, not what it serves
        "FLATCAR_BASE_URL": mirror.flatcar_base_url,
        "FLATCAR_KEY_URL": mirror.key_url,
    }
    text, reused = build_once(
        name,
        key,
        args,
        RECIPE / "Dockerfile",
        f"{buildah.REPOSITORY}:{release}-",
        f"buildah build: {release} release ({standins.kernel_version}), both flavours",
    )
    return name, text, reused


@pytest.fixture(scope="session")
def image(
    release: str,
    all_standins: dict[str, Standins],
    mirror: Mirror,
    base_image: str,
    keys: tuple[Key, Key],
    driver_base: DriverBase,
) -> Iterator[buildah.Image]:
    name, text, reused = release_image(release, all_standins, mirror, base_image, keys, driver_base)
    built = buildah.mount(name)
    try:
        yield buildah.Image(name, built, text, reused)
    finally:
        buildah.unmount(built)


@dataclass(frozen=True)
class Layers:
    """Both releases' images and the base, pushed into one OCI layout (gzip layers)."""

    base: str
    images: dict[str, str]
    logs: dict[str, str]
    layout: Path


@pytest.fixture(scope="session")
def layers(
    all_standins: dict[str, Standins],
    mirror: Mirror,
    base_image: str,
    keys: tuple[Key, Key],
    driver_base: DriverBase,
) -> Layers:
    images: dict[str, str] = {}
    logs: dict[str, str] = {}
    for name in RELEASES:
        images[name], logs[name], _ = release_image(
            name, all_standins, mirror, base_image, keys, driver_base
        )
    layout = CACHE / "layers" / "oci"
    with TIMINGS.part("buildah push: base and both releases into one OCI layout"):
        shutil.rmtree(layout, ignore_errors=True)
        buildah.push_oci(driver_base.name, layout, "base")
        for name, image in images.items():
            buildah.push_oci(image, layout, name)
    return Layers(driver_base.name, images, logs, layout)


@pytest.fixture(scope="session")
def banner_boot(
    standins: Standins, release: str, tmp_path_factory: pytest.TempPathFactory
) -> vm.Boot:
    work = tmp_path_factory.mktemp("vm-banner")
    with TIMINGS.part(f"QEMU boot: /proc/version ({standins.kernel_version})"):
        return vm.boot(
            standins.vmlinuz, vm.initrd(work, [], {}), CACHE / "logs" / f"vm-banner-{release}.log"
        )


@pytest.fixture(scope="session")
def init_runs(
    image: buildah.Image,
    standins: Standins,
    banner_boot: vm.Boot,
    flatcar_version: str,
    release: str,
    tmp_path_factory: pytest.TempPathFactory,
) -> dict[str, InitRun]:
    runs: dict[str, InitRun] = {}
    out = tmp_path_factory.mktemp("linked")
    modroot = image.built.driver_root / "modroot"
    for flavour in ("proprietary", "open"):
        with TIMINGS.part(f"nvidia-driver init in the {release} image ({flavour})") as notes:
            node = Node(
                image.built.root,
                standins.kernel_version,
                flatcar_version,
                banner_boot.proc_version,
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
        with TIMINGS.part(f"QEMU boot: insmod the {flavour} nvidia.ko ({standins.kernel_version})"):
            boots[flavour] = vm.boot(
                standins.vmlinuz,
                vm.initrd(work, result.dependencies, {flavour: result.modules / "nvidia.ko"}),
                CACHE / "logs" / f"vm-{flavour}-{standins.kernel_version}.log",
            )
    return boots
