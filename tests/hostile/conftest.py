"""The hostile-input corpus: loading its cases and the checks every case makes.

A case is one JSON file under ``tests/data/hostile/<surface>/`` (the format of each surface
is in ``tests/data/hostile/README.md``). Bodies too big or too odd to write as JSON text are
built from a small spec (``body_of``). Every replay checks the same things: no traceback
anywhere, nothing that moves a terminal, the problem said on one line.
"""

from __future__ import annotations

import base64
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

CORPUS = Path(__file__).resolve().parents[1] / "data" / "hostile"
TERMINAL_MOVERS = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


@dataclass(frozen=True)
class Case:
    name: str
    data: dict[str, Any]

    def __getitem__(self, key: str) -> Any:
        return self.data[key]

    def get(self, key: str, default: Any = None) -> Any:
        return self.data.get(key, default)


def cases(surface: str) -> list[Any]:
    """The cases of ``surface`` as ``pytest.param``s named by their file."""
    found = sorted((CORPUS / surface).glob("*.json"))
    assert found, f"no cases in {CORPUS / surface}"
    return [
        pytest.param(Case(path.stem, json.loads(path.read_text(encoding="utf-8"))), id=path.stem)
        for path in found
    ]


def body_of(spec: Any) -> bytes:
    """A body from its spec: a string (UTF-8), ``{"base64": ...}``, ``{"json": value}``,
    or ``{"parts": [spec, ...]}`` where a part may be ``{"repeat": text, "times": n}``."""
    if isinstance(spec, str):
        return spec.encode("utf-8")
    if "base64" in spec:
        return base64.b64decode(spec["base64"])
    if "json" in spec:
        return json.dumps(spec["json"]).encode()
    if "repeat" in spec:
        return body_of(spec["repeat"]) * int(spec["times"])
    return b"".join(body_of(part) for part in spec["parts"])


def assert_no_traceback(*texts: str) -> None:
    for text in texts:
        assert "Traceback" not in text, text[-2000:]
        assert 'File "' not in text, text[-2000:]


def assert_clean_line(text: str, pattern: str | None = None) -> None:
    """``text`` is one line, shows nothing that moves a terminal, and matches ``pattern``."""
    assert "\n" not in text.strip(), text
    assert not TERMINAL_MOVERS.search(text), ascii(text)
    if pattern is not None:
        assert re.search(pattern, text), f"{pattern!r} not in {text!r}"


def assert_absent(text: str, *secrets: str | None) -> None:
    """None of ``secrets`` (what a refused host or a hostile body said) appears in ``text``."""
    for secret in secrets:
        if secret:
            assert secret not in text, f"{secret!r} quoted in {text!r}"
