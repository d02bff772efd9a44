"""``HostPolicy``: which ``Host`` a request to releasebot's HTTP servers may name.

Why it exists: the page, its API, ``/metrics`` and the probes answer without
authentication, and the operations guide tells operators to ``kubectl port-forward`` and
open ``http://127.0.0.1:8080/``. Any web page that operator visits meanwhile could read it
all by DNS rebinding: the page's own host name is re-pointed at 127.0.0.1, so the browser
sends the requests to releasebot as same-origin requests and lets the page read the
answers. What such a request cannot hide is the name: its ``Host`` is the attacker's.
So a server answers only a ``Host`` that is

- ``localhost`` (any port: a port-forward may pick another one), or a loopback address;
- its own listen address, when that is one address or name;
- when it listens on every address (``0.0.0.0``, ``::``), ANY IP address: the kubelet's
  probes and Prometheus send the pod's IP (``Host: 10.2.3.4:8080``), which releasebot
  cannot know in advance. That is safe against rebinding, which needs a host NAME: a page
  whose origin is an IP address is served by that address, so its requests there are
  same-origin already and no name can be re-pointed;
- a name listed in ``web.allowed_hosts`` (an Ingress's host name).

Names are compared in lower case without a trailing dot; the port is not compared. A
request without any ``Host`` (HTTP/1.0) is answered: a browser always sends one. Two
``Host`` values, or one that is no host at all, are refused. A refusal is ``421
Misdirected Request`` with a short body, decided before any route runs.

Deliberately not here: authentication (there is none on these routes; the Slack endpoint
checks its signature after this), TLS, and the ``Origin`` header (a rebinding request is
same-origin, so ``Origin`` says nothing this check does not).
"""

from __future__ import annotations

import contextlib
import ipaddress
from collections.abc import Iterable

from releasebot.edge.parse import ValueRefusedError, parse_host_name

WILDCARDS = frozenset({"", "0.0.0.0", "::"})  # noqa: S104 - recognised here, never bound
"""Listen hosts meaning "every address"."""


class HostPolicy:
    """Decides a request's ``Host`` for a server listening on ``listen_host``."""

    def __init__(self, listen_host: str, allowed: Iterable[str] = ()) -> None:
        self._any_ip = listen_host.strip("[]") in WILDCARDS
        names = {"localhost"}
        if not self._any_ip:
            # A listen host that is no name no request can name: the rest still apply.
            with contextlib.suppress(ValueRefusedError):
                names.add(parse_host_name(listen_host.strip("[]"), port=False))
        names.update(parse_host_name(name, port=False) for name in allowed)
        self._names = frozenset(names)

    def allows(self, host: str | None) -> bool:
        """Whether a request with this ``Host`` value (``None``: none sent) is answered."""
        if host is None:
            return True
        try:
            name = parse_host_name(host.strip())
        except ValueRefusedError:
            return False
        if name in self._names:
            return True
        try:
            address = ipaddress.ip_address(name)
        except ValueError:
            return False  # a name nobody allowed: what DNS rebinding sends
        mapped = getattr(address, "ipv4_mapped", None)
        return self._any_ip or address.is_loopback or bool(mapped and mapped.is_loopback)
