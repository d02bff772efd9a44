"""Read a ``file://`` feed: only a regular file, and never more than the size limit.

Split out of ``sources/fetch.py`` (air-gapped users mirror feeds to disk). Deliberately not
here: URL handling, hashing and the HTML check (the fetcher).
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

from releasebot.domain.errors import FeedFormatError, FeedRejectedError, FeedUnavailableError

_PERMANENT_ERRNOS = frozenset({errno.ENAMETOOLONG, errno.ELOOP, errno.ENXIO})


def read_regular_file(feed: str, path: Path, shown: str, max_bytes: int) -> bytes:
    """The bytes of the regular file at ``path``, at most ``max_bytes``; ``shown`` is the
    path as error messages print it (one printable line).

    Anything else is refused before it is read: a device (``/dev/zero`` reports size 0 and
    never ends), a FIFO (blocks until a writer comes), a directory or a socket.
    """
    try:
        _require_regular(feed, shown, os.stat(path).st_mode)
        # O_NONBLOCK: should the path have become a FIFO since the stat, opening it must not
        # wait for a writer (fstat then refuses it). It changes nothing for a regular file.
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        with open(fd, "rb") as file:
            info = os.fstat(file.fileno())
            _require_regular(feed, shown, info.st_mode)
            if info.st_size > max_bytes:
                raise FeedFormatError(feed, f"{shown} is over {max_bytes} bytes")
            # st_size can be wrong (files in /proc say 0) or grow meanwhile: read one byte
            # more than allowed, and refuse the file if it came.
            body = file.read(max_bytes + 1)
    except ValueError as exc:  # a NUL byte (%00) in the path
        raise FeedRejectedError(feed, f"invalid file path {shown}: {exc}") from exc
    except FileNotFoundError as exc:
        raise FeedRejectedError(feed, f"file not found: {shown}") from exc
    except (PermissionError, IsADirectoryError, NotADirectoryError) as exc:
        raise FeedRejectedError(feed, f"cannot read {shown}: {exc.strerror}") from exc
    except OSError as exc:
        error = FeedRejectedError if exc.errno in _PERMANENT_ERRNOS else FeedUnavailableError
        raise error(
            feed, f"cannot read {shown}: {exc.strerror or 'error ' + str(exc.errno)}"
        ) from exc
    if len(body) > max_bytes:
        raise FeedFormatError(feed, f"{shown} is over {max_bytes} bytes")
    return body


_FILE_KINDS = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISSOCK, "a socket"),
)


def _require_regular(feed: str, shown: str, mode: int) -> None:
    if stat.S_ISREG(mode):
        return
    kind = next((name for test, name in _FILE_KINDS if test(mode)), "not a file")
    raise FeedRejectedError(
        feed, f"{shown} is not a regular file ({kind}): a file URL must name a feed file"
    )
