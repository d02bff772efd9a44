"""Benchmark: what masking credentials (``edge.redact``) costs a log line, and that hostile
text costs time linear in its length.

Every log record of ``releasebot run`` (message, string extras, traceback), every CLI error
line, the ``/readyz`` body and every Slack message go through it, by form and by the
configured secrets' values (five here, as a fully configured install has). Prints the
microseconds per line for an ordinary line, a line with credentials, a 4 KiB traceback,
and for hostile inputs of growing size (a run of "tokentoken...", "password=" repeated,
unterminated quotes, URL-looking runs): the time per KiB must stay flat as the size grows
(the run fails if the largest costs over 20 times the smallest per KiB, which would mean
quadratic matching).

    uv run python benchmarks/bench_redact.py [--short]
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from releasebot.edge.redact import Redactor  # noqa: E402

SECRETS = ["xoxb-1-2-abcdefghijkl", "registry-pass-1", "db-pass-2", "signing-pass-3", "sig-4444"]
ORDINARY = "cycle completed duration=1.234 decisions=3 errors=0 feed flatcar/stable: unchanged"
CREDENTIALS = (
    "state store: cannot reach the database postgresql+psycopg://rb:db-pass-2@db:5432/rb"
    "?sslpassword=xyz&sslmode=require: connection refused; Authorization: Bearer abcdefgh"
)
TRACEBACK = "\n".join(
    f'  File "/app/releasebot/module{n}.py", line {n}, in function_{n}\n    call(arg={n})'
    for n in range(60)
)
HOSTILE: dict[str, Callable[[int], str]] = {
    "tokentoken...": lambda n: ("token" * (n // 5 + 1))[:n],
    "password= repeated": lambda n: ("password=" * (n // 9 + 1))[:n],
    "unterminated quotes": lambda n: ("password='" + "a" * 50) * (n // 60 + 1),
    "scheme-like run": lambda n: ("a" * n) + "://",
    "userinfo-like": lambda n: ("a://b:" * (n // 6 + 1))[:n],
}


def per_call(func: Callable[[], object], seconds: float) -> float:
    """Seconds per call of ``func``, over at least ``seconds`` of calls."""
    calls, started = 0, time.perf_counter()
    while True:
        func()
        calls += 1
        elapsed = time.perf_counter() - started
        if elapsed >= seconds:
            return elapsed / calls


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--short", action="store_true", help="a quick run (CI)")
    args = parser.parse_args()
    budget = 0.05 if args.short else 0.5
    redact = Redactor(SECRETS)
    for name, line in (
        ("ordinary", ORDINARY),
        ("credentials", CREDENTIALS),
        ("traceback", TRACEBACK),
    ):
        micros = per_call(lambda line=line: redact(line), budget) * 1e6
        print(f"{name:>20}: {micros:9.1f} µs per line ({len(line)} chars)")
    sizes = (16_384, 262_144) if args.short else (16_384, 262_144, 1_048_576)
    worst = 0.0
    for name, make in HOSTILE.items():
        costs = []
        for size in sizes:
            text = make(size)
            seconds = per_call(lambda text=text: redact(text), budget)
            costs.append(seconds / (len(text) / 1024))
        ratio = costs[-1] / costs[0]
        worst = max(worst, ratio)
        shown = ", ".join(f"{c * 1e6:.1f}" for c in costs)
        print(f"{name:>20}: µs per KiB at {', '.join(str(s // 1024) for s in sizes)} KiB: {shown}")
    print(f"largest/smallest cost per KiB, worst pattern: {worst:.2f}")
    if worst > 20:
        print("FAIL: masking is not linear in the text's length")
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
