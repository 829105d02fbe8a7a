"""`gitops status|history|sync|suspend|resume|rollback|promote|abort|audit|wait|logs`: the running agent's admin API.

Owns the client side of the admin API and the human tables: `/status` is
parsed into the agent's own `AgentStatus` model before it is drawn; `--json`
prints the API's JSON as is, for scripts (JSON escapes control characters).
Every piece of text the agent sends (replica exceptions, git errors, names)
reaches the terminal through `gitops.printable`: escaped, line breaks of
multi-line text kept. The agent is found as
`gitops.admin.address.resolve` says (`--agent`, `GITOPS_AGENT`, the address
file a running agent wrote in its state dir); the admin token (if the agent
has one) comes from `--token-file` or `GITOPS_TOKEN`. `status --exit-code`
exits as terraform's plan does: 0 Synced, 2 any other status, 1 an error;
`wait` polls the status until it is the one asked for (0), or the time is
up or only a new commit could change it (2). `logs` prints a backend's
replicas' own output (`/logs/BACKEND`), each line after its replica's id,
from every node; `--follow` asks again every second from where each left off.
The verbs that change the agent send `--reason` with the call, and history
records it with who asked; `history --actor NAME` shows NAME's actions and
`audit` prints the whole trail as JSON lines (`/audit`).
Must not: reconcile or read git.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import urllib.parse
from pathlib import Path
from typing import Any, Callable

import httpx
from pydantic import ValidationError

from gitops.admin.auth.access import read_token
from gitops.admin.address import AGENT_ENV, AgentAddress, resolve
from gitops.status.environment_view import environment_lines
from gitops.errors import UsageError, UserError
from gitops.printable import printable, printable_lines
from gitops.status.backend_health import Serving
from gitops.status.rollup import AgentStatus, SyncStatus

__all__ = [
    "status_command",
    "history_command",
    "audit_command",
    "render_actions",
    "render_ejections",
    "sync_command",
    "suspend_command",
    "resume_command",
    "rollback_command",
    "promote_command",
    "abort_command",
    "wait_command",
    "logs_command",
    "parse_duration",
    "trace_command",
    "render_status",
    "render_trace",
    "render_history",
]

_TIMEOUT_S = 10.0
_WAIT_POLL_S = 0.5
EXIT_SYNCED, EXIT_ERROR, EXIT_NOT_SYNCED = 0, 1, 2


def status_command(args: argparse.Namespace) -> int:
    data = _call(args, "GET", "/status")
    status = _agent_status(_agent(args).url, data)
    print(json.dumps(data, indent=2) if args.json else render_status(status))
    if args.exit_code and status.status is not SyncStatus.SYNCED:
        return EXIT_NOT_SYNCED
    return EXIT_SYNCED


def wait_command(args: argparse.Namespace, clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep) -> int:
    """Poll `/status` until it says `--for`; an agent not answering yet is waited for too."""
    wanted = _wanted_status(args.wanted)
    deadline = clock() + args.timeout
    seen: AgentStatus | None = None
    unreachable: UserError | None = None
    while True:
        try:
            seen = _agent_status(_agent(args).url, _call(args, "GET", "/status"))
            unreachable = None
        except _Unreachable as error:
            unreachable = error
        if seen is not None and unreachable is None:
            if seen.status is wanted and _applied(seen, args.revision):
                print(_one_line(seen))
                return EXIT_SYNCED
            stalled = seen.condition("Stalled")
            if stalled is not None and stalled.status:
                print(f"gitops wait: {_one_line(seen)}; only a new commit changes that", file=sys.stderr)
                return EXIT_NOT_SYNCED
        if clock() >= deadline:
            break
        sleep(_WAIT_POLL_S)
    if unreachable is not None:
        raise unreachable
    now = _one_line(seen) if seen is not None else "no status yet"
    what = wanted.value + (f" with {args.revision} applied" if args.revision else "")
    applied = f"; applied {_short(seen.last_applied_revision)}" if seen is not None and args.revision else ""
    print(f"gitops wait: not {what} after {args.timeout:g}s: {now}{applied}", file=sys.stderr)
    return EXIT_NOT_SYNCED


_FOLLOW_EVERY_S = 1.0
_DURATION_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


def logs_command(args: argparse.Namespace, sleep: Callable[[float], None] = time.sleep) -> int:
    """The replicas' own output: the last lines (or those since `--since`), then with `--follow`
    what comes; with them, the replicas that failed to start and their errors. `--previous`: the
    replicas replaced since the controller started (before a restart), how each ended and the
    last lines each wrote (where they could be read before it was killed). An answer with
    nothing to print says why, on stderr; exit 1 when no replica ever ran."""
    since = time.time() - parse_duration(args.since) if args.since else None
    started = time.time()
    cursors: dict[str, dict[str, int]] = {}
    said_missing: set[str] = set()
    said_ended: set[str] = set()
    printed = False
    first = True
    path = "/logs/" + urllib.parse.quote(args.backend, safe="")
    while True:
        query = urllib.parse.urlencode({
            **({"since": repr(since)} if since is not None else {}), "cursors": json.dumps(cursors),
        })
        outputs = _call(args, "GET", f"{path}?{query}")["replicas"]
        live = [output for output in outputs if not output.get("ended")]
        ended = [output for output in outputs if output.get("ended")]
        shown_ended = ended if args.previous else [o for o in ended if o["ended"] in _START_FAILURES]
        for output in shown_ended:
            replica = output["replica_id"]
            if replica in said_ended:
                continue
            said_ended.add(replica)
            lines = output["err"] or ("",)
            print(printable(f"{replica} | {output['ended']}: {lines[0]}"), flush=True)
            for line in lines[1:]:
                print(printable(f"{replica} | {line}"), flush=True)
            for line in output.get("last_output", ()) if args.previous else ():
                print(printable(f"{replica} | {line}"), flush=True)
            printed = True
        for output in [] if args.previous else live:
            replica = output["replica_id"]
            for line in [*output["out"], *output["err"]]:
                print(printable(f"{replica} | {line}"), flush=True)
                printed = True
            if output["missing"]:
                if replica not in said_missing:
                    print(printable(f"gitops logs: {replica}: {output['missing']}"), file=sys.stderr)
                said_missing.add(replica)
            else:
                cursors[replica] = output["cursor"]
        if first and not printed and not said_missing:
            print(printable(f"gitops logs: {_why_empty(args, live, ended)}"), file=sys.stderr)
            if not args.follow and not args.previous and not live and not ended:
                return 1
        first = False
        if not args.follow:
            return 0
        # A replica started while following shows from when the following began.
        since = started if since is None else since
        try:
            sleep(_FOLLOW_EVERY_S)
        except KeyboardInterrupt:
            return 0


# How a replica that never served ended (vocabulary.control.status.ReplicaFailure.ending).
_START_FAILURES = frozenset({"failed to start", "startup_timeout"})


def _why_empty(args: argparse.Namespace, live: list[dict[str, Any]], ended: list[dict[str, Any]]) -> str:
    """Why `gitops logs` has nothing to print, in one line."""
    backend = args.backend
    if args.previous:
        window = f"in the last {args.since}" if args.since else "since the controller started"
        return (f"no replica of {backend} was replaced {window} (it keeps the last 100 "
                "replaced); without --previous: the replicas running now")
    if not live:
        if ended:
            return (f"no replica of {backend} runs now; {len(ended)} replaced since the controller started "
                    "(--previous shows how each ended)")
        return f"no replica of {backend} has run since the controller started (scaled to zero, or none started yet)"
    window = f"in the last {args.since}" if args.since else "yet"
    replicas = "its replica" if len(live) == 1 else f"its {len(live)} replicas"
    return f"{backend}: {replicas} wrote nothing {window}"


def parse_duration(text: str) -> float:
    """`90`, `90s`, `5m`, `2h`, `1d` in seconds; UsageError otherwise."""
    unit = text[-1:] if text[-1:] in _DURATION_UNITS else "s"
    number = text[:-1] if text[-1:] in _DURATION_UNITS else text
    try:
        seconds = float(number) * _DURATION_UNITS[unit]
    except ValueError:
        raise UsageError(f"--since {text}: not a duration (e.g. 30s, 5m, 2h)") from None
    if seconds < 0:
        raise UsageError(f"--since {text}: a duration cannot be negative")
    return seconds


def _applied(status: AgentStatus, revision: str | None) -> bool:
    """Whether `revision` (a full or abbreviated sha; None: any) is the applied commit."""
    applied = status.last_applied_revision or ""
    return revision is None or (len(revision) >= 4 and applied.startswith(revision.lower()))


def _wanted_status(name: str) -> SyncStatus:
    for status in SyncStatus:
        if status.value.lower() == name.lower():
            return status
    known = ", ".join(status.value.lower() for status in SyncStatus)
    raise UsageError(f"--for {name}: not a status the agent shows ({known})")


def _one_line(status: AgentStatus) -> str:
    ready = status.condition("Ready")
    detail = f" ({ready.reason}: {ready.message})" if ready else ""
    return f"{status.status.value}{detail}"


def history_command(args: argparse.Namespace) -> int:
    actor = getattr(args, "actor", None)
    data = _call(args, "GET", "/history" + (f"?actor={urllib.parse.quote(actor)}" if actor else ""))
    if args.json:
        print(json.dumps(data, indent=2))
    elif actor:
        print(render_actions(data.get("actions", [])) if data.get("actions") else printable(f"No actions by {actor}."))
    else:
        print(render_history(data.get("entries", [])))
        if data.get("actions"):
            print("\n" + render_actions(data["actions"]))
        if data.get("ejections"):
            print("\n" + render_ejections(data["ejections"]))
    return 0


def render_ejections(ejections: list[dict[str, Any]]) -> str:
    """The replicas proxies ejected as outliers, newest first: when, which, the how-many-th time, why, how long."""
    rows = [
        [
            time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ejection["at"])),
            ejection["backend"], ejection["replica_id"], str(ejection["count"]), ejection["reason"],
            f"{max(0, round(ejection.get('back_in_s', 0)))} s",
        ]
        for ejection in ejections
    ]
    return printable_lines(_table(["EJECTED AT", "BACKEND", "REPLICA", "EJECTION", "REASON", "OUT FOR"], rows))


def render_actions(actions: list[dict[str, Any]]) -> str:
    """The audit trail, newest first: when, who, from where, what, why."""
    rows = [
        [
            time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(action["at"])),
            action["actor"], action["peer"] or "-",
            action["verb"] + (f" ({action['detail']})" if action.get("detail") else "")
            + ("" if action.get("result") == "accepted" else f", {action.get('result')}"),
            action.get("reason") or "",
        ]
        for action in actions
    ]
    return printable_lines(_table(["AT", "ACTOR", "FROM", "ACTION", "REASON"], rows))


def audit_command(args: argparse.Namespace) -> int:
    """The audit trail as the agent exports it: one JSON object a line, oldest first."""
    agent = _agent(args)
    url = agent.url.rstrip("/") + f"/audit?after={int(args.after)}"
    try:
        response = httpx.get(url, headers=_authorization(args.token_file), timeout=_TIMEOUT_S)
    except httpx.HTTPError as error:
        raise _Unreachable(f"no agent answering at {agent.url} ({type(error).__name__})") from None
    if response.status_code >= 400:
        try:
            message = response.json().get("error", response.reason_phrase)
        except ValueError:
            message = response.reason_phrase
        raise UserError(f"{url}: {message}")
    sys.stdout.write(response.text)
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


def _with_reason(args: argparse.Namespace, path: str) -> str:
    """`path` with the `--reason` the user gave, if any."""
    reason = getattr(args, "reason", "") or ""
    if not reason:
        return path
    return path + ("&" if "?" in path else "?") + "reason=" + urllib.parse.quote(reason)


def sync_command(args: argparse.Namespace) -> int:
    if getattr(args, "override_window", False):
        data = _call(args, "POST", _with_reason(args, "/sync?override_window=1"))
        if args.json:
            print(json.dumps(data, indent=2))
        else:
            print(printable(f"sync requested past any sync window (recorded in history, by {data.get('by', '?')})"))
        return 0
    return _verb(args, "/sync", "sync requested; the agent reconciles now")


def suspend_command(args: argparse.Namespace) -> int:
    return _verb(args, "/suspend", "reconciliation suspended")


def resume_command(args: argparse.Namespace) -> int:
    return _verb(args, "/resume", "reconciliation resumed")


def rollback_command(args: argparse.Namespace) -> int:
    path = "/rollback" + (f"?commit={urllib.parse.quote(args.commit)}" if args.commit else "")
    data = _call(args, "POST", _with_reason(args, path))
    held = ", ".join(sha[:7] for sha in data["held"])
    print(json.dumps(data) if args.json else printable(
        f"rolling back to {data['good'][:7]}; holding {held} until a newer commit"))
    return 0


def promote_command(args: argparse.Namespace) -> int:
    return _by_hand(args, "promote")


def abort_command(args: argparse.Namespace) -> int:
    return _by_hand(args, "abort")


def _by_hand(args: argparse.Namespace, verb: str) -> int:
    """A running rollout promoted or aborted (`POST /rollouts/ENDPOINT/VERB`), as the status page does."""
    data = _call(args, "POST", _with_reason(args, f"/rollouts/{urllib.parse.quote(args.endpoint, safe='')}/{verb}"))
    print(json.dumps(data) if args.json else printable(data["message"]))
    return 0


def _verb(args: argparse.Namespace, path: str, done: str) -> int:
    data = _call(args, "POST", _with_reason(args, path))
    print(json.dumps(data) if args.json else done)
    return 0


class _Unreachable(UserError):
    """No agent answered at the address."""


def _agent(args: argparse.Namespace) -> AgentAddress:
    found: AgentAddress | None = getattr(args, "agent_address", None)
    if found is None or found.source == "the default":
        # Looked for again until found: an agent starting up writes its address a moment later.
        found = args.agent_address = resolve(args.agent, os.environ, Path.cwd())
    return found


def _call(args: argparse.Namespace, method: str, path: str) -> dict[str, Any]:
    agent = _agent(args)
    url = agent.url.rstrip("/") + path
    try:
        response = httpx.request(method, url, headers=_authorization(args.token_file), timeout=_TIMEOUT_S)
    except httpx.HTTPError as error:
        raise _Unreachable(
            f"no agent answering at {agent.url} (from {agent.source}; {type(error).__name__}); is `gitops run` "
            f"running? Point at it with --agent URL or {AGENT_ENV}=URL"
        ) from None
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
        *environment_lines(status.environment),
    ]
    if status.backends:
        lines += ["", _table(["BACKEND", "VERSION", "COMMIT", "READY", "REPLICAS", *_SERVING, "LAST ERROR"], [
            # The whole version, as plan and the JSON show it (`a1669410361a+mfcaf984a` with models).
            [name, b.version or "-", _short(b.commit), f"{b.ready}/{b.target_replicas}", _pairs(b.replicas),
             *_serving(b.serving), b.last_error or ""]
            for name, b in sorted(status.backends.items())
        ])]
        lines += [f"Latest exception of {name}: {b.latest_exception}"
                  for name, b in sorted(status.backends.items()) if b.latest_exception and b.serving.errors]
        lines += [f"{name}: {line}" for name, b in sorted(status.backends.items()) for line in b.staging]
        lines += [f"{name}: {b.pending}" for name, b in sorted(status.backends.items()) if b.pending]
        lines += [f"{name}: {line}" for name, b in sorted(status.backends.items()) for line in b.ejections]
    if status.endpoints:
        lines += ["", _table(["ENDPOINT", "ROUTE", "TRAFFIC", "SHADOW", *_SERVING], [
            [name, e.route, _percent(e.traffic), _percent(e.shadow), *_serving(e.serving)]
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
    if status.automation:
        looks = status.automation.get("automations", [])
        lines += ["", *(f"Automation {look['automation']}: {look['result']}: {look['detail']}" for look in looks),
                  *(f"automation.toml: {error}" for error in status.automation.get("errors", []))]
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


# Counted over WINDOW seconds: an endpoint's last minute, a backend's since its
# current version came to run (shorter just after a rollout), so the two can differ.
_SERVING = ["REQ/S", "5XX", "P99", "WINDOW"]


def _serving(serving: Serving) -> list[str]:
    window = f"{serving.window_s:.0f}s"
    if not serving.requests:
        return ["0", "-", "-", window]
    p99 = f"{serving.p99_s * 1000:.0f}ms" if serving.p99_s < 1 else f"{serving.p99_s:g}s"
    return [f"{serving.rate():.1f}", f"{serving.error_share():.0%}", p99, window]


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
