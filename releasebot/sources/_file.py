"""Read a ``file://`` feed: only a regular file, and never more than the size limit.

Split out of ``sources/fetch.py`` (air-gapped users mirror feeds to disk). The reading
itself is ``edge.parse.read_regular_file``, the one bounded reader of every file releasebot
is pointed at; this module only words its refusals for a feed and classifies them:
temporary (an I/O error: try again next cycle) or permanent (the URL names no feed file).
Deliberately not here: URL handling, hashing and the HTML check (the fetcher).
"""

from __future__ import annotations

import errno
from pathlib import Path

from releasebot.domain.shared.errors import FeedFormatError, FeedRejectedError, FeedUnavailableError
from releasebot.edge.parse import FileRefusedError, ValueRefusedError
from releasebot.edge.parse import read_regular_file as read_bounded

_PERMANENT_ERRNOS = frozenset(
    {errno.EACCES, errno.EPERM, errno.EISDIR, errno.ENOTDIR, errno.ENAMETOOLONG, errno.ELOOP,
     errno.ENXIO}
)  # fmt: skip


def read_regular_file(feed: str, path: Path, shown: str, max_bytes: int) -> bytes:
    """The bytes of the regular file at ``path``, at most ``max_bytes``; ``shown`` is the
    path as error messages print it (one printable line).

    Anything else is refused before it is read: a device (``/dev/zero`` reports size 0 and
    never ends), a FIFO (blocks until a writer comes), a directory or a socket.
    """
    try:
        return read_bounded(path, max_bytes)
    except FileRefusedError as exc:
        if exc.problem == "missing":
            raise FeedRejectedError(feed, f"file not found: {shown}") from None
        if exc.problem == "not-regular":
            raise FeedRejectedError(
                feed,
                f"{shown} is not a regular file ({exc.kind}): a file URL must name a feed file",
            ) from None
        if exc.problem == "too-large":
            raise FeedFormatError(feed, f"{shown} is over {max_bytes} bytes") from None
        error = FeedRejectedError if exc.errno in _PERMANENT_ERRNOS else FeedUnavailableError
        reason = str(exc).rpartition(": ")[2]
        raise error(feed, f"cannot read {shown}: {reason}") from None
    except ValueRefusedError as exc:  # a NUL byte (%00) or an overlong path
        raise FeedRejectedError(feed, f"invalid file path {shown}: {exc}") from None
