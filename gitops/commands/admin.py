"""`gitops status|history|sync|suspend|resume|rollback`: the running agent's admin API.

Owns the client side of the admin API and the human tables: `/status` is
parsed into the agent's own `AgentStatus` model before it is drawn; `--json`
prints the API's JSON as is, for scripts (JSON escapes control characters).
Every piece of text the agent sends (replica exceptions, git errors, names)
reaches the terminal through `gitops.printable`: escaped, line breaks of
multi-line text kept. The admin token (if the agent has
one) comes from `--token-file` or `GITOPS_TOKEN`. Must not: reconcile or
read git.
"""

from __future__ import annotations

import argparse
import json
import os
import time
import urllib.parse
from typing import Any

import httpx
from pydantic import ValidationError

from gitops.access import read_token
from gitops.errors import UserError
from gitops.printable import printable, printable_lines
from gitops.status import AgentStatus

__all__ = [
    "status_command",
    "history_command",
    "sync_command",
    "suspend_command",
    "resume_command",
    "rollback_command",
    "trace_command",
    "render_status",
    "render_trace",
    "render_history",
]

_TIMEOUT_S = 10.0


def status_command(args: argparse.Namespace) -> int:
    data = _call(args, "GET", "/status")
    print(json.dumps(data, indent=2) if args.json else render_status(_agent_status(args.agent, data)))
    return 0


def history_command(args: argparse.Namespace) -> int:
    data = _call(args, "GET", "/history")
    print(json.dumps(data, indent=2) if args.json else render_history(data.get("entries", [])))
    return 0


def trace_command(args: argparse.Namespace) -> int:
    data = _call(args, "GET", "/traces?commit=" + urllib.parse.quote(args.commit))
    traces = data.get("traces", [])
    if args.json:
        print(json.dumps(data, indent=2))
    elif not traces:
        print(printable(f"no apply trace of {args.commit} is kept (the agent keeps its last 50 applies since it started)"))
    else:
        print("\n\n".join(render_trace(trace) for trace in traces))
    return 0


def render_trace(spans: list[dict[str, Any]]) -> str:
    """One apply trace as an indented tree: offset from its start, duration, name, what it was about."""
    start = spans[0]["start"] if spans else 0.0
    depth: list[int] = []
    lines = []
    for span in spans:
        parent = span.get("parent")
        depth.append(0 if parent is None else depth[parent] + 1)
        extra = {k: v for k, v in span["attributes"].items() if k not in ("gitops.commit",)}
        about = " ".join(f"{k.removeprefix('gitops.')}={v}" for k, v in extra.items())
        lines.append(printable(
            f"{span['start'] - start:8.3f}s {span['end'] - span['start']:8.3f}s  {'  ' * depth[-1]}{span['name']}"
            + (f"  {about}" if about else "")
        ))
    commit = spans[0]["attributes"].get("gitops.commit", "") if spans else ""
    return printable(f"commit {commit}") + "\n   start     took   span\n" + "\n".join(lines)


def sync_command(args: argparse.Namespace) -> int:
    return _verb(args, "/sync", "sync requested; the agent reconciles now")


def suspend_command(args: argparse.Namespace) -> int:
    return _verb(args, "/suspend", "reconciliation suspended")


def resume_command(args: argparse.Namespace) -> int:
    return _verb(args, "/resume", "reconciliation resumed")


def rollback_command(args: argparse.Namespace) -> int:
    path = "/rollback" + (f"?commit={urllib.parse.quote(args.commit)}" if args.commit else "")
    data = _call(args, "POST", path)
    held = ", ".join(sha[:7] for sha in data["held"])
    print(json.dumps(data) if args.json else printable(
        f"rolling back to {data['good'][:7]}; holding {held} until a newer commit"))
    return 0


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


def _agent_status(agent: str, data: dict[str, Any]) -> AgentStatus:
    try:
        return AgentStatus.model_validate(data)
    except ValidationError as error:
        raise UserError(f"{agent}/status: not an agent status ({error.error_count()} problems); "
                        "is the agent the same version as this command?") from None


