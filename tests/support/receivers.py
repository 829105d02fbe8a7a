"""A real HTTP receiver on loopback that records every request, for notification tests.

`Receiver` is a threading `http.server` on 127.0.0.1: each request's method,
path, headers and body are kept in order; `answers` says which status codes
to give (one per request, then 200), and `hang()` makes it hold requests
without answering until `release()`. Use it as a context manager.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

__all__ = ["Received", "Receiver"]


@dataclass(frozen=True)
class Received:
    method: str
    path: str
    headers: dict[str, str]  # names lower-cased
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


class Receiver:
    def __init__(self, answers: tuple[int, ...] = ()) -> None:
        self.requests: list[Received] = []
        self._answers = list(answers)
        self._lock = threading.Lock()
        self._released = threading.Event()
        self._released.set()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 — http.server's naming
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                with receiver._lock:
                    receiver.requests.append(
                        Received("POST", self.path, {k.lower(): v for k, v in self.headers.items()}, body)
                    )
                    status = receiver._answers.pop(0) if receiver._answers else 200
                receiver._released.wait(30)
                self.send_response(status)
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"{}")

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def __enter__(self) -> Receiver:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()
        self._server.shutdown()
        self._server.server_close()

    def hang(self) -> None:
        self._released.clear()

    def release(self) -> None:
        self._released.set()

    def wait_for(self, count: int, timeout_s: float = 10.0) -> list[Received]:
        """The first `count` requests, once they have arrived."""
        deadline = time.monotonic() + timeout_s
        while len(self.requests) < count:
            assert time.monotonic() < deadline, f"{len(self.requests)} of {count} requests arrived"
            time.sleep(0.01)
        return self.requests[:count]
