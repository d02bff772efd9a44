"""The one redirect policy: which ``Location`` an adapter may follow, judged before it asks.

Feeds, the artefact checks and the registry follow redirects; a redirect is the server
choosing where releasebot sends its next request. Three rules, checked by
``RedirectPolicy.follow`` before that request is sent:

- never from https to plain http (a downgrade would hand the answer to anyone on the path);
- only to http or https;
- never into loopback, link-local (cloud metadata at 169.254.169.254), private or other
  special-purpose addresses, unless the configured URL itself points into that same kind
  of range (a mirror on the LAN may redirect within the LAN; a public feed may not send
  releasebot to the cluster's internals). Host names are resolved to judge them.

A refused redirect raises ``RedirectRefusedError``, whose message names the refused host
and why, never anything that host said (it was never asked). At most ``MAX_REDIRECTS``
hops. Deliberately not here: sending requests (each adapter does, with its library), and
the adapter's error class (each translates ``RedirectRefusedError`` into its own).
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Callable, Iterable
from urllib.parse import urljoin, urlsplit

from releasebot.edge.text import one_line

__all__ = ["MAX_REDIRECTS", "REDIRECT_CODES", "RedirectPolicy", "RedirectRefusedError"]

MAX_REDIRECTS = 5
"""Hops followed from one configured URL: old Flatcar hosts redirect once or twice."""
REDIRECT_CODES = frozenset({301, 302, 303, 307, 308})

Address = ipaddress.IPv4Address | ipaddress.IPv6Address
Resolve = Callable[[str], Iterable[str]]
"""A host name to its addresses (text); ``socket.getaddrinfo`` by default."""


class RedirectRefusedError(Exception):
    """A redirect the policy does not follow; ``str()`` is one line naming host and rule."""


def system_resolve(host: str) -> list[str]:
    """The addresses ``host`` resolves to; empty when it does not resolve (the request
    would fail to connect anyway)."""
    try:
        answers = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError):
        return []
    return [str(answer[4][0]) for answer in answers]


def range_of(address: Address) -> str:
    """The kind of range ``address`` is in: ``loopback``, ``link-local``, ``private``
    (RFC 1918, unique-local, CGNAT, other special-purpose) or ``public``."""
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    if address.is_loopback:
        return "loopback"
    if address.is_link_local:
        return "link-local"
    if address.is_unspecified or address.is_multicast or address.is_reserved:
        return "special-purpose"
    if address.is_private or not address.is_global:
        return "private"
    return "public"


class RedirectPolicy:
    """The redirects of requests that began at ``origin`` (the configured URL)."""

    def __init__(self, origin: str, *, resolve: Resolve = system_resolve) -> None:
        self._resolve = resolve
        self._hops = 0
        self._origin = origin
        self._allowed: set[str] | None = None  # resolved at the first redirect only

    def follow(self, current: str, location: str | None) -> str:
        """The absolute URL to ask next after ``current`` answered a redirect to
        ``location``; ``RedirectRefusedError`` when the policy refuses it."""
        if not location:
            raise RedirectRefusedError("refused a redirect without a Location")
        self._hops += 1
        if self._hops > MAX_REDIRECTS:
            raise RedirectRefusedError(f"too many redirects (more than {MAX_REDIRECTS}: a loop?)")
        try:
            given = urlsplit(location.strip())
            if given.scheme.lower() in ("http", "https") and not given.hostname:
                # urljoin would keep the current host: "http://" is no URL of any host
                raise RedirectRefusedError("refused a redirect to a URL without a host")
            target = urljoin(current, location.strip())
            parts = urlsplit(target)
            host = parts.hostname or ""
        except ValueError:
            raise RedirectRefusedError(
                "refused a redirect to a Location that is not a URL"
            ) from None
        shown = one_line(host, 80) or "(no host)"
        scheme = parts.scheme.lower()
        if scheme in ("http", "https") and not host:
            raise RedirectRefusedError("refused a redirect to a URL without a host")
        if scheme not in ("http", "https"):
            raise RedirectRefusedError(
                f"refused a redirect to a non-http(s) URL ({one_line(scheme, 20)}:)"
            )
        if urlsplit(current).scheme.lower() == "https" and scheme == "http":
            raise RedirectRefusedError(f"refused a redirect from https to plain http ({shown})")
        if self._allowed is None:
            self._allowed = self._ranges(urlsplit(self._origin).hostname or "") - {"public"}
        refused = self._ranges(host) - {"public"} - self._allowed
        if refused:
            kinds = ", ".join(sorted(refused))
            raise RedirectRefusedError(f"refused a redirect to {shown} (a {kinds} address)")
        return target

    def _ranges(self, host: str) -> set[str]:
        try:
            return {range_of(ipaddress.ip_address(host.split("%", 1)[0]))}
        except ValueError:
            pass
        if host.lower() == "localhost" or host.lower().endswith(".localhost"):
            return {"loopback"}
        kinds = set()
        for text in self._resolve(host):
            try:
                kinds.add(range_of(ipaddress.ip_address(text.split("%", 1)[0])))
            except ValueError:
                continue
        return kinds or {"public"}