def render_status(status: AgentStatus) -> str:
    ready = status.condition("Ready")
    lines = [
        f"Status:     {status.status.value}" + (f" ({ready.reason}: {ready.message})" if ready else ""),
        f"Repository: {status.repo}  branch {status.branch}  path {status.path}",
        f"Watched:    {_short(status.watched_revision)}",
        f"Attempted:  {_short(status.last_attempted_revision)}",
        f"Applied:    {_short(status.last_applied_revision)}",
    ]
    if status.backends:
        lines += ["", _table(["BACKEND", "VERSION", "READY", "REPLICAS", "LAST ERROR"], [
            [name, (b.version or "-")[:12], f"{b.ready}/{b.target_replicas}", _pairs(b.replicas), b.last_error or ""]
            for name, b in sorted(status.backends.items())
        ])]
    if status.endpoints:
        lines += ["", _table(["ENDPOINT", "ROUTE", "TRAFFIC", "SHADOW"], [
            [name, e.route, _percent(e.traffic), _percent(e.shadow)]
            for name, e in sorted(status.endpoints.items())
        ])]
    if status.rollouts:
        lines += ["", _table(["ROLLOUT", "PHASE", "STEP", "WEIGHTS", "CHECKS"], [
            [name, r.phase, _step_bar(r.step, r.passed, len(r.steps)), _percent(r.weights), "; ".join(r.checks) or "-"]
            for name, r in sorted(status.rollouts.items())
        ])]
    if status.proxies:
        lines += ["", _table(["PROXY", "STATE", "ADDRESS", "RESTARTS", "LAST ERROR"], [
            [f"{p.node[:12]}:{p.worker}", p.state, p.address or "-", str(p.restarts), p.last_error]
            for p in sorted(status.proxies.values(), key=lambda p: (p.node, p.worker))
        ])]
    if status.quarantine:
        held = ", ".join(_short(sha) for sha in status.quarantine.get("held", []))
        lines += ["", f"Quarantined: {held} (rolled back to {_short(status.quarantine.get('good'))}, "
                      f"{status.quarantine.get('reason')}; lifted by a newer commit)"]
    failing = _failing_notifications(status.notifications)
    if failing:
        lines += ["", "Notifications failing:"] + [f"  {line}" for line in failing]
    if status.errors:
        lines += ["", "Errors:"] + [f"  {line}" for error in status.errors for line in error.split("\n")]
    return printable_lines("\n".join(lines))


def _step_bar(step: int, passed: int, steps: int) -> str:
    """`[##>.] 3/4`: steps passed, the one holding, the ones to come."""
    marks = "#" * passed + (">" if step else "") + "." * max(0, steps - passed - (1 if step else 0))
    return f"[{marks}] {step or passed}/{steps}"


def _failing_notifications(health: dict[str, dict[str, Any]]) -> list[str]:
    """A line per provider whose deliveries failed or were dropped, with its last failure."""
    lines = []
    for name, counts in sorted(health.items()):
        if not counts.get("failed") and not counts.get("dropped"):
            continue
        last = counts.get("last_failure") or {}
        detail = f"; last: {last.get('event')} {_short(last.get('commit'))}: {last.get('error')}" if last else ""
        lines.append(f"{name} ({counts.get('type')}): {counts.get('failed', 0)} failed, "
                     f"{counts.get('dropped', 0)} dropped, {counts.get('delivered', 0)} delivered{detail}")
    return lines


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
    return printable_lines(_table(["COMMIT", "STARTED", "RESULT", "DURATION", "PLAN / ERROR"], rows))


def _table(header: list[str], rows: list[list[str]]) -> str:
    """Columns of one-line cells: a cell's line breaks and controls are escaped first."""
    rows = [[printable(str(cell)) for cell in row] for row in rows]
    widths = [max(len(str(cell)) for cell in column) for column in zip(header, *rows)]
    lines = ["  ".join(str(cell).ljust(width) for cell, width in zip(row, widths)).rstrip() for row in [header, *rows]]
    return "\n".join(lines)


def _short(sha: str | None) -> str:
    return sha[:7] if sha else "-"


def _pairs(counts: dict[str, int]) -> str:
    return " ".join(f"{state}={count}" for state, count in sorted(counts.items())) or "-"


def _percent(weights: dict[str, float]) -> str:
    return " ".join(f"{name}={weight * 100:g}%" for name, weight in sorted(weights.items())) or "-"
