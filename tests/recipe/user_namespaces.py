"""The suite's root, had without root: user namespaces for an unprivileged user.

What needs root in a build (installing packages in the base root, ``chroot`` into the built
image, files owned by many users) runs in a user namespace of the suite's user: its own
uid is root there, and the range ``/etc/subuid`` and ``/etc/subgid`` give it maps the
other ids (``newuidmap``/``newgidmap`` of Debian's ``uidmap`` write the maps). Rootless
buildah, ``mmdebstrap --mode=unshare`` and ``unshare --map-root-user --map-auto`` all map
the same way: id 0 inside is the user, ids 1... are the first subordinate ids. So the
files of the image built by buildah keep their owners when ``nvidia-driver init`` runs in
it here.

``problem()`` says in one line why this cannot work for the current user (no ranges, or
the kernel refuses the namespace), or ``None``.

Deliberately not here: what runs in the namespaces (``buildah.py``, ``debian.py``,
``node.py``).
"""

from __future__ import annotations

import os
import pwd
import subprocess
from pathlib import Path

SUBORDINATE_IDS = 65536
"""Enough for a Debian root: its system users and ``nobody`` (65534)."""

ENTER = ["unshare", "--map-root-user", "--map-auto"]
"""Prefix: run a command as root of a new user namespace with the subordinate ids mapped
(and a mount namespace of its own, as ``unshare`` gives). It ``exec``s the command, so the
caller's child IS the command."""


def ranges(path: Path, user: str, uid: int) -> int:
    """How many subordinate ids ``path`` grants ``user`` (by name or number)."""
    if not path.exists():
        return 0
    total = 0
    for line in path.read_text(errors="replace").splitlines():
        fields = line.strip().split(":")
        if len(fields) == 3 and fields[0] in (user, str(uid)) and fields[2].isdigit():
            total += int(fields[2])
    return total


def problem() -> str | None:
    uid = os.geteuid()
    try:
        user = pwd.getpwuid(uid).pw_name
    except KeyError:
        return f"uid {uid} has no user name: the subordinate id ranges are looked up by it"
    for path in (Path("/etc/subuid"), Path("/etc/subgid")):
        if ranges(path, user, uid) < SUBORDINATE_IDS:
            return (
                f"{path} grants {user} fewer than {SUBORDINATE_IDS} ids: as root, give it "
                "a range no other user has (usermod --add-subuids FIRST-LAST "
                f"--add-subgids FIRST-LAST {user}), or run bash .ci/recipe-user as root"
            )
    probe = subprocess.run(
        [*ENTER, "cat", "/proc/self/uid_map"],
        capture_output=True,
        text=True,
        errors="replace",
        timeout=60,
        check=False,
    )
    mapped = [line.split() for line in probe.stdout.splitlines()]
    if probe.returncode != 0 or not any(row[:1] == ["1"] for row in mapped):
        last = (probe.stderr.strip().splitlines() or ["no output"])[-1]
        return f"no user namespace with subordinate ids for {user} ({' '.join(ENTER)}): {last}"
    return None
