"""``HttpServer`` under a crowd, over real sockets on loopback: the listen backlog holds a
burst, probes are answered while every turn for expensive page work is taken, a busy page
answers 503 with ``Retry-After`` while a kept answer and its 304 need no turn, a client
that trickles its request head or body is cut off at the connection's deadline, and
connections beyond the limit are refused at once.

The deadline runs on an injected clock the test moves, so nothing here sleeps; the numbers
under real load are ``benchmarks/bench_page_load.py``'s.
"""

from __future__ import annotations

import select
import socket
import threading
from collections.abc import Iterator, Mapping

import httpx
import pytest

from releasebot.web.overview import WebAnswer
from releasebot.web.server import BUSY, HttpServer, TurnLimit


class Clock:
    """A monotonic clock the test moves; ``reads`` counts the server's looks at it (one
    when a connection is accepted, one before each read from its socket)."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.reads = threading.Semaphore(0)

    def __call__(self) -> float:
        self.reads.release()
        return self.now


class BlockingPages:
    """``/api/...`` is expensive and waits for ``release``; ``/`` is the cheap static page."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.entered = threading.Semaphore(0)

    def owns(self, path: str) -> bool:
        return path == "/" or path.startswith("/api/")

    def costly(self, path: str) -> bool:
        return path.startswith("/api/")

    def quick(self, target: str, headers: Mapping[str, str]) -> WebAnswer | None:
        """``/api/kept`` is kept (a 304 for ``"k"``); everything else must be built."""
        if target != "/api/kept":
            return None
        if headers.get("if-none-match") == '"k"':
            return WebAnswer(304, "application/json", b"", {"ETag": '"k"'})
        return WebAnswer(200, "application/json", b"{}", {"ETag": '"k"'})

    def __call__(
        self, target: str, headers: Mapping[str, str], turns: TurnLimit | None = None
    ) -> WebAnswer | None:
        if not target.startswith("/api/"):
            return WebAnswer(200, "text/plain", target.encode())
        assert turns is not None  # the server gives its limit for the expensive answers
        with turns.turn() as granted:
            if not granted:
                return None  # "busy"
            self.entered.release()
            assert self.release.wait(30), "the test never released the page"
            return WebAnswer(200, "text/plain", target.encode())


def serve(**options: object) -> HttpServer:
    return HttpServer(
        "127.0.0.1",
        0,
        alive=lambda: True,
        ready=lambda: (True, "ready (leader)"),
        metrics=lambda: b"x 1.0\n",
        slack=lambda body, headers: (200, "text/plain", b"handled " + body),
        **options,  # type: ignore[arg-type]
    )


@pytest.fixture
def pages() -> Iterator[BlockingPages]:
    pages = BlockingPages()
    yield pages
    pages.release.set()


def test_the_listen_backlog_holds_a_burst_the_accept_loop_has_not_taken_yet() -> None:
    server = serve()  # listening, but nothing accepts yet: the kernel queues them all
    sockets = []
    try:
        for _ in range(200):
            client = socket.create_connection(("127.0.0.1", server.port), timeout=5)
            sockets.append(client)  # with a backlog of 5, the 7th SYN is dropped: timeout
        server.start()
        for client in sockets[:3]:
            client.sendall(b"GET /healthz HTTP/1.0\r\n\r\n")
            assert client.recv(4096).startswith(b"HTTP/1.0 200")
    finally:
        for client in sockets:
            client.close()
        server.close()


def test_probes_are_answered_while_every_turn_for_page_work_is_taken(
    pages: BlockingPages,
) -> None:
    server = serve(pages=pages, max_costly=2, max_waiting=1, costly_wait=30).start()
    base = f"http://127.0.0.1:{server.port}"
    answers: list[httpx.Response] = []

    def ask() -> None:
        answers.append(httpx.get(base + "/api/targets", timeout=30))

    workers = [threading.Thread(target=ask) for _ in range(2)]
    try:
        for worker in workers:
            worker.start()
        for _ in range(2):
            assert pages.entered.acquire(timeout=10)  # both turns taken, both blocked
        waiter = threading.Thread(target=ask)  # waits for a turn (one may wait)
        waiter.start()
        workers.append(waiter)
        assert server.costly.wait_for_waiting(1, timeout=10)
        with httpx.Client(base_url=base, timeout=5) as client:
            for path in ("/healthz", "/readyz", "/metrics", "/"):
                assert client.get(path).status_code == 200, path
            busy = client.get("/api/fleet")  # no turn free, nobody may wait more: at once
            assert busy.status_code == 503
            assert busy.headers["Retry-After"] == "2"
            assert busy.json() == {"error": BUSY}
            assert client.head("/api/fleet").status_code == 503
        pages.release.set()
        for worker in workers:
            worker.join(timeout=30)
        assert [answer.status_code for answer in answers] == [200, 200, 200]
    finally:
        pages.release.set()
        server.close()


