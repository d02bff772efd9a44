"""A Flatcar release server and an NVIDIA download server on loopback, signed by a
throwaway key.

Layout as the real ones: ``<root>/<channel>/amd64-usr/<version>/<file>`` with
``<file>.DIGESTS`` (``# MD5 HASH``, ``# SHA1 HASH``, ``# SHA512 HASH`` sections, as
Flatcar writes them) and ``<file>.DIGESTS.asc`` (clearsigned); ``<root>/nvidia/<ver>/``
for the runfile; ``<root>/signing-key.asc``. The key is a throwaway one made for the
suite (kept in the cache with the image built against it): an ed25519 primary for
certification only plus a signing subkey, as Flatcar's.
Files are symlinks into the stand-in cache; the server is the standard library's, bound to
127.0.0.1, so the recipe's RUN steps (buildah, chroot isolation, the host's network) reach
it as they would reach a mirror.

Also published, for ``fetch-verified``'s refusals, next to the good release: a tampered
one (a file changed after signing), one signed by a foreign key, one whose ``.asc`` is not
signed at all, and one without ``.asc``.

Deliberately not here: what is served (``standins.py``).
"""

from __future__ import annotations

import hashlib
import http.server
import shutil
import subprocess
import threading
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, Self

from tests.support.gpg import gpg
from tests.support.servers import Started

CHANNEL = "stable"
BOARD = "amd64-usr"
VERSION = "9999.0.0"
"""A Flatcar version no real release has: the stand-in release."""
PREVIOUS_VERSION = "9998.0.0"
"""The release before it (another kernel of the same series, built by the same gcc)."""
BAD_RELEASES = {
    "tampered": "9999.0.1",
    "foreign-key": "9999.0.2",
    "unsigned": "9999.0.3",
    "no-signature": "9999.0.4",
}
FILES = (
    "flatcar-container.tar.gz",
    "flatcar_production_image.vmlinuz",
    "flatcar_production_image_kernel_config.txt",
)


@dataclass(frozen=True)
class Key:
    home: Path
    fingerprint: str
    signing_subkey: str

    @classmethod
    def make(cls, home: Path, name: str) -> Self:
        home.mkdir(mode=0o700, parents=True)
        uid = f"{name} <{name}@example.invalid>"
        gpg(home, "--quick-gen-key", uid, "ed25519", "cert", "0")
        primary = next(
            line.split(":")[9]
            for line in gpg(home, "--with-colons", "--list-keys", uid).splitlines()
            if line.startswith("fpr:")
        )
        gpg(home, "--quick-add-key", primary, "ed25519", "sign", "0")
        fingerprints = [
            line.split(":")[9]
            for line in gpg(home, "--with-colons", "--list-keys", primary).splitlines()
            if line.startswith("fpr:")
        ]
        return cls(home, primary, fingerprints[1])

    @classmethod
    def cached(cls, home: Path, name: str) -> Self:
        """The key kept in ``home``, made there on first use."""
        if (home / "key.txt").exists():
            primary, subkey = (home / "key.txt").read_text().split()
            return cls(home, primary, subkey)
        shutil.rmtree(home, ignore_errors=True)
        key = cls.make(home, name)
        (home / "key.txt").write_text(f"{key.fingerprint} {key.signing_subkey}\n")
        return key

    def export(self, out: Path) -> None:
        out.write_text(gpg(self.home, "--armor", "--export", self.fingerprint))

    def clearsign(self, text: str, out: Path) -> None:
        source = out.with_suffix(".to-sign")
        source.write_text(text)
        gpg(
            self.home,
            "--local-user",
            f"{self.signing_subkey}!",
            "--output",
            str(out),
            "--clearsign",
            str(source),
        )
        source.unlink()

    def close(self) -> None:
        subprocess.run(
            ["gpgconf", "--homedir", str(self.home), "--kill", "all"],
            capture_output=True,
            timeout=30,
            check=False,
        )


def digests_text(name: str, path: Path) -> str:
    sums = {"MD5": hashlib.md5(), "SHA1": hashlib.sha1(), "SHA512": hashlib.sha512()}
    with path.open("rb") as data:
        while chunk := data.read(1 << 20):
            for hasher in sums.values():
                hasher.update(chunk)
    return "".join(
        f"# {kind} HASH\n{hasher.hexdigest()}  {name}\n" for kind, hasher in sums.items()
    )


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass


class Mirror(Started):
    """Serves ``root`` over HTTP on 127.0.0.1 (a random free port)."""

    def __init__(self, root: Path, key: Key, foreign: Key) -> None:
        self.root = root
        self.key = key
        self.foreign = foreign
        self._server: http.server.ThreadingHTTPServer | None = None

    def publish(
        self, flatcar: Path, runfile: Path, driver: str, previous: Path | None = None
    ) -> None:
        """The stand-in release (``VERSION``), the bad ones made of it, the runfile; and
        ``previous`` (another release's files) as ``PREVIOUS_VERSION`` when given."""
        self.key.export(self.root / "signing-key.asc")
        good = self.publish_good(VERSION, flatcar)
        if previous is not None:
            self.publish_good(PREVIOUS_VERSION, previous)
        for case, version in BAD_RELEASES.items():
            bad = self.release(version)
            for name in FILES:
                if case == "tampered" and name == FILES[2]:
                    data = bytearray((flatcar / name).read_bytes())
                    data[100] ^= 1
                    (bad / name).write_bytes(bytes(data))
                else:
                    (bad / name).symlink_to(flatcar / name)
                text = (good / f"{name}.DIGESTS").read_text()
                (bad / f"{name}.DIGESTS").write_text(text)
                asc = bad / f"{name}.DIGESTS.asc"
                if case == "foreign-key":
                    self.foreign.clearsign(text, asc)
                elif case == "unsigned":
                    asc.write_text(text)
                elif case == "tampered":
                    shutil.copy(good / f"{name}.DIGESTS.asc", asc)
        nvidia = self.root / "nvidia" / driver
        nvidia.mkdir(parents=True)
        (nvidia / runfile.name).symlink_to(runfile)

    def publish_good(self, version: str, flatcar: Path) -> Path:
        """``flatcar``'s files as ``version``, with DIGESTS signed by the pinned key."""
        good = self.release(version)
        for name in FILES:
            (good / name).symlink_to(flatcar / name)
            (good / f"{name}.DIGESTS").write_text(digests_text(name, flatcar / name))
            self.key.clearsign((good / f"{name}.DIGESTS").read_text(), good / f"{name}.DIGESTS.asc")
        return good

    def release(self, version: str) -> Path:
        path = self.root / CHANNEL / BOARD / version
        path.mkdir(parents=True)
        return path

    def start(self) -> Self:
        handler = partial(_Quiet, directory=str(self.root))
        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()

    @property
    def url(self) -> str:
        assert self._server is not None
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    @property
    def flatcar_base_url(self) -> str:
        return f"{self.url}/{{channel}}"

    @property
    def nvidia_base_url(self) -> str:
        return f"{self.url}/nvidia"

    @property
    def key_url(self) -> str:
        return f"{self.url}/signing-key.asc"
