"""The recipe's download-and-verify step (``releasebot/recipe/scripts/fetch-verified``).

Runs the real bash script against a local HTTP server (``tests.support.feedserver.FeedServer``)
serving hand-made Flatcar artefacts, each with a ``.DIGESTS`` (MD5, SHA1 and SHA512
sections, as Flatcar writes them) and a clearsigned ``.DIGESTS.asc``, signed with keys this
module generates with gpg (ed25519 primary for certification + signing subkey, in a temp
GNUPGHOME). Covers: good artefacts pass and land in the destination; the ``{channel}``
placeholder; the key fetched from a URL; a 404 reported as waiting (75) for Flatcar inputs
and as gone (76) for the NVIDIA runfile; 5xx as unavailable (69); a tampered file, a
DIGESTS whose SHA512 section does not vouch for the file, and an unsigned DIGESTS that
differs from the signed one (65); a signature by another key, a key file without the
pinned key, and an unsigned DIGESTS.asc (66); a release signed by a subkey that has
expired since (made at a faked past time) is accepted; the runfile's pinned SHA-256 and
embedded-checksum check. The exit codes and messages are the contract the bot's readiness
gate and build-failure handling rely on.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.feedserver import FeedServer, Reply
from tests.support.gpg import gpg
from tests.support.tools import missing_tool

SCRIPT = (
    Path(__file__).resolve().parents[2] / "releasebot" / "recipe" / "scripts" / "fetch-verified"
)
VERSION = "4593.2.5"
BOARD = "amd64-usr"
CHANNEL = "stable"
FILES = {
    "flatcar-container.tar.gz": b"\x1f\x8b fake container tarball\n" * 50,
    "flatcar_production_image.vmlinuz": b"MZ fake kernel\x00Linux version 6.12.102-flatcar (b@h)\n",
    "flatcar_production_image_kernel_config.txt": b"CONFIG_GCC_VERSION=140300\nCONFIG_64BIT=y\n",
}
PAST = 1577836800  # 2020-01-01: keys "of an old release" are made then, at a faked time


@pytest.fixture(autouse=True)
def _gpg_installed() -> None:
    if shutil.which("gpg") is None:
        missing_tool("gpg is not installed (apt-get install gnupg)")


@dataclass(frozen=True)
class Key:
    fingerprint: str
    signing_subkey: str
    public: Path
    """The exported public key (primary + subkeys), as Flatcar publishes its key file."""


@dataclass(frozen=True)
class Keys:
    home: Path
    pinned: Key
    foreign: Key
    expired: Key
    """A key whose signing subkey expired long ago (created and used at a faked past time)."""


def _make_key(home: Path, name: str, *, faked: int | None = None, expire: str = "0") -> Key:
    uid = f"{name} <{name}@example.invalid>"
    gpg(home, "--quick-gen-key", uid, "ed25519", "cert", "0", faked=faked)
    listing = gpg(home, "--with-colons", "--list-keys", uid)
    fingerprint = _fingerprints(listing)[0]
    gpg(home, "--quick-add-key", fingerprint, "ed25519", "sign", expire, faked=faked)
    listing = gpg(home, "--with-colons", "--list-keys", fingerprint)
    subkey = _fingerprints(listing)[1]
    public = home.parent / f"{name}.asc"
    public.write_text(gpg(home, "--armor", "--export", fingerprint))
    return Key(fingerprint, subkey, public)


def _fingerprints(listing: str) -> list[str]:
    return [line.split(":")[9] for line in listing.splitlines() if line.startswith("fpr:")]


@pytest.fixture(scope="module")
def keys(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Keys]:
    base = tmp_path_factory.mktemp("keys")
    home = base / "gnupg"
    home.mkdir(mode=0o700)
    try:
        yield Keys(
            home=home,
            pinned=_make_key(home, "flatcar"),
            foreign=_make_key(home, "mallory"),
            expired=_make_key(home, "oldflatcar", faked=PAST, expire="30d"),
        )
    finally:
        subprocess.run(
            ["gpgconf", "--homedir", str(home), "--kill", "all"],
            check=False,
            capture_output=True,
            timeout=30,
        )


def digests(
    name: str, body: bytes, *, sha512: str | None = None, sha512_name: str | None = None
) -> str:
    """A DIGESTS file in Flatcar's layout: MD5, SHA1 and SHA512 sections."""
    return (
        "# MD5 HASH\n"
        f"{hashlib.md5(body).hexdigest()}  {name}\n"
        "# SHA1 HASH\n"
        f"{hashlib.sha1(body).hexdigest()}  {name}\n"
        "# SHA512 HASH\n"
        f"{sha512 or hashlib.sha512(body).hexdigest()}  {sha512_name or name}\n"
    )


