"""releasebot keeps NVIDIA driver images ready for every Flatcar version a GPU fleet runs.

The package is layered (checked by import-linter, see ``pyproject.toml``)::

    cli -> wiring -> service -> adapters (sources, store) -> domain

Nothing connects, reads configuration or starts threads at import time.
"""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("releasebot")
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0.0.0+unknown"
