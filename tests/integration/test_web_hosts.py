"""DNS rebinding: which ``Host`` releasebot's HTTP servers answer, over real sockets.

Every route (the page, its API, ``/metrics``, ``/healthz``, ``/readyz``, the Slack
endpoint) of the real ``HttpServer`` answers a request naming ``localhost``, a loopback
address, the listen address or a name in ``web.allowed_hosts`` (any case, any port, a
trailing dot), and, when listening on every address, any IP address (the kubelet's probes
and Prometheus send the pod's IP). Any other name (what a rebound page sends), two
``Host`` headers, or one that is no host at all is a 421 with a short body, before any
route runs: the Slack handler is never reached, and the refusal is logged once, on one
clean line. A request without ``Host`` (HTTP/1.0) is answered: no browser sends one.
"""

from __future__ import annotations

import logging
import socket
from collections.abc import Iterator, Mapping

import pytest

from releasebot.config import Settings
from releasebot.store.sql import SqlStateStore
from releasebot.web.server import HttpServer
from releasebot.wiring.core import open_store, utc_now
from releasebot.wiring.web import overview_app
from tests.hostile.conftest import assert_clean_line
from tests.support.overview import seed_overview
from tests.support.tools import missing_tool

ROUTES = [
    ("GET", "/"),
    ("GET", "/api/targets"),
    ("GET", "/metrics"),
    ("GET", "/healthz"),
    ("GET", "/readyz"),
    ("HEAD", "/api/fleet"),
    ("POST", "/slack/commands"),
]
ALLOWED = ["releasebot.acme.example"]
ANSWERED_ON_LOOPBACK = [
    "127.0.0.1:{port}",
    "127.0.0.1",
    "localhost:{port}",
    "LocalHost.:9999",
    "[::1]:8080",
    "[::1]",
    "127.0.0.2:{port}",
    "releasebot.acme.example",
    "Releasebot.Acme.Example.:443",
    None,
]
REFUSED_EVERYWHERE = [
    "evil.example",
    "evil.example:{port}",
    "localhost.evil.example",
    "127.0.0.1.nip.io:{port}",
    "other.acme.example",
    "acme.example",
    "",
    "127.0.0.1, evil.example",
    "[::1",
    "::1",
    "evil.example:notaport",
    "localhost:0",
    "localhost:99999",
    "evil example",
    "\u00e9vil.example",
    "\x1b[31mevil.example",
    "[fe80::1%25eth0]:80",
    "a" * 300,
]


class Slack:
    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, body: bytes, headers: Mapping[str, str]) -> tuple[int, str, bytes]:
        self.calls += 1
        return 401, "text/plain; charset=utf-8", b"invalid or missing signature"


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SqlStateStore]:
    path = tmp_path_factory.mktemp("hosts") / "releasebot.db"
    with open_store(f"sqlite:///{path}") as store:
        seed_overview(store, utc_now())
        yield store


def serve(store: SqlStateStore, host: str, slack: Slack) -> HttpServer:
    return HttpServer(
        host,
        0,
        alive=lambda: True,
        ready=lambda: (True, "ready"),
        metrics=lambda: b"releasebot_up 1\n",
        slack=slack,
        pages=overview_app(Settings(), store),
        allowed_hosts=ALLOWED,
    ).start()


def ask(
    port: int, method: str, path: str, hosts: list[str | None], *, family: int = socket.AF_INET
) -> tuple[int, bytes]:
    head = "".join(f"Host: {h.format(port=port)}\r\n" for h in hosts if h is not None)
    body = "" if method != "POST" else "text=status"
    length = f"Content-Length: {len(body)}\r\n" if method == "POST" else ""
    version = "HTTP/1.0" if hosts == [None] else "HTTP/1.1"
    request = f"{method} {path} {version}\r\n{head}{length}\r\n{body}".encode("latin-1", "replace")
    address = ("127.0.0.1" if family == socket.AF_INET else "::1", port)
    with socket.create_connection(address, timeout=10) as conn:
        conn.sendall(request)
        conn.shutdown(socket.SHUT_WR)
        answer = b""
        while chunk := conn.recv(65536):
            answer += chunk
    status = int(answer.split(b"\r\n", 1)[0].split(b" ")[1])
    return status, answer.partition(b"\r\n\r\n")[2]


@pytest.fixture(scope="module")
def shared(store: SqlStateStore) -> Iterator[tuple[HttpServer, Slack]]:
    slack = Slack()
    server = serve(store, "127.0.0.1", slack)
    yield server, slack
    server.close()


