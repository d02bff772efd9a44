"""The example settings file, written from the settings tree's own docstrings.

``config/releasebot.example.toml`` is exactly what ``render_example`` returns (a test says
so), printed by ``releasebot config example``. The ``Settings`` docstring heads the file;
each section's class docstring is the comment under its ``[table]``; each field's docstring
is the comment above its key, and the key's value is the field's default, written as the
file takes it (a duration in its ``*_seconds`` or ``*_days`` unit). So what a setting
means, its unit and why its default is what it is are written once, beside the field, and
the file cannot drift from the defaults the code uses.

Python keeps no docstring of a class attribute at run time (``__doc__`` of a dataclass is
even filled in with its signature), so they are read with ``ast`` from the module's source:
the string literal right under a field is its docstring, as Sphinx reads kopf's settings.
Deliberately not here: the rules and the loading (``config.rules``, ``config.load``).
"""

from __future__ import annotations

import ast
import inspect
import itertools
import math
import sys
from dataclasses import Field, fields
from datetime import timedelta
from typing import Any

from releasebot.config.rules import Seconds
from releasebot.config.sections import SECTIONS, Settings

HEADER = (
    "Written by `releasebot config example` from the docstrings in\n"
    "releasebot/config/sections.py: edit those, not this file."
)

_Trees = dict[str, ast.Module]
"""Each module's source, parsed once per rendering (``inspect.getsource`` of a class would
parse its whole module again for every class)."""

_SCOPES = (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)


def render_example() -> str:
    """The whole example file: the header, then every section of ``SECTIONS`` in order."""
    trees: _Trees = {}
    settings_doc = ast.get_docstring(_class_node(Settings, trees)) or ""
    parts = [_comment(f"{settings_doc}\n\n{HEADER}")]
    for name, section in SECTIONS.items():
        parts.append(_section(name, section, trees))
    return "\n\n".join(parts) + "\n"


def field_docstrings(cls: type[Any], trees: _Trees | None = None) -> dict[str, str]:
    """Each documented field of the dataclass ``cls`` by name: the string literal right under
    its declaration, cleaned as ``inspect.cleandoc`` cleans a docstring. A field without one
    is left out."""
    found: dict[str, str] = {}
    body = _class_node(cls, {} if trees is None else trees).body
    for declared, following in itertools.pairwise(body):
        if not (isinstance(declared, ast.AnnAssign) and isinstance(declared.target, ast.Name)):
            continue
        if (
            isinstance(following, ast.Expr)
            and isinstance(following.value, ast.Constant)
            and isinstance(following.value.value, str)
        ):
            found[declared.target.id] = inspect.cleandoc(following.value.value)
    return found


def _class_node(cls: type[Any], trees: _Trees) -> ast.ClassDef:
    """The ``class`` statement of ``cls``, found by its qualified name in its module."""
    if cls.__module__ not in trees:
        trees[cls.__module__] = ast.parse(inspect.getsource(sys.modules[cls.__module__]))
    scope: list[ast.stmt] = trees[cls.__module__].body
    node: ast.stmt | None = None
    for name in cls.__qualname__.split("."):
        if name == "<locals>":  # a class defined in a function
            continue
        node = next((n for n in scope if isinstance(n, _SCOPES) and n.name == name), None)
        if node is None:
            break
        scope = node.body
    if not isinstance(node, ast.ClassDef):
        raise TypeError(f"{cls.__qualname__}: no class statement in {cls.__module__}")
    return node


def _section(name: str, cls: type[Any], trees: _Trees) -> str:
    """``[name]`` and its docstring, then each key under its own, a blank line between."""
    blocks = [f"[{name}]"]
    if doc := ast.get_docstring(_class_node(cls, trees)):
        blocks[0] += "\n" + _comment(doc)
    docs = field_docstrings(cls, trees)
    for spec in fields(cls):
        line = f"{spec.metadata.get('key') or spec.name} = {_toml(_file_value(spec))}"
        blocks.append(f"{_comment(docs[spec.name])}\n{line}" if spec.name in docs else line)
    return "\n\n".join(blocks)


def _file_value(spec: Field[Any]) -> Any:
    """The field's default as the file writes it: a duration in its key's unit, the way
    ``config.load`` reads it back."""
    default = spec.default
    check = spec.metadata.get("check")
    if isinstance(check, Seconds) and isinstance(default, timedelta):
        return check.unit(default.total_seconds() / check.per_unit)
    return default


def _comment(text: str) -> str:
    """``text`` as TOML comment lines; ``code`` (reST) becomes `code` (Markdown)."""
    text = text.replace("``", "`")
    return "\n".join(f"# {line}".rstrip() for line in text.splitlines())


def _toml(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"no TOML for the default {value!r}")
        return repr(value)
    if isinstance(value, str):
        return _toml_string(value)
    if isinstance(value, tuple | list):
        return "[" + ", ".join(_toml(item) for item in value) + "]"
    raise TypeError(f"no TOML for the default {value!r}")


def _toml_string(value: str) -> str:
    """A TOML basic string: quotes and backslashes escaped, control characters as ``\\uXXXX``."""
    out = []
    for char in value:
        if char in '"\\':
            out.append("\\" + char)
        elif ord(char) < 0x20 or ord(char) == 0x7F:
            out.append(f"\\u{ord(char):04X}")
        else:
            out.append(char)
    return '"' + "".join(out) + '"'
