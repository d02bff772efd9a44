"""One way to parse each kind of value that comes from outside: ASCII only, with limits.

``str.isdigit`` accepts ``²`` and Arabic-Indic digits, ``int`` accepts those, ``" 12 "`` and
``"1_000"``, and ``urlsplit(...).port`` raises for an IPv6 address it half-understands: each,
used on a header, a setting or a file, is a crash or a surprise waiting for the input that
triggers it. Every number, listen address, URL, path and secret file releasebot reads
from outside goes through the one function here for its kind, which either returns the
value or raises ``ValueRefusedError`` with one line saying what is wrong (never echoing a
secret); the caller names the setting or header and what to do.

Deliberately not here: what a value means (the settings' rules, the adapters), and
``Retry-After`` (``edge.retry.parse_retry_after``, which uses ``parse_decimal``).
"""

from __future__ import annotations

import errno
import ipaddress
import os
import re
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from urllib.parse import SplitResult, urlsplit

__all__ = [
    "MAX_DIGITS",
    "FileRefusedError",
    "ValueRefusedError",
    "check_path",
    "check_regular_file",
    "is_ascii_digits",
    "parse_content_length",
    "parse_decimal",
    "parse_host_name",
    "parse_int",
    "parse_listen_address",
    "parse_url",
    "read_regular_file",
    "read_secret_file",
]

MAX_DIGITS = 18
"""The longest decimal read: every count, size and port fits in 18 digits (below 2**63)."""
MAX_PATH_CHARS = 4096
"""The longest path accepted (Linux's PATH_MAX)."""
MAX_SECRET_BYTES = 64 * 1024
"""A token or password file is a line; 64 KiB is generous and bounds a wrong path."""
_DIGITS = frozenset("0123456789")


class ValueRefusedError(ValueError):
    """A value from outside that is not of its kind; ``str()`` is one line."""


class FileRefusedError(ValueRefusedError):
    """A file ``read_regular_file`` would not or could not read. Besides the one line, for
    callers that word or classify it themselves (the ``file://`` feed reader): ``problem``
    (``missing``, ``not-regular``, ``too-large``, ``unreadable``), ``kind`` (what a
    non-regular file is: ``a directory``, ``a FIFO``…) and the OS ``errno``."""

    def __init__(
        self, message: str, problem: str, *, kind: str = "", errno: int | None = None
    ) -> None:
        super().__init__(message)
        self.problem = problem
        self.kind = kind
        self.errno = errno


def is_ascii_digits(text: str) -> bool:
    """``text`` is one or more of ``0123456789`` and nothing else (``str.isdigit`` is not)."""
    return bool(text) and _DIGITS.issuperset(text)


def parse_decimal(text: str, *, max_digits: int = MAX_DIGITS) -> int | None:
    """``text`` as a non-negative integer of ASCII digits only, else ``None``.

    No sign, no spaces, no underscores, no ``²``, at most ``max_digits`` digits (so a
    megabyte of digits is never converted).
    """
    if not text or len(text) > max_digits or not _DIGITS.issuperset(text):
        return None
    return int(text)


def parse_int(text: str, what: str, *, minimum: int = 0, maximum: int = 10**MAX_DIGITS) -> int:
    """``text`` (surrounding spaces allowed, a leading ``-`` when ``minimum < 0``) as an
    integer within ``[minimum, maximum]``; ``ValueRefusedError`` naming ``what`` else."""
    stripped = text.strip(" \t")
    negative = stripped.startswith("-") and minimum < 0
    value = parse_decimal(stripped[1:] if negative else stripped)
    if value is None:
        raise ValueRefusedError(
            f"{what} must be a whole number of ASCII digits, got {_shown(text)}"
        )
    value = -value if negative else value
    if not minimum <= value <= maximum:
        raise ValueRefusedError(f"{what} must be between {minimum} and {maximum}, got {value}")
    return value


