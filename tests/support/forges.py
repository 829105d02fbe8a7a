"""A loopback HTTP server posing as the GitHub and GitLab pull-request APIs, for promotion tests.

`Forge` records every request (method, path, query, headers, JSON body) and
answers as each API documents it: GitHub's `GET /repos/{owner}/{repo}/pulls`
lists open pull requests (filtered by `head` and `base`), `POST` creates one
(201, with `number` and `html_url`), `PATCH .../pulls/{number}` updates it;
GitLab's `GET /projects/:id/merge_requests` lists them (by `source_branch`,
`target_branch`, `state`), `POST` creates one (201, `iid` and `web_url`),
`PUT .../merge_requests/:iid` updates it. It keeps the requests it created,
so a second promotion finds and updates the first one.
"""

from __future__ import annotations

import json
import re
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

__all__ = ["Forge", "Call"]


@dataclass(frozen=True)
class Call:
    method: str
    path: str  # decoded
    raw_path: str  # as sent
    query: dict[str, str]
    headers: dict[str, str]  # names lower-cased
    body: Any = None


@dataclass
class Forge:
    kind: str  # github | gitlab
    calls: list[Call] = field(default_factory=list)
    opened: list[dict[str, Any]] = field(default_factory=list)

    def __post_init__(self) -> None:
        forge = self

        class Handler(BaseHTTPRequestHandler):
            def _serve(self) -> None:
                parts = urlsplit(self.path)
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                call = Call(
                    self.command, unquote(parts.path), parts.path,
                    {k: v[0] for k, v in parse_qs(parts.query).items()},
                    {k.lower(): v for k, v in self.headers.items()},
                    json.loads(raw) if raw else None,
                )
                status, answer = forge._answer(call)
                forge.calls.append(call)
                body = json.dumps(answer).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_GET = do_POST = do_PATCH = do_PUT = _serve  # noqa: N815 — http.server's naming

            def log_message(self, format: str, *args: object) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def _answer(self, call: Call) -> tuple[int, Any]:
        if self.kind == "github":
            return self._github(call)
        return self._gitlab(call)

    def _github(self, call: Call) -> tuple[int, Any]:
        found = re.fullmatch(r"/repos/([^/]+)/([^/]+)/pulls(?:/(\d+))?", call.path)
        if found is None:
            return 404, {"message": "Not Found"}
        owner = found.group(1)
        if call.method == "GET":
            head, base = call.query.get("head"), call.query.get("base")
            return 200, [p for p in self.opened if f"{owner}:{p['head']['ref']}" == head and p["base"]["ref"] == base]
        if call.method == "POST":
            if not {"title", "head", "base"} <= set(call.body or {}):
                return 422, {"message": "Validation Failed"}
            number = len(self.opened) + 1
            pull = {
                "number": number, "html_url": f"https://github.example/{owner}/pull/{number}",
                "head": {"ref": call.body["head"]}, "base": {"ref": call.body["base"]},
                "title": call.body["title"], "body": call.body.get("body"),
            }
            self.opened.append(pull)
            return 201, pull
        if call.method == "PATCH" and found.group(3):
            pull = next(p for p in self.opened if p["number"] == int(found.group(3)))
            pull.update({k: v for k, v in (call.body or {}).items() if k in ("title", "body")})
            return 200, pull
        return 405, {"message": "Method Not Allowed"}

    def _gitlab(self, call: Call) -> tuple[int, Any]:
        found = re.fullmatch(r"/api/v4/projects/([^/]+)/merge_requests(?:/(\d+))?", call.raw_path)
        if found is None:
            return 404, {"message": "404 Not Found"}
        if call.method == "GET":
            q = call.query
            return 200, [
                m for m in self.opened
                if m["source_branch"] == q.get("source_branch") and m["target_branch"] == q.get("target_branch")
                and q.get("state") == "opened"
            ]
        if call.method == "POST":
            if not {"source_branch", "target_branch", "title"} <= set(call.body or {}):
                return 400, {"message": "source_branch, target_branch and title are required"}
            iid = len(self.opened) + 1
            request = {**call.body, "iid": iid, "web_url": f"https://gitlab.example/merge_requests/{iid}"}
            self.opened.append(request)
            return 201, request
        if call.method == "PUT" and found.group(2):
            request = next(m for m in self.opened if m["iid"] == int(found.group(2)))
            request.update({k: v for k, v in (call.body or {}).items() if k in ("title", "description")})
            return 200, request
        return 405, {"message": "405 Method Not Allowed"}
