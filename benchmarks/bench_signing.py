"""Benchmark: what signing adds to one publish (registry requests, CPU, wall time).

Real parts: a docker-registry on loopback (distribution 2.8: no referrers API, so the
referrers tag is kept by releasebot) and the same registry behind the referrers-API proxy
of the tests (``tests/support/referrersproxy.py``), ``OrasArtifacts`` over HTTP, a cosign-format
encrypted key file. Each publish is ``attest`` (sign the image, or the index and every
arch; attach SBOM and provenance) followed by ``verify`` (read everything back and check
it), exactly what the reconcile cycle does before it calls a tag published.

Prints, per registry kind and per shape (single-arch, two-arch index): requests for
attest, requests for verify, CPU ms (this thread, RUSAGE_THREAD) and wall ms per publish,
then the one-off cost of loading the key for each scrypt N cosign writes or reads (CPU,
wall, and this process's peak RSS after it: scrypt needs 128 * r * N bytes), what reading
the unchanged key, password and public key files costs before every signature (the
rotation check), and what refusing a 4 GiB public key file costs. Fails if a single-arch
publish needs more than ``MAX_REQUESTS`` requests: a regression to watch, not a tuning
target.

    uv run python benchmarks/bench_signing.py [--short]
"""

from __future__ import annotations

import argparse
import resource
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from releasebot.domain.shared.errors import SigningError  # noqa: E402
from releasebot.domain.shared.versions import Arch, DriverVersion, FlatcarVersion  # noqa: E402
from releasebot.domain.targets.attestation import ArchBuild, AttestationRequest, Material  # noqa: E402
from releasebot.domain.targets.models import Target  # noqa: E402
from releasebot.registry.artifacts import OrasArtifacts  # noqa: E402
from releasebot.registry.oras import OrasRegistry  # noqa: E402
from releasebot.signing.attestor import RegistryAttestor  # noqa: E402
from releasebot.signing.documents import Builder  # noqa: E402
from releasebot.signing.keyfiles import KeyFiles  # noqa: E402
from releasebot.signing.keys import (  # noqa: E402
    SCRYPT_ACCEPTED,
    SCRYPT_N,
    encrypt_key,
    generate_key,
)
from tests.support.referrersproxy import run_referrers_proxy  # noqa: E402
from tests.support.registryserver import RunningRegistry, run_registry  # noqa: E402

MAX_REQUESTS = 60
SHAPES = {1: "1 arch", 2: "2 arches (index)"}
STARTED = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


class Materials:
    """Three Flatcar files with SHA512 and the runfile, as the real source names them."""

    def materials(self, target: Target, arch: Arch) -> tuple[Material, ...]:
        channel, version = target.flatcar_channel, target.flatcar_version.text
        driver = target.driver_version.text
        base = f"https://{channel}.release.flatcar-linux.net/{arch.flatcar_board}/{version}"
        files = (
            "flatcar-container.tar.gz",
            "flatcar_production_image.vmlinuz",
            "kernel_config.txt",
        )
        found = [
            Material(f"{base}/{name}", (("sha512", f"{n:0128x}"),)) for n, name in enumerate(files)
        ]
        runfile = f"https://us.download.nvidia.com/tesla/{driver}/NVIDIA-Linux-{arch.nvidia_name}-{driver}.run"
        return (*found, Material(runfile, ()))


def thread_cpu() -> float:
    return (
        resource.getrusage(resource.RUSAGE_THREAD).ru_utime
        + resource.getrusage(resource.RUSAGE_THREAD).ru_stime
    )


def publish_rounds(
    registry: RunningRegistry, host: str, name: str, key_file: KeyFiles, rounds: int, arches: int
) -> dict[str, float]:
    oras = OrasRegistry(f"{host}/{name}", insecure=True, retries=0)
    artifacts = OrasArtifacts(oras)
    attestor = RegistryAttestor(
        artifacts,
        keys=key_file.load,
        builder=Builder("0.1.0", "ghcr.io/osscontainertools/kaniko:v1.28.0@sha256:" + "1" * 64),
        materials=Materials(),
    )
    attest_requests, verify_requests, cpu, wall = [], [], [], []
    for n in range(rounds):
        tag = f"580.178.04-flatcar4593.2.{n}"
        chosen = [Arch.AMD64, Arch.ARM64][:arches]
        digests = {
            arch: registry.push_image(
                name, f"{tag}-{arch.value}" if arches > 1 else tag, arch=arch.value
            )
            for arch in chosen
        }
        digest = oras.push_index(tag, list(digests.items())) if arches > 1 else digests[Arch.AMD64]
        target = Target(
            tag,
            DriverVersion.parse("580.178.04"),
            "580",
            FlatcarVersion.parse(f"4593.2.{n}"),
            "stable",
            "6.12.102",
            tuple(chosen),
        )
        request = AttestationRequest(
            oras.repository, target, digest,
            tuple(
                ArchBuild(arch, d, f"rb-{n}-{arch.value}", (("DRIVER_VERSION", "580.178.04"),),
                          STARTED, STARTED + timedelta(minutes=20))
                for arch, d in digests.items()
            ),
        )  # fmt: skip
        before, cpu0, wall0 = artifacts.request_count, thread_cpu(), time.perf_counter()
        attestor.attest(request)
        middle = artifacts.request_count
        attestor.verify(tag)
        cpu.append(thread_cpu() - cpu0)
        wall.append(time.perf_counter() - wall0)
        attest_requests.append(middle - before)
        verify_requests.append(artifacts.request_count - middle)
    oras.close()
    return {
        "attest": statistics.median(attest_requests),
        "verify": statistics.median(verify_requests),
        # The first round pays the library imports: the median is the steady cost.
        "cpu_ms": statistics.median(cpu) * 1000,
        "wall_ms": statistics.median(wall) * 1000,
        "first_cpu_ms": cpu[0] * 1000,
    }


def peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def key_loads(work: Path) -> list[tuple[int, float, float, float]]:
    """(N, cpu ms, wall ms, peak RSS MiB) of a first load, smallest N first (peak RSS only
    grows, so each row's peak is that N's or an earlier, smaller one's)."""
    rows = []
    for n in sorted(n for n, _, _ in SCRYPT_ACCEPTED):
        path = work / f"cosign-{n}.key"
        path.write_bytes(encrypt_key(generate_key(), b"bench", scrypt_n=n))
        cpu0, wall0 = thread_cpu(), time.perf_counter()
        KeyFiles(str(path), password=b"bench").load()
        cpu, wall = thread_cpu() - cpu0, time.perf_counter() - wall0
        rows.append((n, cpu * 1000, wall * 1000, peak_rss_mib()))
    return rows


def rotation_check(work: Path) -> tuple[float, float, float]:
    """Microseconds per ``load`` of an unchanged set; ms and RSS growth to refuse 4 GiB."""
    key = generate_key()
    files = {"set.key": encrypt_key(key, b"bench"), "set.pw": b"bench\n", "set.pub": key.public.pem}
    for name, body in files.items():
        (work / name).write_bytes(body)
    keys = KeyFiles(
        str(work / "set.key"), password_path=str(work / "set.pw"), public_path=str(work / "set.pub")
    )
    keys.load()
    rounds = 2000
    started = time.perf_counter()
    for _ in range(rounds):
        keys.load()
    per_check = (time.perf_counter() - started) / rounds * 1e6
    with open(work / "set.pub", "wb") as handle:
        handle.truncate(4 * 1024**3)  # sparse: no disk used
    before, started = peak_rss_mib(), time.perf_counter()
    try:
        keys.load()
    except SigningError:
        pass
    else:
        raise AssertionError("a 4 GiB public key file was accepted")
    return per_check, (time.perf_counter() - started) * 1000, peak_rss_mib() - before


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--short", action="store_true", help="a few publishes (CI)")
    args = parser.parse_args()
    rounds = 3 if args.short else 20
    with tempfile.TemporaryDirectory(prefix="bench-signing-") as temporary:
        work = Path(temporary)
        key_rows = key_loads(work)
        check_us, refuse_ms, refuse_rss = rotation_check(work)
        key_path = work / "cosign.key"
        key_path.write_bytes(encrypt_key(generate_key(), b"bench"))
        key_file = KeyFiles(str(key_path), password=b"bench")
        rows: list[tuple[str, str, dict[str, float]]] = []
        with (
            run_registry(work / "registry") as registry,
            run_referrers_proxy(registry.base_url) as proxy,
        ):
            for label, host, prefix in (
                ("distribution 2.8 (tag fallback)", registry.host, "fallback"),
                ("referrers API (proxy)", proxy.host, "api"),
            ):
                for arches in (1, 2):
                    name = f"{prefix}/a{arches}"
                    result = publish_rounds(registry, host, name, key_file, rounds, arches)
                    rows.append((label, SHAPES[arches], result))
    print(f"signing per publish, median of {rounds} publishes (real registry on loopback)")
    header = ("registry", "shape", "attest req", "verify req", "cpu ms", "wall ms", "1st cpu ms")
    print("{:34} {:18} {:>10} {:>10} {:>8} {:>8} {:>10}".format(*header))
    for label, shape, r in rows:
        cells = (r["attest"], r["verify"], r["cpu_ms"], r["wall_ms"], r["first_cpu_ms"])
        print(
            "{:34} {:18} {:>10.0f} {:>10.0f} {:>8.1f} {:>8.1f} {:>10.1f}".format(
                label, shape, *cells
            )
        )
    for n, cpu_ms, wall_ms, rss in key_rows:
        written = " (what cosign writes)" if n == SCRYPT_N else ""
        print(
            f"key load, scrypt N={n}{written}, once per key change: cpu {cpu_ms:.0f} ms, "
            f"wall {wall_ms:.0f} ms, peak RSS after {rss:.0f} MiB"
        )
    print(f"rotation check per signature (3 unchanged files read and hashed): {check_us:.0f} us")
    print(
        f"a 4 GiB public key file refused in {refuse_ms:.1f} ms; "
        f"peak RSS grew by {refuse_rss:.1f} MiB"
    )
    single = [r for _, shape, r in rows if shape == "1 arch"]
    worst = max(r["attest"] + r["verify"] for r in single)
    if worst > MAX_REQUESTS:
        print(f"FAIL: a single-arch publish needs {worst:.0f} requests (> {MAX_REQUESTS})")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
