"""A registry whose first answer to each manifest DELETE is lost, for tests.

The delete reaches the real registry (it is done), but the client is answered 503 as if
the answer had been lost on the way back; the client's retry then meets the registry's
real 404. Everything else is forwarded byte for byte to the real registry behind it, so
manifests, tags and blobs stay real.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

import httpx

from tests.support.servers import QuietHandler, serving

_HOP = {"connection", "keep-alive", "transfer-encoding", "content-length", "date", "server"}


class LossyProxy:
    """Started by ``run_lossy_proxy``; ``host`` is ``127.0.0.1:PORT``."""

    def __init__(self) -> None:
        self.host = ""
        self.lost: list[str] = []
        """The paths of the deletes whose answer was lost."""
        self.lock = threading.Lock()

    def repository(self, name: str) -> str:
        return f"{self.host}/{name}"


@contextmanager
def run_lossy_proxy(upstream_base_url: str, *, lose: str) -> Iterator[LossyProxy]:
    """Lose the first answer to each DELETE of a manifest whose path contains ``lose``."""
    proxy = LossyProxy()
    client = httpx.Client(base_url=upstream_base_url, timeout=10.0)

    class Handler(QuietHandler):
        def do_GET(self) -> None:
            self._forward()

        def do_HEAD(self) -> None:
            self._forward()

        def do_DELETE(self) -> None:
            answer = self._forward(send=False)
            with proxy.lock:
                lose_it = lose in self.path and self.path not in proxy.lost
                if lose_it:
                    proxy.lost.append(self.path)
            if lose_it and answer.is_success:
                self.answer(503, {}, b"")
            else:
                self._send(answer)

        def _forward(self, *, send: bool = True) -> httpx.Response:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else b""
            headers = {k: v for k, v in self.headers.items() if k.lower() not in _HOP | {"host"}}
            answer = client.request(self.command, self.path, headers=headers, content=body)
            if send:
                self._send(answer)
            return answer

        def _send(self, answer: httpx.Response) -> None:
            out = {k: v for k, v in answer.headers.items() if k.lower() not in _HOP}
            length = int(answer.headers.get("Content-Length") or len(answer.content))
            content = b"" if self.command == "HEAD" else answer.content
            self.answer(answer.status_code, out, content, length=length)

    try:
        with serving(Handler) as host:
            proxy.host = host
            yield proxy
    finally:
        client.close()
