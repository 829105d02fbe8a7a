"""A Hugging Face Hub on 127.0.0.1 for tests: the Hub's HTTP API for repositories a test makes.

Speaks what `hf://` sources use (docs/guides/models.md): a revision's
metadata (`GET /api/models/ORG/NAME/revision/REV?blobs=true`, with `sha`
and `siblings`, each with its size, and `lfs` {sha256, size} for a large
file) and a file at a revision (`GET /ORG/NAME/resolve/REV/PATH`), where REV
is a commit or a branch. Like the Hub, a large ("LFS") file's resolve
answers 302 to a storage URL (`/lfs/SHA256`), which needs no token; both
honour `Range: bytes=N-` (206). With a `token`, the API and resolve answer
401 to a request without `Authorization: Bearer TOKEN`. `cut(data, after)`
breaks the next download of a file after that many bytes (the connection
closes mid-body), for resumption tests; `requests` records every request
(method, path, Range header).

Importing this module sets `HF_ENDPOINT` to `HUB_PORT` on loopback once for
the session, as `tests.support.s3` does for S3: replicas inherit the
environment the session's Ray starts with. `hub_server()` runs it there;
`FakeHub()` alone picks a free port (component tests).
"""

from __future__ import annotations

import contextlib
import hashlib
import http.server
import json
import os
import threading
from collections.abc import Iterator
from urllib.parse import unquote, urlsplit

from tests.support.stack import free_port

__all__ = ["HUB_PORT", "LFS_MIN_BYTES", "FakeHub", "hub_server"]

HUB_PORT = free_port()
os.environ.setdefault("HF_ENDPOINT", f"http://127.0.0.1:{HUB_PORT}")
LFS_MIN_BYTES = 1024  # files this large are served as the Hub serves LFS files