def clearsign(keys: Keys, signer: str, text: str, *, faked: int | None = None) -> bytes:
    source = keys.home.parent / "to-sign.txt"
    source.write_text(text)
    out = keys.home.parent / "to-sign.txt.asc"
    out.unlink(missing_ok=True)
    gpg(
        keys.home,
        "--local-user",
        f"{signer}!",
        "--output",
        str(out),
        "--clearsign",
        str(source),
        faked=faked,
    )
    return out.read_bytes()


class Release:
    """One release directory on the fake server: its files, DIGESTS and signatures."""

    def __init__(self, server: FeedServer, keys: Keys) -> None:
        self.server = server
        self.keys = keys
        self.prefix = f"/{CHANNEL}/{BOARD}/{VERSION}"

    def publish(
        self,
        name: str,
        body: bytes,
        *,
        signer: str | None = None,
        digest_text: str | None = None,
        unsigned_text: str | None = None,
        faked: int | None = None,
    ) -> None:
        text = digest_text if digest_text is not None else digests(name, body)
        signature = clearsign(
            self.keys, signer or self.keys.pinned.signing_subkey, text, faked=faked
        )
        self.route(name, body)
        self.route(
            f"{name}.DIGESTS", (unsigned_text if unsigned_text is not None else text).encode()
        )
        self.route(f"{name}.DIGESTS.asc", signature)

    def publish_all(self, *, signer: str | None = None, faked: int | None = None) -> None:
        for name, body in FILES.items():
            self.publish(name, body, signer=signer, faked=faked)

    def route(self, name: str, body: bytes, status: int = 200) -> None:
        self.server.route(f"{self.prefix}/{name}", Reply(status, {}, body))


@pytest.fixture
def server() -> Iterator[FeedServer]:
    with FeedServer() as running:
        yield running


@pytest.fixture
def release(server: FeedServer, keys: Keys) -> Release:
    return Release(server, keys)


