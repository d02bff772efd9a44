"""What every part of the recipe suite shares: the cache folder, timings, commands, and the
rule for inputs that cannot be had.

The suite downloads Debian packages and builds stand-ins from them; both are cached in a
folder OUTSIDE the checkout (``$RECIPE_STANDIN_CACHE``, else
``~/.cache/releasebot-recipe``), keyed by the package versions, so a second run only
rebuilds the image. The variable's name lies outside the ``RELEASEBOT_`` prefix on purpose:
the suite-wide autouse fixture clears those.

Deliberately not here: what the stand-ins are (``standins.py``) or how they are fetched
(``debian.py``).
"""

from __future__ import annotations

import hashlib
import os
import shlex
import subprocess
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
RECIPE = REPO / "releasebot" / "recipe"
VENDOR = Path(os.environ.get("SHARED_VENDOR", REPO.parent / "shared" / "vendor"))
CACHE = Path(
    os.environ.get("RECIPE_STANDIN_CACHE", Path.home() / ".cache" / "releasebot-recipe")
).resolve()
"""Read at import, before any fixture clears the environment."""


class UnavailableError(Exception):
    """An input of the suite cannot be had here (archive unreachable, tool missing)."""


def unavailable(message: str) -> None:
    """One line: a failure in CI (``CI`` set), a skip with that reason elsewhere."""
    if os.environ.get("CI"):
        pytest.fail(f"{message} (CI is set: this is an error, not a skip)", pytrace=False)
    pytest.skip(message)


@dataclass
class Timings:
    """How long each part took; printed at the end of the run."""

    parts: list[tuple[str, float, str]] = field(default_factory=list)

    @contextmanager
    def part(self, name: str, note: str = "") -> Iterator[list[str]]:
        """Time the block; it may append a note (``cached``...) to the yielded list."""
        notes = [note] if note else []
        started = time.monotonic()
        try:
            yield notes
        finally:
            self.parts.append((name, time.monotonic() - started, ", ".join(notes)))

    def lines(self) -> list[str]:
        total = sum(seconds for _, seconds, _ in self.parts)
        rows = [
            f"  {name:<44} {seconds:8.1f} s  {note}".rstrip() for name, seconds, note in self.parts
        ]
        return [*rows, f"  {'total of the parts':<44} {total:8.1f} s"]


TIMINGS = Timings()


def run(
    command: Sequence[str | Path],
    *,
    log: Path | None = None,
    timeout: float = 1800,
    env: dict[str, str] | None = None,
    cwd: Path | None = None,
    what: str = "",
) -> subprocess.CompletedProcess[str]:
    """Run a command; on failure raise with the tail of its output (and keep a log)."""
    words = [str(word) for word in command]
    result = subprocess.run(
        words,
        capture_output=True,
        text=True,
        errors="replace",
        timeout=timeout,
        check=False,
        env=env,
        cwd=cwd,
    )
    if log is not None:
        log.parent.mkdir(parents=True, exist_ok=True)
        log.write_text(f"$ {shlex.join(words)}\n{result.stdout}\n{result.stderr}")
    if result.returncode != 0:
        tail = (result.stdout + result.stderr).strip().splitlines()[-40:]
        raise AssertionError(
            f"{what or words[0]} exited {result.returncode}"
            + (f" (log: {log})" if log else "")
            + "\n"
            + "\n".join(tail)
        )
    return result


def digest(*parts: str | bytes | Path) -> str:
    """A short key over strings, bytes and files' contents."""
    hasher = hashlib.sha256()
    for part in parts:
        if isinstance(part, Path):
            hasher.update(part.read_bytes())
        elif isinstance(part, str):
            hasher.update(part.encode())
        else:
            hasher.update(part)
        hasher.update(b"\0")
    return hasher.hexdigest()[:16]
