"""What the hostile-input tests of the CLI and the database share: the corpus, a settings
file against the test doubles, the CLI as a REAL subprocess, and the checks every case
makes (no traceback on stdout or stderr, the exit code, one line naming the problem and
what to do, the stored rows unchanged).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy import text

from releasebot.store.engine import make_engine
from releasebot.store.tables import metadata

REPO = Path(__file__).resolve().parents[2]
CORPUS = REPO / "tests" / "data" / "hostile"
CONTEXT = "git://git.example.test/gpu/recipes.git#refs/heads/main#" + "0123456789" * 4
TRACEBACK_MARKS = ("Traceback (most recent call last)", 'File "/', "  File ")


def cases(surface: str) -> list[Path]:
    """Every case file of ``surface`` (``tests/data/hostile/<surface>/*.json``), sorted."""
    found = sorted((CORPUS / surface).glob("*.json"))
    assert found, f"no cases in {CORPUS / surface}"
    return found


def load_case(path: Path) -> dict[str, Any]:
    case: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    assert case.get("description"), f"{path.name}: every case says what it is"
    return case


def write_settings(
    path: Path,
    *,
    database_url: str,
    flatcar_url: str,
    nvidia_url: str,
    repository: str,
    kubeconfig: Path | None = None,
    namespace: str = "builds",
    extra: str = "",
) -> Path:
    kube = f'[kubernetes]\nnamespace = "{namespace}"\n'
    if kubeconfig is not None:
        kube += f'kubeconfig = "{kubeconfig}"\n'
    path.write_text(
        f"""
[database]
url = "{database_url}"
[flatcar]
feed_url = "{flatcar_url}"
channels = ["stable"]
keep = 2
[nvidia]
feed_url = "{nvidia_url}"
branches = ["580"]
[registry]
repository = "{repository}"
insecure = true
retries = 0
{kube}
[kaniko]
context = "{CONTEXT}"
[recipe]
check_inputs = false
bases = false
{extra}
""",
        encoding="utf-8",
    )
    return path


@dataclass(frozen=True)
class Outcome:
    code: int
    stdout: str
    stderr: str

    def describe(self) -> str:
        return f"exit {self.code}\n--- stdout\n{self.stdout}\n--- stderr\n{self.stderr}"


def run_cli(
    args: Sequence[str], *, env: Mapping[str, str] | None = None, timeout: float = 120
) -> Outcome:
    """``python -m releasebot ARGS`` as a real process, with no developer ``RELEASEBOT_*``."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith("RELEASEBOT_")}
    clean.update(env or {})
    done = subprocess.run(
        [sys.executable, "-m", "releasebot", *args],
        cwd=REPO,
        env=clean,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        timeout=timeout,
        check=False,
    )
    return Outcome(
        done.returncode,
        done.stdout.decode("utf-8", errors="replace"),
        done.stderr.decode("utf-8", errors="replace"),
    )


def assert_no_traceback(*texts: str) -> None:
    for shown in texts:
        for mark in TRACEBACK_MARKS:
            assert mark not in shown, f"a traceback was shown:\n{shown}"


def assert_one_line_says(stderr: str, phrases: Sequence[str], context: str = "") -> str:
    """The one stderr line holding every phrase (the problem and what to do); returns it."""
    lines = [line for line in stderr.splitlines() if all(p in line for p in phrases)]
    assert len(lines) == 1, f"expected one line saying {list(phrases)}:\n{context or stderr}"
    return lines[0]


def snapshot(url: str, tables: Sequence[str] | None = None) -> dict[str, list[str]]:
    """Every row of every releasebot table (or of ``tables``) that exists, as text, sorted:
    what "the stored state unchanged" compares. Read as raw text, so that a value releasebot
    cannot read is compared too."""
    engine = make_engine(url)
    try:
        with engine.connect() as conn:
            present = set(conn.dialect.get_table_names(conn))
            names = [n for n in (tables or [*metadata.tables, "alembic_version"]) if n in present]
            found: dict[str, list[str]] = {}
            for name in names:
                rows = conn.execute(text(f'SELECT * FROM "{name}"')).all()
                found[name] = sorted(repr(tuple(row)) for row in rows)
            return found
    finally:
        engine.dispose()


def execute(url: str, statements: Sequence[str]) -> None:
    """Run ``statements`` against the database at ``url`` in one transaction."""
    engine = make_engine(url)
    try:
        with engine.begin() as conn:
            for statement in statements:
                conn.execute(text(statement))
    finally:
        engine.dispose()