def test_a_kept_answer_and_its_304_need_no_turn(pages: BlockingPages) -> None:
    server = serve(pages=pages, max_costly=1, max_waiting=0).start()
    base = f"http://127.0.0.1:{server.port}"
    worker = threading.Thread(target=lambda: httpx.get(base + "/api/targets", timeout=30))
    try:
        worker.start()
        assert pages.entered.acquire(timeout=10)  # the only turn is taken, nobody may wait
        assert httpx.get(base + "/api/fleet", timeout=5).status_code == 503
        kept = httpx.get(base + "/api/kept", timeout=5)
        assert (kept.status_code, kept.headers["ETag"]) == (200, '"k"')
        again = httpx.get(base + "/api/kept", headers={"If-None-Match": '"k"'}, timeout=5)
        assert (again.status_code, again.content) == (304, b"")
        assert not pages.entered.acquire(timeout=0)  # neither was built
    finally:
        pages.release.set()
        worker.join(timeout=30)
        server.close()


def test_a_busy_page_never_computes_the_refused_answer(pages: BlockingPages) -> None:
    server = serve(pages=pages, max_costly=1, max_waiting=0).start()
    base = f"http://127.0.0.1:{server.port}"
    worker = threading.Thread(target=lambda: httpx.get(base + "/api/targets", timeout=30))
    try:
        worker.start()
        assert pages.entered.acquire(timeout=10)
        for _ in range(5):
            assert httpx.get(base + "/api/targets", timeout=5).status_code == 503
        assert not pages.entered.acquire(timeout=0)  # the refused ones never reached it
        pages.release.set()
        worker.join(timeout=30)
        assert httpx.get(base + "/api/targets", timeout=5).status_code == 200  # turn back
    finally:
        pages.release.set()
        server.close()


def _server_reads(client: socket.socket, clock: Clock) -> bool:
    """Wait until the server looks at the clock again (it is about to read), or until it
    closed the connection or answered: then False."""
    for _ in range(200):
        if clock.reads.acquire(timeout=0.05):
            return True
        if select.select([client], [], [], 0)[0]:
            return False
    pytest.fail("the server neither read nor closed the connection in 10 s")


def _trickle(server: HttpServer, clock: Clock, trickled: bytes, at_once: bytes = b"") -> bytes:
    """Send ``at_once``, then ``trickled`` a byte per read of the server, the clock moving
    1 s per byte (the server's per-read timeout is never reached); what the server answered,
    if anything, before it closed the connection."""
    client = socket.create_connection(("127.0.0.1", server.port), timeout=10)
    try:
        client.sendall(at_once)
        for byte in trickled:
            if not _server_reads(client, clock):
                break
            clock.now += 1
            try:
                client.sendall(bytes([byte]))
            except OSError:  # cut off while sending: what the test wants
                break
        answer = b""
        while True:
            try:
                chunk = client.recv(4096)
            except ConnectionResetError:
                break
            if not chunk:
                break
            answer += chunk
        return answer
    finally:
        client.close()


def test_a_head_sent_one_byte_at_a_time_is_cut_off_at_the_deadline() -> None:
    clock = Clock()
    server = serve(timeout=5, monotonic=clock).start()
    try:
        request = b"GET /healthz HTTP/1.0\r\nHost: 127.0.0.1\r\nX-Slow: " + b"a" * 20 + b"\r\n\r\n"
        assert _trickle(server, clock, request) == b""  # no answer: the connection closed
    finally:
        server.close()


def test_a_body_that_never_finishes_is_cut_off_at_the_deadline() -> None:
    clock = Clock()
    calls: list[bytes] = []

    def slack(body: bytes, headers: Mapping[str, str]) -> tuple[int, str, bytes]:
        calls.append(body)
        return 200, "text/plain", b"ok"

    server = HttpServer("127.0.0.1", 0, slack=slack, timeout=5, monotonic=clock).start()
    try:
        head = b"POST /slack/commands HTTP/1.0\r\nContent-Length: 40\r\n\r\n"
        assert _trickle(server, clock, b"x" * 40, at_once=head) == b""
        assert calls == []  # the handler never saw the body, nor a part of it
    finally:
        server.close()


def test_a_request_sent_in_time_is_answered_whatever_the_clock_did_before() -> None:
    clock = Clock()
    server = serve(timeout=5, monotonic=clock).start()
    try:
        clock.now += 3600  # the deadline counts from each connection's acceptance
        answer = httpx.post(f"http://127.0.0.1:{server.port}/slack/commands", content=b"a=b")
        assert (answer.status_code, answer.text) == (200, "handled a=b")
    finally:
        server.close()


def test_connections_beyond_the_limit_are_refused_at_once() -> None:
    server = serve(max_connections=2).start()
    held = [socket.create_connection(("127.0.0.1", server.port), timeout=10) for _ in range(2)]
    try:
        for client in held:
            client.sendall(b"GET /heal")  # accepted, a thread each, waiting for the rest
        answer = httpx.get(f"http://127.0.0.1:{server.port}/healthz", timeout=5)
        assert answer.status_code == 503
        assert answer.headers["Retry-After"] == "2"
        assert answer.text == "too many connections at once; try again in a few seconds\n"
    finally:
        for client in held:
            client.close()
    try:
        for _ in range(1000):  # the held connections' threads end on their EOF
            if httpx.get(f"http://127.0.0.1:{server.port}/healthz", timeout=5).status_code == 200:
                break
        else:
            pytest.fail("the slots of closed connections were never given back")
    finally:
        server.close()
