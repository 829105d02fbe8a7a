"""`gitops status|history|sync|suspend|resume`: the running agent's admin API.

Owns the client side of the admin API and the human tables; `--json`
prints the API's JSON as is, for scripts. The admin token (if the agent has
one) comes from `--token-file` or `GITOPS_TOKEN`. Must not: reconcile or
read git.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from typing import Any

import httpx

from gitops.access import read_token
from gitops.errors import UserError

__all__ = [
    "status_command",
    "history_command",
    "sync_command",
    "suspend_command",
    "resume_command",
    "render_status",
    "render_history",
]

_TIMEOUT_S = 10.0


def status_command(args: argparse.Namespace) -> int:
    data = _call(args, "GET", "/status")
    print(json.dumps(data, indent=2) if args.json else render_status(data))
    return 0


def history_command(args: argparse.Namespace) -> int:
    data = _call(args, "GET", "/history")
    print(json.dumps(data, indent=2) if args.json else render_history(data.get("entries", [])))
    return 0


def sync_command(args: argparse.Namespace) -> int:
    return _verb(args, "/sync", "sync requested; the agent reconciles now")


def suspend_command(args: argparse.Namespace) -> int:
    return _verb(args, "/suspend", "reconciliation suspended")


def resume_command(args: argparse.Namespace) -> int:
    return _verb(args, "/resume", "reconciliation resumed")


def _verb(args: argparse.Namespace, path: str, done: str) -> int:
    data = _call(args, "POST", path)
    print(json.dumps(data) if args.json else done)
    return 0


def _call(args: argparse.Namespace, method: str, path: str) -> dict[str, Any]:
    agent: str = args.agent
    url = agent.rstrip("/") + path
    try:
        response = httpx.request(method, url, headers=_authorization(args.token_file), timeout=_TIMEOUT_S)
    except httpx.HTTPError as error:
        raise UserError(f"no agent answering at {agent} ({type(error).__name__}); is `gitops run` running?") from None
    try:
        data = response.json()
    except ValueError:
        raise UserError(f"{url}: HTTP {response.status_code}, not a JSON answer") from None
    if response.status_code >= 400:
        raise UserError(f"{url}: {data.get('error', response.reason_phrase)}")
    return data


def _authorization(token_file: str | None) -> dict[str, str]:
    token = read_token(token_file, "--token-file").decode() if token_file else os.environ.get("GITOPS_TOKEN", "").strip()
    return {"Authorization": f"Bearer {token}"} if token else {}


# --- tables ---------------------------------------------------------------------


def render_status(data: dict[str, Any]) -> str:
    ready = next((c for c in data.get("conditions", []) if c["type"] == "Ready"), None)
    lines = [
        f"Status:     {data['status']}" + (f" ({ready['reason']}: {ready['message']})" if ready else ""),
        f"Repository: {data['repo']}  branch {data['branch']}  path {data['path']}",
        f"Watched:    {_short(data.get('watched_revision'))}",
        f"Attempted:  {_short(data.get('last_attempted_revision'))}",
        f"Applied:    {_short(data.get('last_applied_revision'))}",
    ]
    backends = data.get("backends", {})
    if backends:
        lines += ["", _table(["BACKEND", "VERSION", "READY", "REPLICAS", "LAST ERROR"], [
            [name, str(b.get("version") or "-")[:12], f"{b.get('ready', 0)}/{b.get('target_replicas', 0)}",
             _pairs(b.get("replicas", {})), b.get("last_error") or ""]
            for name, b in sorted(backends.items())
        ])]
    endpoints = data.get("endpoints", {})
    if endpoints:
        lines += ["", _table(["ENDPOINT", "ROUTE", "TRAFFIC", "SHADOW"], [
            [name, e.get("route") or "", _percent(e.get("traffic", {})), _percent(e.get("shadow", {}))]
            for name, e in sorted(endpoints.items())
        ])]
    errors = data.get("errors", [])
    if errors:
        lines += ["", "Errors:"] + [f"  {error}" for error in errors]
    return "\n".join(lines)


def render_history(entries: list[dict[str, Any]]) -> str:
    if not entries:
        return "No reconciles recorded yet."
    rows = [
        [
            entry["commit"][:7],
            time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(entry["started_at"])),
            entry["result"],
            f"{entry['duration_s']:.2f}s",
            entry["plan_summary"] + (f"  {entry['errors'][0]}" if entry.get("errors") else ""),
        ]
        for entry in entries
    ]
    return _table(["COMMIT", "STARTED", "RESULT", "DURATION", "PLAN / ERROR"], rows)


def _table(header: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(str(cell)) for cell in column) for column in zip(header, *rows)]
    lines = ["  ".join(str(cell).ljust(width) for cell, width in zip(row, widths)).rstrip() for row in [header, *rows]]
    return "\n".join(lines)


def _short(sha: str | None) -> str:
    return sha[:7] if sha else "-"


def _pairs(counts: dict[str, int]) -> str:
    return " ".join(f"{state}={count}" for state, count in sorted(counts.items())) or "-"


def _percent(weights: dict[str, float]) -> str:
    return " ".join(f"{name}={weight * 100:g}%" for name, weight in sorted(weights.items())) or "-"
