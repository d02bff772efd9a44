"""How the CLI shows things: aligned tables, the targets' and the coverage's JSON.

Pure output over what the services returned; every command prints through these, so a
column or a field is written in one place. Deliberately not here: deciding anything.

Each output is built in memory and written with one ``write``: ``json.dump`` to a stream
writes token by token (about 76 writes per target: 760,000 for ``plan --format json`` at
10,000 targets), and with ``PYTHONUNBUFFERED`` set, as the image sets it, each of those is
a system call. A line on stderr is one ``write`` of the whole line, so lines from two
writers never interleave mid-line.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping, Sequence
from datetime import datetime
from json.encoder import encode_basestring_ascii
from typing import TYPE_CHECKING, Any, TextIO

if TYPE_CHECKING:
    from releasebot.domain.fleet.coverage import Coverage
    from releasebot.domain.fleet.proof import ProofRecord
    from releasebot.domain.targets.models import TargetRecord


def write_json(value: object, out: TextIO) -> None:
    """``value`` as indented JSON and a newline, in one write (the bytes ``json.dump(value,
    out, indent=2)`` and a newline would write, without its token-by-token writes)."""
    text = _flat_rows_json(value) if type(value) is list else None
    out.write((json.dumps(value, indent=2) if text is None else text) + "\n")


def _flat_rows_json(rows: list[Any]) -> str | None:
    """``json.dumps(rows, indent=2)`` for a list of flat objects (every value a string, an
    integer, ``None`` or a list of strings), as the targets' JSON is; ``None`` for anything
    else, which ``json.dumps`` writes.

    With ``indent``, Python 3.11's ``json`` encodes in Python, call by call (about 0.2 s of
    CPU for ``plan --format json`` at 10,000 targets); here each string goes through the
    same C escaper ``json.dumps`` uses (``ensure_ascii``), and the layout, which is fixed
    at this shape, is joined around it.
    """
    encode = encode_basestring_ascii
    parts = []
    for row in rows:
        if type(row) is not dict:
            return None
        fields = []
        for key, value in row.items():
            if type(key) is not str:
                return None
            kind = type(value)
            if kind is str:
                text = encode(value)
            elif value is None:
                text = "null"
            elif kind is int:  # not bool: ``type`` is exact
                text = int.__repr__(value)
            elif kind is list and all(type(item) is str for item in value):
                text = (
                    "[\n      " + ",\n      ".join(map(encode, value)) + "\n    ]"
                    if value
                    else "[]"
                )
            else:
                return None
            fields.append(f"    {encode(key)}: {text}")
        parts.append("  {\n" + ",\n".join(fields) + "\n  }" if fields else "  {}")
    return "[\n" + ",\n".join(parts) + "\n]" if parts else "[]"


def print_targets(targets: Sequence[TargetRecord], fmt: str, out: TextIO) -> None:
    if fmt == "json":
        from releasebot.wiring import utc_now

        now = utc_now()
        write_json([target_json(target, now) for target in targets], out)
        return
    if not targets:
        out.write("no targets\n")
        return
    header = (
        "TAG",
        "DRIVER",
        "FLATCAR",
        "CHANNEL",
        "KERNEL",
        "ARCHES",
        "REASON",
        "STATE",
        "DIGEST",
    )
    rows = [header] + [
        (
            r.tag,
            r.target.driver_version.text,
            r.target.flatcar_version.text,
            r.target.flatcar_channel,
            r.target.kernel,
            ",".join(r.target.arches),
            r.target.reason_text or "by hand",
            r.state.value,
            short_digest(r.digest),
        )
        for r in targets
    ]
    write_table(rows, out)


def short_digest(digest: str | None) -> str:
    return "" if digest is None else digest[: len("sha256:") + 12]


def target_json(record: TargetRecord, now: datetime) -> dict[str, Any]:
    from releasebot.domain.targets.lifecycle import next_step
    from releasebot.domain.targets.models import ordered_reasons

    target = record.target
    return {
        "tag": target.tag,
        "driver_version": target.driver_version.text,
        "driver_branch": target.driver_branch,
        "flatcar_version": target.flatcar_version.text,
        "flatcar_channel": target.flatcar_channel,
        "kernel": target.kernel,
        "kernel_release": target.kernel_release,
        "arches": [arch.value for arch in target.arches],
        "reasons": ordered_reasons(target.reasons),
        "state": record.state.value,
        "next": next_step(record, now).value,
        "digest": record.digest,
        "attempts": record.attempts,
        "last_error": record.last_error,
        "first_planned_at": record.first_planned_at.isoformat(),
        "proven_at": None if record.proven_at is None else record.proven_at.isoformat(),
        "proven_node": record.proven_node,
    }


def print_coverage(
    coverage: Coverage,
    fmt: str,
    out: TextIO,
    proofs: Mapping[str, ProofRecord] | None = None,
) -> None:
    """A coverage as a table (one line per GPU node, then the ignored ones) or JSON; with
    ``proofs``, each node's after-reboot proof too."""
    from releasebot.domain.fleet.coverage import coverage_json

    proofs = proofs or {}
    if fmt == "json":
        shown = coverage_json(coverage)
        for node in shown["nodes"]:  # type: ignore[attr-defined]
            record = proofs.get(node["name"])
            node["proof"] = None if record is None else _proof_json(record)
        write_json(shown, out)
        return
    if not coverage.nodes and not coverage.ignored:
        out.write("no GPU nodes\n")
        return
    header = (
        "NODE",
        "ARCH",
        "FLATCAR",
        "VERDICT",
        "IMAGE",
        "PENDING",
        "PENDING VERDICT",
        "PENDING IMAGE",
        "NOTE",
    )
    rows = [header] + [
        (
            node.name,
            node.arch.value,
            node.version.text,
            node.verdict.value,
            node.reference or "-",
            "-" if node.pending_version is None else node.pending_version.text,
            "-" if node.pending_verdict is None else node.pending_verdict.value,
            node.pending_reference or "-",
            _note(node.before_reboot, node.note, proofs.get(node.name)),
        )
        for node in coverage.nodes
    ]
    text = format_table(rows) if coverage.nodes else ""
    text += "".join(f"ignored GPU node {node.name}: {node.reason}\n" for node in coverage.ignored)
    out.write(text)