def run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    environment = {
        **os.environ,
        "FETCH_RETRIES": "0",
        "FETCH_CONNECT_TIMEOUT": "5",
        "FETCH_MAX_TIME": "30",
        **(env or {}),
    }
    return subprocess.run(
        ["bash", str(SCRIPT), *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env=environment,
    )


def fetch_flatcar(
    server: FeedServer,
    keys: Keys,
    dest: Path,
    *extra: str,
    key: Key | None = None,
    fingerprint: str | None = None,
) -> subprocess.CompletedProcess[str]:
    return run(
        "flatcar",
        "--base-url",
        server.url("/{channel}"),
        "--channel",
        CHANNEL,
        "--version",
        VERSION,
        "--board",
        BOARD,
        "--fingerprint",
        fingerprint or keys.pinned.fingerprint,
        "--key-file",
        str((key or keys.pinned).public),
        "--dest",
        str(dest),
        *extra,
    )


# --- Flatcar: the good path --------------------------------------------------------------


def test_good_artefacts_pass_and_land_in_dest(
    server: FeedServer, keys: Keys, release: Release, tmp_path: Path
) -> None:
    release.publish_all()
    result = fetch_flatcar(server, keys, tmp_path / "in")
    assert result.returncode == 0, result.stderr
    for name, body in FILES.items():
        assert (tmp_path / "in" / name).read_bytes() == body
        assert not (tmp_path / "in" / f"{name}.partial").exists()
    assert f"signed by {keys.pinned.fingerprint}" in result.stderr
    # {channel} was substituted, and the small signed digests came before each file.
    paths = [request.path for request in server.requests]
    tarball = f"{release.prefix}/flatcar-container.tar.gz"
    assert paths.index(f"{tarball}.DIGESTS.asc") < paths.index(tarball)


def test_only_the_named_files_are_fetched(
    server: FeedServer, keys: Keys, release: Release, tmp_path: Path
) -> None:
    release.publish(
        "flatcar_production_image_kernel_config.txt",
        FILES["flatcar_production_image_kernel_config.txt"],
    )
    result = fetch_flatcar(server, keys, tmp_path, "flatcar_production_image_kernel_config.txt")
    assert result.returncode == 0, result.stderr
    assert sorted(path.name for path in tmp_path.iterdir()) == [
        "flatcar_production_image_kernel_config.txt",
        "flatcar_production_image_kernel_config.txt.DIGESTS",
    ]


def test_the_key_can_be_fetched_from_a_url(
    server: FeedServer, keys: Keys, release: Release, tmp_path: Path
) -> None:
    release.publish_all()
    server.route("/key.asc", Reply(200, {}, keys.pinned.public.read_bytes()))
    result = run(
        "flatcar",
        "--base-url",
        server.url("/{channel}"),
        "--channel",
        CHANNEL,
        "--version",
        VERSION,
        "--board",
        BOARD,
        "--fingerprint",
        keys.pinned.fingerprint.lower(),
        "--key-url",
        server.url("/key.asc"),
        "--dest",
        str(tmp_path),
    )
    assert result.returncode == 0, result.stderr


def test_an_old_release_signed_by_a_since_expired_subkey_is_accepted(
    server: FeedServer, keys: Keys, release: Release, tmp_path: Path
) -> None:
    # Signed one day after the subkey was made, which expired 30 days later (in 2020).
    release.publish_all(signer=keys.expired.signing_subkey, faked=PAST + 86400)
    result = fetch_flatcar(
        server, keys, tmp_path, key=keys.expired, fingerprint=keys.expired.fingerprint
    )
    assert result.returncode == 0, result.stderr
    assert "before it expired; accepted" in result.stderr


# --- Flatcar: not published yet -----------------------------------------------------------


@pytest.mark.parametrize(
    "missing", ["flatcar_production_image.vmlinuz", "flatcar-container.tar.gz.DIGESTS.asc"]
)
def test_a_404_means_waiting(
    server: FeedServer, keys: Keys, release: Release, tmp_path: Path, missing: str
) -> None:
    release.publish_all()
    release.route(missing, b"not found", status=404)
    result = fetch_flatcar(server, keys, tmp_path)
    assert result.returncode == 75
    assert f"waiting: {missing} not published yet" in result.stderr


def test_a_server_error_means_unavailable(
    server: FeedServer, keys: Keys, release: Release, tmp_path: Path
) -> None:
    release.publish_all()
    release.route("flatcar-container.tar.gz", b"oops", status=503)
    result = fetch_flatcar(server, keys, tmp_path)
    assert result.returncode == 69
    assert "unavailable: flatcar-container.tar.gz: HTTP 503" in result.stderr


# --- Flatcar: tampering -------------------------------------------------------------------


def test_a_tampered_file_is_refused(
    server: FeedServer, keys: Keys, release: Release, tmp_path: Path
) -> None:
    release.publish_all()
    release.route("flatcar-container.tar.gz", b"evil" + FILES["flatcar-container.tar.gz"])
    result = fetch_flatcar(server, keys, tmp_path)
    assert result.returncode == 65
    assert "SHA512 mismatch for flatcar-container.tar.gz" in result.stderr
    assert not (tmp_path / "flatcar-container.tar.gz").exists()
    assert not (tmp_path / "flatcar-container.tar.gz.partial").exists()


def test_a_signed_sha512_line_for_other_bytes_is_refused(
    server: FeedServer, keys: Keys, release: Release, tmp_path: Path
) -> None:
    name = "flatcar_production_image.vmlinuz"
    release.publish_all()
    release.publish(name, FILES[name], digest_text=digests(name, FILES[name], sha512="ab" * 64))
    result = fetch_flatcar(server, keys, tmp_path)
    assert result.returncode == 65
    assert f"SHA512 mismatch for {name}" in result.stderr


def test_a_sha512_line_naming_another_file_does_not_vouch(
    server: FeedServer, keys: Keys, release: Release, tmp_path: Path
) -> None:
    # The MD5 and SHA1 lines are right, but only the SHA512 section counts.
    name = "flatcar_production_image.vmlinuz"
    release.publish_all()
    release.publish(name, FILES[name], digest_text=digests(name, FILES[name], sha512_name="other"))
    result = fetch_flatcar(server, keys, tmp_path)
    assert result.returncode == 65
    assert f"SHA512 mismatch for {name}: its DIGESTS has no SHA512 line for it" in result.stderr


def test_an_unsigned_digests_differing_from_the_signed_one_is_refused(
    server: FeedServer, keys: Keys, release: Release, tmp_path: Path
) -> None:
    name = "flatcar-container.tar.gz"
    release.publish_all()
    release.publish(name, FILES[name], unsigned_text=digests(name, b"other bytes"))
    result = fetch_flatcar(server, keys, tmp_path)
    assert result.returncode == 65
    assert (
        f"SHA512 mismatch for {name}: {name}.DIGESTS differs from its signed copy" in result.stderr
    )


# --- Flatcar: who signed ------------------------------------------------------------------


def test_digests_signed_by_another_key_are_refused(
    server: FeedServer, keys: Keys, release: Release, tmp_path: Path
) -> None:
    release.publish_all()
    name = "flatcar_production_image_kernel_config.txt"
    release.publish(name, FILES[name], signer=keys.foreign.signing_subkey)
    result = fetch_flatcar(server, keys, tmp_path)
    assert result.returncode == 66
    assert f"DIGESTS for {name} not signed by {keys.pinned.fingerprint}" in result.stderr


def test_another_key_in_the_key_file_does_not_help(
    server: FeedServer, keys: Keys, release: Release, tmp_path: Path
) -> None:
    # The attacker ships their key beside the real one; only the pinned key is trusted.
    bundle = tmp_path / "bundle.asc"
    bundle.write_text(keys.pinned.public.read_text() + keys.foreign.public.read_text())
    release.publish_all(signer=keys.foreign.signing_subkey)
    result = run(
        "flatcar",
        "--base-url",
        server.url("/{channel}"),
        "--channel",
        CHANNEL,
        "--version",
        VERSION,
        "--board",
        BOARD,
        "--fingerprint",
        keys.pinned.fingerprint,
        "--key-file",
        str(bundle),
        "--dest",
        str(tmp_path / "in"),
    )
    assert result.returncode == 66
    assert f"not signed by {keys.pinned.fingerprint}" in result.stderr


def test_a_key_file_without_the_pinned_key_is_refused(
    server: FeedServer, keys: Keys, release: Release, tmp_path: Path
) -> None:
    release.publish_all(signer=keys.foreign.signing_subkey)
    result = fetch_flatcar(server, keys, tmp_path, key=keys.foreign)
    assert result.returncode == 66
    assert f"does not hold the pinned primary key {keys.pinned.fingerprint}" in result.stderr


def test_an_unsigned_asc_is_refused(
    server: FeedServer, keys: Keys, release: Release, tmp_path: Path
) -> None:
    release.publish_all()
    name = "flatcar-container.tar.gz"
    release.route(f"{name}.DIGESTS.asc", digests(name, FILES[name]).encode())
    result = fetch_flatcar(server, keys, tmp_path)
    assert result.returncode == 66
    assert f"DIGESTS for {name} not signed by {keys.pinned.fingerprint}" in result.stderr


def test_usage_errors_are_64(tmp_path: Path) -> None:
    assert run().returncode == 64
    assert run("flatcar", "--version", VERSION).returncode == 64
    result = run(
        "flatcar",
        "--base-url",
        "http://127.0.0.1:9/",
        "--version",
        "4593.2",
        "--board",
        BOARD,
        "--fingerprint",
        "F" * 40,
        "--key-file",
        "/dev/null",
        "--dest",
        str(tmp_path),
    )
    assert result.returncode == 64
    assert "bad Flatcar version" in result.stderr


# --- NVIDIA runfile -----------------------------------------------------------------------

DRIVER = "580.95.05"
RUNFILE = f"NVIDIA-Linux-x86_64-{DRIVER}.run"
# A stand-in for the makeself archive: `--check` is its embedded-checksum test.
GOOD_RUNFILE = b'#!/bin/sh\n[ "$1" = --check ] && exit 0\nexit 1\n'
BROKEN_RUNFILE = b'#!/bin/sh\necho "MD5 checksums differ" >&2\nexit 1\n'


def fetch_nvidia(server: FeedServer, dest: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return run(
        "nvidia",
        "--base-url",
        server.url("/tesla"),
        "--version",
        DRIVER,
        "--arch",
        "x86_64",
        "--dest",
        str(dest),
        *extra,
    )


def test_the_runfile_is_fetched_checked_and_its_sha256_recorded(
    server: FeedServer, tmp_path: Path
) -> None:
    server.route(f"/tesla/{DRIVER}/{RUNFILE}", Reply(200, {}, GOOD_RUNFILE))
    result = fetch_nvidia(server, tmp_path)
    assert result.returncode == 0, result.stderr
    assert (tmp_path / RUNFILE).read_bytes() == GOOD_RUNFILE
    sha = hashlib.sha256(GOOD_RUNFILE).hexdigest()
    assert (tmp_path / f"{RUNFILE}.sha256").read_text() == f"{sha}  {RUNFILE}\n"
    assert "no SHA256 pinned" in result.stderr
    pinned = fetch_nvidia(server, tmp_path / "again", "--sha256", sha.upper())
    assert pinned.returncode == 0, pinned.stderr


def test_a_runfile_404_means_gone(server: FeedServer, tmp_path: Path) -> None:
    result = fetch_nvidia(server, tmp_path)
    assert result.returncode == 76
    assert f"gone: {RUNFILE} not found (HTTP 404" in result.stderr


def test_a_runfile_with_another_sha256_is_refused(server: FeedServer, tmp_path: Path) -> None:
    server.route(f"/tesla/{DRIVER}/{RUNFILE}", Reply(200, {}, GOOD_RUNFILE))
    result = fetch_nvidia(server, tmp_path, "--sha256", "0" * 64)
    assert result.returncode == 65
    assert f"SHA256 mismatch for {RUNFILE}" in result.stderr
    assert not (tmp_path / RUNFILE).exists()


def test_a_runfile_failing_its_own_checksums_is_refused(server: FeedServer, tmp_path: Path) -> None:
    server.route(f"/tesla/{DRIVER}/{RUNFILE}", Reply(200, {}, BROKEN_RUNFILE))
    result = fetch_nvidia(server, tmp_path)
    assert result.returncode == 65
    assert f"integrity check failed for {RUNFILE}" in result.stderr
    assert not (tmp_path / RUNFILE).exists()