def parse_content_length(value: str | None) -> int | None:
    """An HTTP ``Content-Length`` (RFC 9110: ASCII digits only); ``None`` when absent.

    ``ValueRefusedError`` for anything else (``²``, ``-1``, ``1e3``, two values). More than
    ``MAX_DIGITS`` digits come back as ``10**MAX_DIGITS``: over every limit, never parsed."""
    if value is None:
        return None
    text = value.strip(" \t")
    if text and len(text) > MAX_DIGITS and _DIGITS.issuperset(text):
        return int(10**MAX_DIGITS)  # a number, and larger than any limit: never converted
    length = parse_decimal(text)
    if length is None:
        raise ValueRefusedError(f"Content-Length is not a number: {_shown(value)}")
    return length


def parse_listen_address(text: str) -> tuple[str, int]:
    """``HOST:PORT`` as ``(host, port)``: ``0.0.0.0:8080``, ``localhost:8080``,
    ``[::1]:8080`` (the host comes back without brackets). Port 0-65535, ASCII digits."""
    problem = f"must be HOST:PORT (e.g. 0.0.0.0:8080 or [::]:8080), got {_shown(text)}"
    if not text.isascii() or not text.isprintable():
        raise ValueRefusedError(problem)
    host, colon, port_text = text.rpartition(":")
    port = parse_decimal(port_text, max_digits=5)
    if not colon or port is None or port > 65535:
        raise ValueRefusedError(problem)
    if host.startswith("[") or host.endswith("]"):
        inner = host[1:-1]
        if not (host.startswith("[") and host.endswith("]")) or not _is_ipv6(inner):
            raise ValueRefusedError(problem)
        return inner, port
    if not host or ":" in host or any(char in host for char in "/ @[]"):
        raise ValueRefusedError(problem)
    return host, port


MAX_HOST_CHARS = 253
"""The longest DNS name (RFC 1035's 255 octets on the wire)."""
_HOST_LABEL = re.compile(r"(?!-)[a-z0-9_-]{1,63}(?<!-)")


def parse_host_name(text: str, *, port: bool = True) -> str:
    """A ``Host`` header's (or a setting's) host in one canonical form: a DNS name in lower
    case without its trailing dot (``Releasebot.Example.`` -> ``releasebot.example``), or
    an IP address as ``ipaddress`` writes it (``[::1]:8080`` -> ``::1``, no brackets).
    With ``port``, one ``:PORT`` of ASCII digits may follow (and is dropped); IPv6 needs
    its brackets then. No spaces, commas (two values), userinfo, zone IDs, non-ASCII or
    empty labels; ``ValueRefusedError`` else."""
    problem = f"is not a host name or IP address{'[:port]' if port else ''}: {_shown(text)}"
    if not text or len(text) > MAX_HOST_CHARS + 8 or not text.isascii():
        raise ValueRefusedError(problem)
    host = text
    if text.startswith("["):
        inner, bracket, rest = text[1:].partition("]")
        if not bracket or (rest and not (port and _is_port(rest))) or not _is_ip6_literal(inner):
            raise ValueRefusedError(problem)
        return str(ipaddress.IPv6Address(inner))
    if port and ":" in text:
        host, _, rest = text.rpartition(":")
        if not _is_port(":" + rest):
            raise ValueRefusedError(problem)
    if not port and _is_ip6_literal(host):
        return str(ipaddress.IPv6Address(host))
    host = host.lower()
    host = host[:-1] if host.endswith(".") else host
    try:
        return str(ipaddress.IPv4Address(host))
    except ValueError:
        pass
    labels = host.split(".")
    if len(host) > MAX_HOST_CHARS or not all(_HOST_LABEL.fullmatch(label) for label in labels):
        raise ValueRefusedError(problem)
    return host


def _is_ip6_literal(text: str) -> bool:
    """An IPv6 address without a zone ID (``%eth0`` means nothing in a Host)."""
    return "%" not in text and _is_ipv6(text)