class FakeHub:
    def __init__(self, token: str | None = None, port: int = 0) -> None:
        self.token = token
        self.commits: dict[str, dict[str, dict[str, bytes]]] = {}  # repo -> commit -> files
        self.branches: dict[str, dict[str, str]] = {}  # repo -> branch or tag -> commit
        self.requests: list[tuple[str, str, str | None]] = []
        self._cuts: dict[str, int] = {}
        self._lfs: dict[str, bytes] = {}
        # Each file's hashes, computed once when committed (as the Hub keeps them): sha256, git blob id.
        self._hashes: dict[int, tuple[str, str]] = {}
        hub = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self) -> None:  # noqa: N802 — http.server's name
                hub.requests.append(("GET", self.path, self.headers.get("Range")))
                hub._answer(self)

            def log_message(self, *args: object) -> None:
                pass

        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self._server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"

    # --- what a test makes ---------------------------------------------------------

    def commit(self, repo: str, files: dict[str, bytes], branch: str = "main") -> str:
        """A new commit of `repo` holding `files`, which `branch` now names; its hash."""
        text = json.dumps({path: hashlib.sha256(data).hexdigest() for path, data in sorted(files.items())})
        sha = hashlib.sha1(f"{repo}\n{len(self.commits.get(repo, {}))}\n{text}".encode()).hexdigest()
        self.commits.setdefault(repo, {})[sha] = dict(files)
        self.branches.setdefault(repo, {})[branch] = sha
        for data in files.values():
            self._hashes[id(data)] = (hashlib.sha256(data).hexdigest(),
                                      hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest())
            if len(data) >= LFS_MIN_BYTES:
                self._lfs[self._sha256(data)] = data
        return sha

    def _sha256(self, data: bytes) -> str:
        known = self._hashes.get(id(data))
        return known[0] if known is not None else hashlib.sha256(data).hexdigest()

    def cut(self, data: bytes, after: int) -> None:
        """The next download of the file holding `data` stops after `after` bytes of its body."""
        self._cuts[hashlib.sha256(data).hexdigest()] = after

    def gets(self, suffix: str) -> int:
        """GET requests whose path ends with `suffix` (a file's resolve or its LFS storage)."""
        return sum(1 for method, path, _ in self.requests if method == "GET" and path.split("?")[0].endswith(suffix))

    def start(self) -> FakeHub:
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    # --- the HTTP API ---------------------------------------------------------------

    def _answer(self, handler: http.server.BaseHTTPRequestHandler) -> None:
        path = unquote(urlsplit(handler.path).path)
        if path.startswith("/lfs/"):
            data = self._lfs.get(path.removeprefix("/lfs/"))
            return self._bytes(handler, data) if data is not None else self._json(handler, 404, {})
        if self.token is not None and handler.headers.get("Authorization") != f"Bearer {self.token}":
            return self._json(handler, 401, {"error": "Invalid credentials in Authorization header"})
        parts = path.strip("/").split("/")
        if parts[:2] == ["api", "models"] and len(parts) >= 6 and parts[4] == "revision":
            return self._revision(handler, "/".join(parts[2:4]), "/".join(parts[5:]))
        if len(parts) >= 5 and parts[2] == "resolve":
            return self._resolve(handler, "/".join(parts[:2]), parts[3], "/".join(parts[4:]))
        return self._json(handler, 404, {"error": "Not Found"})

    def _files(self, repo: str, revision: str) -> tuple[str, dict[str, bytes]] | None:
        commit = self.branches.get(repo, {}).get(revision, revision)
        files = self.commits.get(repo, {}).get(commit)
        return None if files is None else (commit, files)

    def _revision(self, handler: http.server.BaseHTTPRequestHandler, repo: str, revision: str) -> None:
        found = self._files(repo, revision)
        if found is None:
            return self._json(handler, 404, {"error": f"Revision Not Found for url: {handler.path}"})
        commit, files = found
        siblings = []
        for name, data in sorted(files.items()):
            sha256, blob_id = self._hashes[id(data)]
            sibling: dict[str, object] = {"rfilename": name, "size": len(data), "blobId": blob_id}
            if len(data) >= LFS_MIN_BYTES:
                sibling["lfs"] = {"sha256": sha256, "size": len(data), "pointerSize": 134}
            siblings.append(sibling)
        self._json(handler, 200, {"id": repo, "modelId": repo, "sha": commit, "siblings": siblings})

    def _resolve(self, handler: http.server.BaseHTTPRequestHandler, repo: str, revision: str, name: str) -> None:
        found = self._files(repo, revision)
        data = None if found is None else found[1].get(name)
        if data is None:
            return self._json(handler, 404, {"error": "Entry not found"})
        if len(data) >= LFS_MIN_BYTES:
            handler.send_response(302)
            handler.send_header("Location", f"/lfs/{self._sha256(data)}")
            handler.send_header("Content-Length", "0")
            handler.end_headers()
            return None
        return self._bytes(handler, data)

    def _bytes(self, handler: http.server.BaseHTTPRequestHandler, data: bytes) -> None:
        start = 0
        wanted = handler.headers.get("Range")
        if wanted and wanted.startswith("bytes=") and wanted.endswith("-"):
            start = min(int(wanted[len("bytes="):-1]), len(data))
        body = data[start:]
        handler.send_response(206 if start else 200)
        if start:
            handler.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
        handler.send_header("Content-Length", str(len(body)))
        handler.send_header("Accept-Ranges", "bytes")
        handler.end_headers()
        cut = self._cuts.pop(self._sha256(data), None)
        if cut is not None:
            handler.wfile.write(body[:cut])
            handler.wfile.flush()
            handler.close_connection = True
            with contextlib.suppress(OSError):
                handler.connection.shutdown(2)
            return
        handler.wfile.write(body)

    def _json(self, handler: http.server.BaseHTTPRequestHandler, status: int, body: object) -> None:
        data = json.dumps(body).encode()
        handler.send_response(status)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Content-Length", str(len(data)))
        handler.end_headers()
        handler.wfile.write(data)


@contextlib.contextmanager
def hub_server(token: str | None = None) -> Iterator[FakeHub]:
    """The fake Hub on `HUB_PORT` (this session's HF_ENDPOINT) while the block runs."""
    hub = FakeHub(token, HUB_PORT).start()
    try:
        yield hub
    finally:
        hub.stop()
