"""``LabelSelector``: the fleet's node selector, parsed once and matched like the API server.

Equality- and set-based requirements, existence, negation, and that a malformed selector
is a ``ConfigError`` naming the settings key rather than a 400 from the API server later.
The same selector is sent to the fake API server in the fleet source contract suite.
"""

from __future__ import annotations

import pytest

from releasebot.domain.fleet.selectors import LabelSelector, Operator, Requirement
from releasebot.domain.shared.errors import ConfigError

GPU = {"nvidia.com/gpu.present": "true", "pool": "a100", "kubernetes.io/arch": "amd64"}
CPU = {"pool": "general", "node-role.kubernetes.io/control-plane": ""}


@pytest.mark.parametrize(
    ("text", "gpu", "cpu"),
    [
        ("", True, True),
        ("nvidia.com/gpu.present=true", True, False),
        ("nvidia.com/gpu.present==true", True, False),
        ("nvidia.com/gpu.present!=true", False, True),
        ("pool in (a100, h100)", True, False),
        ("pool notin (a100)", False, True),
        ("missing notin (x)", True, True),
        ("node-role.kubernetes.io/control-plane", False, True),
        ("!node-role.kubernetes.io/control-plane", True, False),
        ("pool,kubernetes.io/arch=amd64", True, False),
        ("  pool = a100 ,  ! node-role.kubernetes.io/control-plane ", True, False),
    ],
)
def test_matching(text: str, gpu: bool, cpu: bool) -> None:
    selector = LabelSelector.parse(text)
    assert (selector.matches(GPU), selector.matches(CPU)) == (gpu, cpu)


def test_requirements_are_kept_for_the_api_server() -> None:
    selector = LabelSelector.parse("a=b,c in (e, d),!f,g")
    assert selector.requirements == (
        Requirement("a", Operator.EQUALS, ("b",)),
        Requirement("c", Operator.IN, ("d", "e")),
        Requirement("f", Operator.NOT_EXISTS),
        Requirement("g", Operator.EXISTS),
    )
    assert str(selector) == "a=b,c in (e, d),!f,g"


@pytest.mark.parametrize(
    "text",
    [
        "a=b,",
        "=b",
        "a in ()",
        "a in (b,)",
        "a b",
        'a="b"',
        "a=b c",
        "-a=b",
        "a/=b",
        "a!=b,a!=c",
        "x" * 1025,
    ],
)
def test_malformed_selectors_are_config_errors(text: str) -> None:
    with pytest.raises(ConfigError, match=r"^config: fleet\.node_selector: "):
        LabelSelector.parse(text, key="fleet.node_selector")
