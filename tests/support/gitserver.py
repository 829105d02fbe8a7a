"""A real git HTTP server on loopback: `git http-backend` behind basic auth.

Owned here: serving the repositories under one directory over git's smart
HTTP protocol, answering 401 unless the request carries the expected
password (and user name, when one is given; `accepting` switches between
refusing everyone and checking it), slowly enough that a fetch's git
process can be seen in /proc while it runs; recording every Authorization
header it is sent; optionally redirecting every request to another
server (`redirect_to`), as a remote that hands its clients to
another host would. `CommandLines` samples every process's command line
from /proc. Test support only.
"""

from __future__ import annotations

import base64
import subprocess
import threading
import time
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Iterator

__all__ = ["CommandLines", "GitHttpServer", "serving"]


class GitHttpServer:
    def __init__(self, root: Path, password: str, delay_s: float = 0.3, username: str | None = None) -> None:
        self.root = root
        self.password = password
        self.username = username
        self.delay_s = delay_s
        self.accepting = True
        self.requests = 0
        self.authorizations: list[str] = []  # every Authorization header received
        self.redirect_to: str | None = None  # base URL (scheme://host:port) to send clients to
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self.port = self._server.server_address[1]

    def url(self, name: str, userinfo: str = "") -> str:
        at = f"{userinfo}@" if userinfo else ""
        return f"http://{at}127.0.0.1:{self.port}/{name}"

    def authorized(self, header: str | None) -> bool:
        scheme, _, encoded = (header or "").partition(" ")
        if not self.accepting or scheme.lower() != "basic":
            return False
        username, _, password = base64.b64decode(encoded).decode().partition(":")
        return password == self.password and (self.username is None or username == self.username)

    def run_cgi(
        self, method: str, path: str, query: str, content_type: str, body: bytes
    ) -> tuple[str, list[tuple[str, str]], bytes]:
        env = {
            "GIT_PROJECT_ROOT": str(self.root),
            "GIT_HTTP_EXPORT_ALL": "1",
            "PATH_INFO": path,
            "QUERY_STRING": query,
            "REQUEST_METHOD": method,
            "CONTENT_TYPE": content_type,
            "CONTENT_LENGTH": str(len(body)),
            "REMOTE_USER": "tests",
            "REMOTE_ADDR": "127.0.0.1",
            "PATH": "/usr/bin:/bin",
        }
        out = subprocess.run(["git", "http-backend"], input=body, env=env, capture_output=True, check=False).stdout
        head, _, payload = out.partition(b"\r\n\r\n")
        status, headers = "200 OK", []
        for line in head.decode().split("\r\n"):
            name, _, value = line.partition(":")
            if name.lower() == "status":
                status = value.strip()
            elif name:
                headers.append((name, value.strip()))
        return status, headers, payload

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


def _handler(server: GitHttpServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: object) -> None:
            pass

        def _serve(self) -> None:
            server.requests += 1
            if self.headers.get("Authorization") is not None:
                server.authorizations.append(self.headers["Authorization"])
            time.sleep(server.delay_s)  # so the fetch's git process lives long enough to be seen
            if server.redirect_to is not None:
                self.send_response(302)
                self.send_header("Location", server.redirect_to + self.path)
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            if not server.authorized(self.headers.get("Authorization")):
                self.send_response(401)
                self.send_header("WWW-Authenticate", 'Basic realm="git"')
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            path, _, query = self.path.partition("?")
            status, headers, payload = server.run_cgi(
                self.command, path, query, self.headers.get("Content-Type", ""), body
            )
            code, _, reason = status.partition(" ")
            self.send_response(int(code), reason)
            for name, value in headers:
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        do_GET = _serve
        do_POST = _serve

    return Handler


class CommandLines:
    """Every process's command line, sampled from /proc until stopped."""

    def __init__(self) -> None:
        self.seen: set[str] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()

    def _sample(self) -> None:
        while not self._stop.wait(0.01):
            for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
                try:
                    self.seen.add(cmdline.read_bytes().replace(b"\0", b" ").decode(errors="replace"))
                except OSError:
                    pass  # the process ended

    def stop(self) -> set[str]:
        self._stop.set()
        self._thread.join()
        return self.seen


@contextmanager
def serving(root: Path, password: str, username: str | None = None, delay_s: float = 0.3) -> Iterator[GitHttpServer]:
    server = GitHttpServer(root, password, delay_s=delay_s, username=username)
    thread = threading.Thread(target=server._server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.close()
