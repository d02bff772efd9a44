"""Kubernetes label selectors (``kubectl -l`` syntax), parsed once and matched in Python.

releasebot's fleet view lists the Nodes a configurable selector names (e.g.
``node-role.kubernetes.io/gpu``, ``pool in (a100,h100),!example.com/excluded``). The text
is parsed here when the settings load, so a typo is a ``ConfigError`` naming the key, not
a 400 from the API server at 3 a.m.; the Kubernetes adapter sends the requirements to the
API server, and the in-memory fleet source applies the very same ``matches``.

Deliberately not here: field selectors, and set-based ``Gt``/``Lt`` (node affinity only).
"""

from __future__ import annotations

import enum
import re
from collections.abc import Mapping
from dataclasses import dataclass

from releasebot.domain.shared.errors import ConfigError

# A label key: an optional DNS-subdomain prefix and a name of at most 63 characters.
_NAME = r"[A-Za-z0-9](?:[-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?"
_PREFIX = r"[a-z0-9](?:[-a-z0-9.]{0,251}[a-z0-9])?"
_KEY = rf"(?:{_PREFIX}/)?{_NAME}"
_VALUE = r"(?:[A-Za-z0-9](?:[-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?"
_REQUIREMENT = re.compile(
    rf"\s*(?:(?P<absent>!)\s*(?P<akey>{_KEY})"
    rf"|(?P<key>{_KEY})(?:\s*(?P<op>==|=|!=)\s*(?P<value>{_VALUE})"
    rf"|\s+(?P<setop>in|notin)\s*\(\s*(?P<values>{_VALUE}(?:\s*,\s*{_VALUE})*)\s*\))?)"
    r"\s*(?P<end>,|$)"
)
SELECTOR_MAX_CHARS = 1024


class Operator(enum.StrEnum):
    EQUALS = "="
    NOT_EQUALS = "!="
    IN = "in"
    NOT_IN = "notin"
    EXISTS = "exists"
    NOT_EXISTS = "!"


@dataclass(frozen=True)
class Requirement:
    """One comma-separated part of a selector."""

    key: str
    operator: Operator
    values: tuple[str, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        value = labels.get(self.key)
        if self.operator is Operator.EXISTS:
            return value is not None
        if self.operator is Operator.NOT_EXISTS:
            return value is None
        if self.operator in (Operator.EQUALS, Operator.IN):
            return value is not None and value in self.values
        # != and notin also select objects without the label, as the API server does.
        return value is None or value not in self.values


@dataclass(frozen=True)
class LabelSelector:
    """A parsed selector; the empty selector selects everything."""

    requirements: tuple[Requirement, ...] = ()
    text: str = ""

    @classmethod
    def parse(cls, text: str, *, key: str = "selector") -> LabelSelector:
        """Parse ``text``; ``ConfigError`` naming the settings ``key`` when it is invalid."""
        if len(text) > SELECTOR_MAX_CHARS:
            raise ConfigError(key, f"longer than {SELECTOR_MAX_CHARS} characters")
        requirements: list[Requirement] = []
        position = 0
        stripped = text.strip()
        while position < len(stripped):
            match = _REQUIREMENT.match(stripped, position)
            if match is None or match.end() == position:
                rest = stripped[position : position + 40]
                raise ConfigError(
                    key, f"not a label selector at {rest!r} (e.g. 'a=b,c in (d,e),!f')"
                )
            position = match.end()
            requirement = _requirement(match)
            if requirement.operator in (Operator.IN, Operator.NOT_IN) and "" in requirement.values:
                raise ConfigError(key, f"empty value in the set of {requirement.key!r}")
            if any(known.key == requirement.key for known in requirements):
                raise ConfigError(
                    key, f"label {requirement.key!r} appears twice (use 'in' or 'notin')"
                )
            requirements.append(requirement)
            if match["end"] == "," and position >= len(stripped):
                raise ConfigError(key, "a label selector may not end with ','")
        return cls(tuple(requirements), stripped)

    def matches(self, labels: Mapping[str, str]) -> bool:
        return all(requirement.matches(labels) for requirement in self.requirements)

    def __str__(self) -> str:
        return self.text


def _requirement(match: re.Match[str]) -> Requirement:
    if match["absent"]:
        return Requirement(match["akey"], Operator.NOT_EXISTS)
    key = match["key"]
    if match["op"] in ("=", "=="):
        return Requirement(key, Operator.EQUALS, (match["value"],))
    if match["op"] == "!=":
        return Requirement(key, Operator.NOT_EQUALS, (match["value"],))
    if match["setop"]:
        values = tuple(sorted({item.strip() for item in match["values"].split(",")}))
        operator = Operator.IN if match["setop"] == "in" else Operator.NOT_IN
        return Requirement(key, operator, values)
    return Requirement(key, Operator.EXISTS)