def _is_port(text: str) -> bool:
    """``:PORT``, 1-65535 in ASCII digits."""
    number = parse_decimal(text[1:], max_digits=5) if text.startswith(":") else None
    return number is not None and 0 < number <= 65535


def parse_url(
    text: str, *, schemes: tuple[str, ...] = ("http", "https"), any_path: bool = False
) -> SplitResult:
    """``text`` as an absolute URL with one of ``schemes`` and, for http(s), a host;
    IPv6 hosts in brackets (``http://[::1]:8080/``). No spaces, control or non-ASCII
    characters (in the host and port only, with ``any_path``: a SQLite file may be named
    anything), a port of ASCII digits only. ``ValueRefusedError`` (without the URL: it may
    carry a password) else."""
    try:
        parts = urlsplit(text)
    except ValueError as error:  # "Invalid IPv6 URL" for an unclosed bracket
        raise ValueRefusedError(f"is not a valid URL ({error})") from None
    checked = parts.netloc if any_path else text
    if (
        "\x00" in text
        or not checked.isascii()
        or any(ord(c) < 33 or ord(c) == 127 for c in checked)
    ):
        raise ValueRefusedError("contains spaces, control or non-ASCII characters")
    scheme = parts.scheme.lower()
    if scheme not in schemes:
        wanted = " or ".join(f"{name}://" for name in schemes)
        raise ValueRefusedError(f"must be a {wanted} URL")
    netloc = parts.netloc.rpartition("@")[2]
    host, port_text = _split_host_port(netloc)
    if scheme in ("http", "https") and not host:
        raise ValueRefusedError("has no host")
    if port_text is not None:
        port = parse_decimal(port_text, max_digits=5)
        if port is None or port > 65535:
            raise ValueRefusedError("is not a valid URL (its port is not a number from 0 to 65535)")
    return parts


def _split_host_port(netloc: str) -> tuple[str, str | None]:
    if netloc.startswith("["):
        inner, bracket, rest = netloc[1:].partition("]")
        if not bracket or not _is_ipv6(inner.split("%", 1)[0]):
            raise ValueRefusedError("has an IPv6 host that is not an address in brackets")
        if not rest:
            return inner, None
        if not rest.startswith(":"):
            raise ValueRefusedError("has text after its IPv6 host")
        return inner, rest[1:]
    host, colon, port = netloc.partition(":")
    if "[" in netloc or "]" in netloc or ":" in port:
        raise ValueRefusedError("has a host with brackets or colons (IPv6 needs [brackets])")
    return host, port if colon else None


def _is_ipv6(text: str) -> bool:
    try:
        ipaddress.IPv6Address(text)
    except ValueError:
        return False
    return True


def check_path(text: str) -> str:
    """A file system path as given (no NUL byte, at most ``MAX_PATH_CHARS`` characters)."""
    if "\x00" in text:
        raise ValueRefusedError("contains a NUL byte")
    if len(text) > MAX_PATH_CHARS:
        raise ValueRefusedError(f"is longer than {MAX_PATH_CHARS} characters")
    return text


def read_regular_file(path: str | os.PathLike[str], max_bytes: int) -> bytes:
    """The bytes of a regular file of at most ``max_bytes``; never blocks, never eats memory.

    The one way releasebot reads a file it is pointed at (a key, a password, a token, a CA
    bundle, a kubeconfig, a Docker config, the settings): opened non-blocking (a FIFO would
    wait for a writer), checked to be a regular file after opening (a directory,
    ``/dev/zero``, a socket are refused), then read at most ``max_bytes + 1``.
    ``ValueRefusedError`` with one line naming the path and the problem: ``not found``,
    ``permission denied``, ``is a directory``, ``is a FIFO, not a regular file``, ``is
    larger than N KiB``; the caller names the setting and what to do.
    """
    with _opened(path) as (descriptor, shown):
        try:
            with os.fdopen(descriptor, "rb", buffering=0, closefd=False) as file:
                data = file.read(max_bytes + 1)
        except OSError as error:
            message = f"cannot read {shown}: {_reason(error)}"
            raise FileRefusedError(message, "unreadable", errno=error.errno) from None
    if data is None or len(data) > max_bytes:
        raise FileRefusedError(f"{shown} is larger than {_size(max_bytes)}", "too-large")
    return data


