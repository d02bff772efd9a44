"""A ``requests`` session that reads at most a few KB of any answer, for token endpoints.

Why it exists: google-auth and azure-core send through a ``requests.Session`` they are
given, then read the whole body. A token answer is under a few KB; a metadata server, an
identity endpoint or a registry's ``/oauth2/exchange`` that streams without end must not
fill releasebot's memory. This session reads every answer itself, stops past
``MAX_TOKEN_ANSWER_BYTES`` with ``AnswerTooLargeError`` (a ``requests`` ``ConnectionError``,
so each library reports it as its own transport failure), and hands the library the bytes
read. Redirects are not followed: no token endpoint redirects, and a redirect would carry
the request's credentials (a federated assertion, an AAD token) elsewhere.
"""

from __future__ import annotations

from typing import Any

import requests

MAX_TOKEN_ANSWER_BYTES = 64 * 1024
"""Largest answer read from a token endpoint: a token answer is a few KB (a JWT of about 2 KB
and a few fields); 64 KB leaves room for a verbose error body, and no more."""


class AnswerTooLargeError(requests.exceptions.ConnectionError):
    """The endpoint's answer exceeded ``MAX_TOKEN_ANSWER_BYTES``."""


class BoundedSession(requests.Session):
    """``requests.Session`` whose answers are read whole here, bounded, never redirected."""

    def __init__(self, max_bytes: int = MAX_TOKEN_ANSWER_BYTES) -> None:
        super().__init__()
        self.max_bytes = max_bytes

    def request(  # type: ignore[override]
        self, method: str, url: str, *args: Any, **kwargs: Any
    ) -> requests.Response:
        kwargs["stream"] = True
        kwargs["allow_redirects"] = False
        response = super().request(method, url, *args, **kwargs)
        chunks: list[bytes] = []
        size = 0
        try:
            for chunk in response.iter_content(16 * 1024):
                size += len(chunk)
                if size > self.max_bytes:
                    raise AnswerTooLargeError(
                        f"the answer is over {self.max_bytes} bytes", response=response
                    )
                chunks.append(chunk)
        finally:
            response.close()
        response._content = b"".join(chunks)  # what .content, .json() and .text then read
        response._content_consumed = True
        return response