def _note(before_reboot: bool, note: str | None, proof: ProofRecord | None = None) -> str:
    parts = (["FLUO waits to reboot it"] if before_reboot else []) + ([note] if note else [])
    if proof is not None and proof.state != "armed":
        parts.append(f"proof {proof.state.value}" + (f": {proof.reason}" if proof.reason else ""))
    return "; ".join(parts)


def _proof_json(record: ProofRecord) -> dict[str, Any]:
    def at(moment: datetime | None) -> str | None:
        return None if moment is None else moment.isoformat()

    return {
        "state": record.state.value,
        "image": record.tag,
        "flatcar_version": None if record.version is None else record.version.text,
        "reason": record.reason,
        "gpus_before": record.gpus_before,
        "started_at": at(record.started_at),
        "healthy_since": at(record.healthy_since),
        "pod": record.pod,
        "log_tail": record.log_tail,
    }


def write_table(rows: Sequence[Sequence[str]], out: TextIO) -> None:
    """``format_table(rows)``, in one write."""
    out.write(format_table(rows))


def format_table(rows: Sequence[Sequence[str]]) -> str:
    """Columns padded to their widest cell, two spaces apart, no trailing blanks; a newline
    after each row."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = []
    for row in rows:
        cells = (cell.ljust(width) for cell, width in zip(row, widths, strict=True))
        lines.append("  ".join(cells).rstrip() + "\n")
    return "".join(lines)


def write_line(line: str, out: TextIO) -> None:
    """``line`` and its newline in one write (``print`` writes them apart)."""
    out.write(line + "\n")


def error(message: str) -> None:
    """One ``releasebot: ...`` line on stderr, any credential-shaped text in it masked."""
    from releasebot.logs import RedactSecrets

    write_line(f"releasebot: {RedactSecrets().redact(message)}", sys.stderr)