def check_regular_file(path: str | os.PathLike[str]) -> None:
    """``path`` names a regular file this process may read (what ``read_regular_file``
    checks before reading); ``ValueRefusedError`` with the same one-line reasons else."""
    with _opened(path):
        pass


@contextmanager
def _opened(path: str | os.PathLike[str]) -> Iterator[tuple[int, str]]:
    """A descriptor on the regular file ``path`` and the path as messages show it."""
    shown = _path_shown(os.fspath(path))
    check_path(os.fspath(path))
    try:
        descriptor = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError as error:
        raise FileRefusedError(f"file {shown} not found", "missing", errno=error.errno) from None
    except OSError as error:
        mode = _mode_or_none(path)  # a socket cannot be opened (ENXIO): name what it is
        if mode is not None and not stat.S_ISREG(mode):
            kind = _kind(mode)
            message = f"{shown} is {kind}, not a regular file"
            raise FileRefusedError(message, "not-regular", kind=kind) from None
        message = f"cannot open {shown}: {_reason(error)}"
        raise FileRefusedError(message, "unreadable", errno=error.errno) from None
    try:
        mode = os.fstat(descriptor).st_mode
        if not stat.S_ISREG(mode):  # checked on what was opened: no race with a rename
            kind = _kind(mode)
            message = f"{shown} is {kind}, not a regular file"
            raise FileRefusedError(message, "not-regular", kind=kind)
        yield descriptor, shown
    finally:
        os.close(descriptor)


def _mode_or_none(path: str | os.PathLike[str]) -> int | None:
    try:
        return os.stat(path).st_mode
    except OSError:
        return None


def _reason(error: OSError) -> str:
    """An OS error in words a person acts on (``strerror`` is capitalised, and may be absent)."""
    if isinstance(error, PermissionError):
        return "permission denied (check the file's owner and mode, or the Secret's defaultMode)"
    if error.errno == errno.ENOTDIR:
        return "a part of the path is not a directory"
    return (error.strerror or f"error {error.errno}").lower()


def _size(count: int) -> str:
    if count % (1024 * 1024) == 0:
        return f"{count // (1024 * 1024)} MiB"
    if count % 1024 == 0:
        return f"{count // 1024} KiB"
    return f"{count} bytes"


def read_secret_file(path: str | os.PathLike[str], max_bytes: int = MAX_SECRET_BYTES) -> str:
    """A secret kept in a file (a token, a password): UTF-8 text, surrounding whitespace
    stripped, one line. Refusals never quote the content."""
    data = read_regular_file(path, max_bytes)
    shown = _path_shown(os.fspath(path))
    try:
        text = data.decode("utf-8").strip()
    except UnicodeDecodeError as error:
        raise ValueRefusedError(f"{shown} is not UTF-8 text (byte {error.start})") from None
    if not text:
        raise ValueRefusedError(f"{shown} is empty")
    if not text.isprintable():
        raise ValueRefusedError(f"{shown} holds more than one line or control characters")
    return text


def _kind(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISCHR(mode):
        return "a character device"
    if stat.S_ISBLK(mode):
        return "a block device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a regular file"


def _path_shown(text: str) -> str:
    """A path for a message: as given when it is printable, else an ASCII literal."""
    if text.isprintable() and len(text) <= 200:
        return text
    return _shown(text, 200)


def _shown(text: str, limit: int = 40) -> str:
    """``text`` for a message: an ASCII literal, cut at ``limit`` characters."""
    return ascii(text[:limit]) + ("…" if len(text) > limit else "")
