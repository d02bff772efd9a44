"""``BoundedSession`` (``registry/tokenhttp.py``), the session google-auth and
azure-identity send through, against a local server over real HTTP: an answer is read
whole up to the bound and refused past it (so no token endpoint fills memory), a redirect
is returned as it is, never followed (it would carry credentials elsewhere), and what was
read is what the libraries then see (``.content``, ``.json()``)."""

from __future__ import annotations

import pytest
import requests

from releasebot.registry.tokenhttp import AnswerTooLargeError, BoundedSession
from tests.support.servers import QuietHandler, serving


class Handler(QuietHandler):
    def do_GET(self) -> None:
        if self.path == "/token":
            self.answer(200, {"Content-Type": "application/json"}, b'{"access_token": "t"}')
        elif self.path == "/huge":
            self.send_response(200)
            self.end_headers()  # no length: read until the server closes
            for _ in range(64):
                self.wfile.write(b"x" * 65536)
        elif self.path == "/away":
            self.answer(302, {"Location": "http://169.254.169.254/steal"}, b"")
        else:
            self.answer(404, {}, b"")


def test_answers_are_read_up_to_the_bound_and_refused_past_it() -> None:
    with serving(Handler) as host, BoundedSession(max_bytes=4096) as session:
        answer = session.get(f"http://{host}/token", timeout=5)
        assert answer.json() == {"access_token": "t"}
        assert answer.content == b'{"access_token": "t"}'
        with pytest.raises(AnswerTooLargeError, match="over 4096 bytes"):
            session.get(f"http://{host}/huge", timeout=5)
        assert issubclass(AnswerTooLargeError, requests.exceptions.ConnectionError)


def test_redirects_are_not_followed() -> None:
    with serving(Handler) as host, BoundedSession() as session:
        answer = session.get(f"http://{host}/away", timeout=5)
        assert answer.status_code == 302
        assert answer.url == f"http://{host}/away"
