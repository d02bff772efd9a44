"""The ``releasebot`` command line: ``main`` (``cli/main.py``) parses and dispatches; the
fleet's commands (``fleet``, ``operator-values``) and the coverage table are in
``cli/fleet.py``. Thin on purpose: the wiring builds everything, the services decide."""

from releasebot.cli.main import main

__all__ = ["main"]
