"""What every local test server shares: ``with Server() as server`` starts and stops it."""

from __future__ import annotations

from types import TracebackType
from typing import Self


class Started:
    """A ``start()``/``stop()`` pair used as a context manager; ``start`` returns self."""

    def start(self) -> Self:
        raise NotImplementedError

    def stop(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
