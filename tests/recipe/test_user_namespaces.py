"""The suite's unprivileged root: subordinate id ranges read right, and the namespace the
built image is entered with maps them as rootless buildah does (0 is the user, 1... the
first subordinate ids), so the image's files keep their owners inside."""

from __future__ import annotations

import os
import pwd
import subprocess
from pathlib import Path

from tests.recipe.user_namespaces import ENTER, ranges


def test_ranges_count_the_users_lines_by_name_or_number(tmp_path: Path) -> None:
    listing = tmp_path / "subuid"
    listing.write_text(
        "releasebot-ci:100000:65536\n"
        "other:165536:65536\n"
        "999:231072:1000\n"
        "releasebot-ci:300000\n"  # malformed: no count
        "releasebot-ci:400000:many\n"  # malformed: not a number
        "releasebot-ci-2:500000:65536\n"
    )
    assert ranges(listing, "releasebot-ci", 999) == 66536
    assert ranges(listing, "other", 1000) == 65536
    assert ranges(listing, "nobody", 65534) == 0
    assert ranges(tmp_path / "missing", "releasebot-ci", 999) == 0


def first_subordinate(path: Path, user: str, uid: int) -> int:
    for line in path.read_text().splitlines():
        fields = line.split(":")
        if len(fields) == 3 and fields[0] in (user, str(uid)):
            return int(fields[1])
    raise AssertionError(f"{path} has no range for {user}")


def test_the_namespace_maps_root_to_the_user_and_ids_to_its_range(
    recipe_host: None, tmp_path: Path
) -> None:
    uid = os.geteuid()
    user = pwd.getpwuid(uid).pw_name
    made = tmp_path / "owned"
    inside = subprocess.run(
        [*ENTER, "sh", "-c", f"id -u; touch {made}.root; touch {made}; chown 1:1 {made}"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert inside.stdout.split() == ["0"]
    assert Path(f"{made}.root").stat().st_uid == uid
    assert made.stat().st_uid == first_subordinate(Path("/etc/subuid"), user, uid)
    assert made.stat().st_gid == first_subordinate(Path("/etc/subgid"), user, uid)
