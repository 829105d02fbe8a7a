"""Real git remotes on loopback, and the ways a remote goes wrong.

Owns a bare repository that tests push to (`Remote`), served two ways:
`git daemon` (git://) and `git http-backend` behind a small threaded HTTP
server (http://). The HTTP server has modes a scenario switches between:
serving, refusing (its socket closed: connection refused), stalling (it
accepts and reads the request, then never answers) and garbage (a 200 full
of noise). Must not: know about the agent; a scenario points one at it.
"""

from __future__ import annotations

import enum
import os
import shutil
import subprocess
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from tests.conftest import GitRepo
from tests.support.stack import eventually, free_port

__all__ = ["Remote", "HttpGitServer", "GitDaemon", "Mode"]


class Remote:
    """A bare repository `remote.git` under `root`, pushed to from a work repository."""

    def __init__(self, root: Path, work: GitRepo) -> None:
        self.root = root
        self.path = root / "remote.git"
        subprocess.run(["git", "init", "-q", "--bare", "-b", "main", str(self.path)], check=True)
        (self.path / "git-daemon-export-ok").touch()
        self.work = work
        work.git("remote", "add", "origin", str(self.path))

    def push(self, force: bool = False) -> str:
        self.work.git("push", "-q", *(["--force"] if force else []), "origin", "HEAD:refs/heads/main")
        return self.work.head()

    def delete_branch(self) -> None:
        subprocess.run(["git", "--git-dir", str(self.path), "update-ref", "-d", "refs/heads/main"], check=True)


class Mode(str, enum.Enum):
    SERVE = "serve"
    STALL = "stall"
    GARBAGE = "garbage"


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def do_GET(self) -> None:  # noqa: N802 — http.server's naming
        self._handle()

    def do_POST(self) -> None:  # noqa: N802  # http.server's naming
        self._handle()

    def _handle(self) -> None:
        mode = self.server.owner.mode
        if mode is Mode.STALL:
            self.server.owner.stalled.set()
            self.server.owner.release.wait()
            return
        if mode is Mode.GARBAGE:
            noise = os.urandom(4096)
            self.send_response(200)
            self.send_header("Content-Type", "application/x-git-upload-pack-advertisement")
            self.send_header("Content-Length", str(len(noise)))
            self.end_headers()
            self.wfile.write(noise)
            return
        self._git_http_backend()

    def _git_http_backend(self) -> None:
        path, _, query = self.path.partition("?")
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        env = {
            "PATH": os.environ["PATH"],
            "GIT_PROJECT_ROOT": str(self.server.owner.project_root),
            "GIT_HTTP_EXPORT_ALL": "1",
            "REQUEST_METHOD": self.command,
            "PATH_INFO": path,
            "QUERY_STRING": query,
            "CONTENT_TYPE": self.headers.get("Content-Type", ""),
            "CONTENT_LENGTH": str(len(body)),
            "REMOTE_ADDR": self.client_address[0],
        }
        done = subprocess.run(["git", "http-backend"], input=body, env=env, capture_output=True, check=False)
        head, _, payload = done.stdout.partition(b"\r\n\r\n")
        headers = [line.split(b":", 1) for line in head.split(b"\r\n") if b":" in line]
        status = next((int(v.split()[0]) for k, v in headers if k.lower() == b"status"), 200)
        self.send_response(status)
        for key, value in headers:
            if key.lower() != b"status":
                self.send_header(key.decode(), value.strip().decode())
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, format: str, *args: object) -> None:
        pass


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    owner: HttpGitServer


class HttpGitServer:
    """`git http-backend` for every repository under `project_root`, on a fixed loopback port."""

    def __init__(self, project_root: Path) -> None:
        self.project_root = project_root
        self.port = free_port()
        self.mode = Mode.SERVE
        self.stalled = threading.Event()  # a request has been accepted and left unanswered
        self.release = threading.Event()  # lets stalled requests end (at stop)
        self._server: _Server | None = None
        self.start()

    def url(self, name: str) -> str:
        return f"http://127.0.0.1:{self.port}/{name}"

    def start(self) -> None:
        """Listen (again) on the same port."""
        self._server = _Server(("127.0.0.1", self.port), _Handler)
        self._server.owner = self
        threading.Thread(target=self._server.serve_forever, name="git-http", daemon=True).start()

    def serve(self) -> None:
        """Answer again (ends any stalled request)."""
        self.mode = Mode.SERVE
        self.release.set()
        self.release = threading.Event()
        self.stalled.clear()

    def refuse(self) -> None:
        """Close the listening socket: connections are refused until `start()`."""
        assert self._server is not None
        self._server.shutdown()
        self._server.server_close()
        self._server = None

    def stop(self) -> None:
        self.release.set()
        if self._server is not None:
            self.refuse()


class GitDaemon:
    """`git daemon` exporting every repository under `base`, on loopback."""

    def __init__(self, base: Path) -> None:
        self.base = base
        self.port = free_port()
        self._process: subprocess.Popen[bytes] | None = None
        self.start()

    def url(self, name: str) -> str:
        return f"git://127.0.0.1:{self.port}/{name}"

    def start(self) -> None:
        self._process = subprocess.Popen(
            [shutil.which("git") or "git", "daemon", "--reuseaddr", "--export-all", "--listen=127.0.0.1",
             f"--port={self.port}", f"--base-path={self.base}", str(self.base)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        eventually(self._listening, 10, what="git daemon listening")

    def _listening(self) -> bool:
        done = subprocess.run(["git", "ls-remote", self.url("remote.git")], capture_output=True, check=False)
        return done.returncode == 0

    def stop(self) -> None:
        if self._process is not None:
            self._process.terminate()
            self._process.wait(10)
            self._process = None