@pytest.fixture
def loopback(shared: tuple[HttpServer, Slack]) -> tuple[HttpServer, Slack]:
    shared[1].calls = 0
    shared[0].told_hosts.clear()
    return shared


@pytest.mark.parametrize("host", ANSWERED_ON_LOOPBACK)
@pytest.mark.parametrize(("method", "path"), ROUTES)
def test_a_local_or_allowed_host_is_answered_on_every_route(
    loopback: tuple[HttpServer, Slack], method: str, path: str, host: str | None
) -> None:
    server, slack = loopback
    status, _ = ask(server.port, method, path, [host])
    assert status != 421
    assert status == (401 if method == "POST" else 200)
    assert slack.calls == (1 if method == "POST" else 0)


@pytest.mark.parametrize("host", REFUSED_EVERYWHERE)
@pytest.mark.parametrize(("method", "path"), ROUTES)
def test_any_other_host_is_misdirected_on_every_route(
    loopback: tuple[HttpServer, Slack], method: str, path: str, host: str
) -> None:
    server, slack = loopback
    status, body = ask(server.port, method, path, [host])
    assert status == 421
    assert len(body) < 64
    assert b"fleet" not in body
    assert b"releasebot_up" not in body
    assert slack.calls == 0


@pytest.mark.parametrize(("method", "path"), ROUTES)
def test_two_host_headers_are_misdirected(
    loopback: tuple[HttpServer, Slack], method: str, path: str
) -> None:
    server, slack = loopback
    status, _ = ask(server.port, method, path, ["127.0.0.1:{port}", "evil.example"])
    assert status == 421
    status, _ = ask(server.port, method, path, ["localhost", "localhost"])
    assert status == 421
    assert slack.calls == 0


@pytest.mark.usefixtures("logs_reach_caplog")
def test_a_refusal_is_logged_once_per_host_on_one_clean_line(
    loopback: tuple[HttpServer, Slack], caplog: pytest.LogCaptureFixture
) -> None:
    server, _ = loopback
    with caplog.at_level(logging.WARNING, logger="releasebot.web"):
        for _ in range(3):
            ask(server.port, "GET", "/metrics", ["\x1b[31mevil.example\r"])
            ask(server.port, "GET", "/", ["other.example"])
    lines = [record.getMessage() for record in caplog.records]
    assert len(lines) == 2, lines
    for line in lines:
        assert_clean_line(line, r"refused a request for Host .*web\.allowed_hosts")


@pytest.mark.parametrize(
    "host", ["10.2.3.4:{port}", "10.2.3.4", "192.168.7.7:8080", "[fd00::1]:8080", "[::1]"]
)
def test_on_every_address_the_pods_ip_is_answered_for_probes_and_scrapes(
    store: SqlStateStore, host: str
) -> None:
    slack = Slack()
    server = serve(store, "0.0.0.0", slack)  # the Deployment's listen address
    try:
        for path in ("/healthz", "/readyz", "/metrics"):
            assert ask(server.port, "GET", path, [host])[0] == 200
        assert ask(server.port, "GET", "/metrics", ["evil.example"])[0] == 421
        assert ask(server.port, "GET", "/metrics", ["10.2.3.4.nip.io"])[0] == 421
    finally:
        server.close()


def test_on_one_address_another_ip_is_refused(store: SqlStateStore) -> None:
    slack = Slack()
    server = serve(store, "127.0.0.1", slack)
    try:
        assert ask(server.port, "GET", "/metrics", ["10.2.3.4:{port}"])[0] == 421
        assert ask(server.port, "GET", "/metrics", ["127.0.0.1:{port}"])[0] == 200
    finally:
        server.close()


def test_an_ipv6_listener_answers_its_own_literal(store: SqlStateStore) -> None:
    if not socket.has_ipv6:
        missing_tool("this Python has no IPv6 support: the [::1] listener cannot be tested")
    slack = Slack()
    try:
        server = serve(store, "[::1]", slack)
    except OSError:
        missing_tool("cannot listen on [::1] (IPv6 loopback disabled on this machine)")
    try:
        family = socket.AF_INET6
        assert ask(server.port, "GET", "/api/feeds", ["[::1]:{port}"], family=family)[0] == 200
        assert ask(server.port, "GET", "/api/feeds", ["[0:0::1]"], family=family)[0] == 200
        assert ask(server.port, "GET", "/api/feeds", ["evil.example"], family=family)[0] == 421
    finally:
        server.close()
