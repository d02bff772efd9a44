"""Skipping a test for a missing command-line tool, except in CI, where it is an error.

``.ci/run`` installs every tool the suite uses; a green CI must never mean "skipped".
"""

from __future__ import annotations

import os
from typing import NoReturn

import pytest


def missing_tool(message: str) -> NoReturn:
    if os.environ.get("CI"):
        pytest.fail(f"{message}; CI is set, so this is an error, not a skip")
    pytest.skip(message)
