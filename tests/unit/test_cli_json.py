"""The CLI's JSON writer: the bytes ``json.dump(value, out, indent=2)`` writes, always.

``write_json`` lays out lists of flat objects (the targets' JSON) itself, escaping each
string with ``json``'s own escaper; anything of another shape is ``json.dumps``'s. Each
case here is compared with ``json.dumps(value, indent=2)``: strings that need escaping
(quotes, backslashes, control characters, non-ASCII, a lone surrogate), empty lists and
objects, and the shapes that must fall back (a bool, a float, a nested object, a string
subclass, a key that is not a string).
"""

from __future__ import annotations

import enum
import io
import json

import pytest

from releasebot.cli.tables import _flat_rows_json, write_json


class Word(enum.StrEnum):
    A = "a"


HOSTILE = ['quote " and \\ backslash', "tab\tnew\nline\x00\x1f\x7f", "é 漢 \U0001f600", "\ud800"]
FLAT = [
    [],
    [{}],
    [{"tag": "580.1.01-flatcar1.2.3", "n": 0, "none": None, "arches": [], "big": 2**70}],
    [{"tag": text, "list": [text, ""], "neg": -3} for text in HOSTILE],
    [{text: text} for text in HOSTILE],
    [{"a": ["x"]}, {}, {"b": "y"}],
]
OTHER = [
    [{"flag": True}],
    [{"ratio": 1.5}],
    [{"nested": {"a": 1}}],
    [{"list": [1, 2]}],
    [{"word": Word.A}],
    [{1: "key"}],
    [["not", "an", "object"]],
    ["text"],
    {"top": "object"},
]


@pytest.mark.parametrize("value", FLAT)
def test_flat_rows_are_laid_out_as_json_dumps_does(value: list[object]) -> None:
    assert _flat_rows_json(value) == json.dumps(value, indent=2)


@pytest.mark.parametrize("value", OTHER)
def test_other_shapes_are_left_to_json_dumps(value: object) -> None:
    if isinstance(value, list):
        assert _flat_rows_json(value) is None
    out = io.StringIO()
    write_json(value, out)
    assert out.getvalue() == json.dumps(value, indent=2) + "\n"


@pytest.mark.parametrize("value", FLAT)
def test_write_json_writes_the_same_bytes(value: list[object]) -> None:
    out = io.StringIO()
    write_json(value, out)
    assert out.getvalue() == json.dumps(value, indent=2) + "\n"
