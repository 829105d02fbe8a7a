"""The chaos soak's pure core: the fault schedule, what a failed request is explained by,
the memory slopes, the verdict and the docs/reports/soak.md table.

Owns: the seeded random schedule (a fault every 20-60 s, the kinds taken in
shuffled rounds so every kind comes up), the documented cases a failed
request may be explained by (`explain`: which fault, and why, or None), the
growth of each component's anonymous memory (and PSS) in MB/hour (a slope per process, pooled
over the processes a role had: a restarted process starts a new series), and
the verdict and markdown of a finished soak. `bench.soak` does every I/O;
nothing here reads a clock, a process or a socket.
"""

from __future__ import annotations

import enum
import random
from collections import defaultdict
from dataclasses import dataclass, field

__all__ = [
    "FaultKind", "Traffic", "Planned", "Injected", "Failure", "Sample", "Slope", "Soak",
    "schedule", "explain", "slope", "verdict", "render", "ROLES", "SLOPE_BOUND_MB_PER_H",
    "MIN_SLOPE_SPAN_S", "WARMUP_S",
]


class FaultKind(str, enum.Enum):
    REPLICA_KILL = "kill -9 a replica"
    PROXY_WORKER_KILL = "kill -9 a proxy worker"
    CONTROLLER_KILL = "kill -9 the controller"
    AGENT_KILL = "kill -9 the agent (restarted)"
    REPLICA_STOP = "SIGSTOP a replica, then SIGCONT"
    GIT_REFUSE = "git remote refuses"
    GIT_STALL = "git remote hangs"
    GIT_GARBAGE = "git remote answers garbage"
    BAD_COMMIT = "bad commit (missing import), then its revert"
    ROLLING_UPDATE = "rolling update (version bump)"
    GCS_RESTART = "Ray GCS killed and restarted (Redis)"
    STATE_DIR_FULL = "state dir's filesystem full"


class Traffic(str, enum.Enum):
    PLAIN = "plain"  # GET /plain
    STREAM = "stream"  # GET /relay/stream, server-sent events read to the end
    WEBSOCKET = "websocket"  # a session on /chat/ws: greeting, echoes, close
    HANDLE = "handle"  # GET /relay: the relay backend calls `plain` through a handle


# Faults held for a while before they are undone (SIGSTOP, a broken remote, a full disk).
HELD = {FaultKind.REPLICA_STOP, FaultKind.GIT_REFUSE, FaultKind.GIT_STALL, FaultKind.GIT_GARBAGE,
        FaultKind.STATE_DIR_FULL}
HOLD_S = (10.0, 30.0)
GAP_S = (20.0, 60.0)


@dataclass(frozen=True)
class Planned:
    at: float  # seconds after the load began
    kind: FaultKind
    hold_s: float = 0.0  # how long a held fault lasts (0 for the others)


def schedule(seed: int, duration_s: float, kinds: list[FaultKind], first_at: float = 15.0,
             gap_s: tuple[float, float] = GAP_S) -> list[Planned]:
    """Faults from `first_at` until `duration_s`, one every `gap_s` (uniform), seeded.

    Kinds are dealt in rounds: each round is every kind once, shuffled, so a
    long soak meets every kind and a short one meets different kinds.
    """
    if not kinds:
        return []
    rng = random.Random(seed)
    planned: list[Planned] = []
    deck: list[FaultKind] = []
    at = first_at
    while at < duration_s:
        if not deck:
            deck = list(kinds)
            rng.shuffle(deck)
        kind = deck.pop()
        hold = round(rng.uniform(*HOLD_S), 1) if kind in HELD else 0.0
        planned.append(Planned(round(at, 1), kind, hold))
        at += rng.uniform(*gap_s)
    return planned


@dataclass(frozen=True)
class Injected:
    """A fault as it happened: `at` the injection, `released` when a held fault was undone
    (the kill itself for the others), `recovered` when the cluster was whole again (None: never)."""
    planned: Planned
    at: float
    released: float
    recovered: float | None
    note: str = ""

    @property
    def kind(self) -> FaultKind:
        return self.planned.kind

    @property
    def recovery_s(self) -> float | None:
        return None if self.recovered is None else round(self.recovered - self.released, 2)


@dataclass(frozen=True)
class Failure:
    """One request (or stream, or WebSocket session) that did not end as it should."""
    traffic: Traffic
    sent: float  # seconds after the load began
    ended: float
    kind: str  # "status 504", "refused", "reset", "timeout", "cut" (a stream or session ended early), "other"
    detail: str = ""


# The grace after a fault's window during which its documented failures may still land:
# a client's keep-alive connection to a killed proxy worker fails on its next use.
GRACE_S = 2.0
# How long a request to a stopped replica may wait before the proxy answers it:
# the soak's endpoints time out after 5 s, and a stall is detected on the next check.
STALL_ANSWER_S = 12.0


def _in_flight(failure: Failure, at: float) -> bool:
    return failure.sent <= at + 0.05 and failure.ended >= at - 0.05


def explain(failure: Failure, faults: list[Injected]) -> tuple[Injected, str] | None:
    """The fault whose documented case covers `failure`, and which case (None: unexplained).

    The documented cases (docs/reports/soak.md repeats them):
    - a request, stream or session in flight on a process killed by kill -9
      (a replica, a proxy worker): the process had accepted it, its answer died with it;
    - a handle call sent to a replica killed moments before, before the caller
      learned of its death: it raises `HandleError` (ray_gitops.serving), which the
      soak's relay answers 502, and the handle leaves the replica out from then on;
    - after a proxy worker's kill and until the cluster is whole again: a
      refused or reset connection, or the restarted worker's 503 before its
      first route table (docs/reference/http.md);
    - a request held by a SIGSTOPped replica: answered 504 by the proxy once
      the replica counts as stalled (docs/reference/http.md), or its stream or session
      cut or timed out while the replica could not answer; a handle call it
      held raises `HandleError` when the controller replaces it, which the
      soak's relay answers 502.
    Everything else (controller, agent, git, GCS, commits, a full disk) has
    no documented failure: the data plane must not notice.
    """
    for fault in faults:
        end = (fault.recovered if fault.recovered is not None else fault.released + 60.0) + GRACE_S
        if fault.kind in (FaultKind.REPLICA_KILL, FaultKind.PROXY_WORKER_KILL) and _in_flight(failure, fault.at):
            return fault, "in flight on the killed process"
        if fault.kind is FaultKind.REPLICA_KILL and failure.traffic is Traffic.HANDLE and (
            failure.kind == "status 502" and fault.at <= failure.sent <= fault.at + GRACE_S
        ):
            return fault, "a handle call that met the replica just killed (HandleError; the handle then drops it)"
        if fault.kind is FaultKind.PROXY_WORKER_KILL and fault.at <= failure.sent <= end and (
            failure.kind in ("refused", "reset", "status 503")
        ):
            return fault, "connection to the killed worker, or its 503 before its first route table"
        if fault.kind is FaultKind.REPLICA_STOP:
            held_until = fault.released + STALL_ANSWER_S
            if failure.sent <= held_until and failure.ended >= fault.at and (
                failure.kind in ("status 504", "timeout", "cut")
            ):
                return fault, "held by the stopped replica (504 once stalled)"
            if failure.traffic is Traffic.HANDLE and failure.kind == "status 502" and (
                fault.at <= failure.ended <= held_until
            ):
                return fault, "a handle call held by the stopped replica when it was replaced (HandleError)"
    return None


@dataclass(frozen=True)
class Sample:
    role: str  # one of ROLES
    pid: int
    t: float  # seconds after the load began
    mb: float  # PSS
    anonymous_mb: float  # heap and private mappings: what a leak grows (PSS also moves with shared pages)


ROLES = ("agent", "controller", "proxy worker", "replica host")
# What the soak accepts of each long-lived process's growth under constant load,
# judged only on a long enough run (a few minutes say nothing of a slope).
SLOPE_BOUND_MB_PER_H = 30.0
MIN_SLOPE_SPAN_S = 300.0
# A process's first four minutes are not growth: imports, first connections, and the C heap
# reaching its working size. Measured on a controller that lived a whole 12-minute soak with
# tracemalloc on: its anonymous memory rose 67 -> 89 MB in the first four minutes and its lowest
# sample per minute 89 -> 90 MB in the next eight, while its Python heap stayed flat (3.5 MB
# traced) from the fourth minute on.
WARMUP_S = 240.0


@dataclass(frozen=True)
class Slope:
    mb_per_h: float | None  # None: too few samples
    span_s: float  # the seconds of samples it is judged on (all processes of the role together)
    processes: int
    last_mb: float  # the newest sample's mean over the role's live processes

    @property
    def judged(self) -> bool:
        return self.mb_per_h is not None and self.span_s >= MIN_SLOPE_SPAN_S

    @property
    def too_steep(self) -> bool:
        return self.judged and self.mb_per_h is not None and self.mb_per_h > SLOPE_BOUND_MB_PER_H


def slope(samples: list[Sample], warmup_s: float = WARMUP_S, of_pss: bool = False) -> Slope:
    """The growth of one role's anonymous memory (or PSS) in MB/hour: least squares with one intercept per process.

    Each process's samples after its first `warmup_s` form a series; the slope
    is pooled over the series (a restarted process starts lower, which is no
    shrinking). The span is the sum of the series' lengths.
    """
    def value(sample: Sample) -> float:
        return sample.mb if of_pss else sample.anonymous_mb

    by_pid: dict[int, list[Sample]] = defaultdict(list)
    for sample in samples:
        by_pid[sample.pid].append(sample)
    sxy = sxx = span = 0.0
    for series in by_pid.values():
        series.sort(key=lambda s: s.t)
        kept = [s for s in series if s.t - series[0].t >= warmup_s]
        if len(kept) < 3:
            continue
        mean_t = sum(s.t for s in kept) / len(kept)
        mean_mb = sum(value(s) for s in kept) / len(kept)
        sxy += sum((s.t - mean_t) * (value(s) - mean_mb) for s in kept)
        sxx += sum((s.t - mean_t) ** 2 for s in kept)
        span += kept[-1].t - kept[0].t
    last_t = max((s.t for s in samples), default=0.0)
    newest = [value(s) for s in samples if s.t == last_t]
    return Slope(
        mb_per_h=round(sxy / sxx * 3600, 1) if sxx > 0 else None, span_s=round(span, 1),
        processes=len(by_pid), last_mb=round(sum(newest) / len(newest), 1) if newest else 0.0,
    )


@dataclass
class Soak:
    """A finished soak's numbers, as `bench.soak` measured them."""
    seed: int
    minutes: float
    requests: dict[str, int]  # per Traffic value
    faults: list[Injected]
    failures: list[Failure]
    slopes: dict[str, Slope]  # of anonymous memory: judged
    leaked_actors: list[str]
    serves_head: bool
    head_note: str
    problems: list[str] = field(default_factory=list)  # anything else that went wrong (an agent that died)
    plot: str = ""  # the memory plot's file name beside the document, "" if none
    pss_slopes: dict[str, Slope] = field(default_factory=dict)  # shown beside, not judged


def _explained(soak: Soak) -> tuple[dict[int, list[tuple[Failure, str]]], list[Failure]]:
    by_fault: dict[int, list[tuple[Failure, str]]] = defaultdict(list)
    unexplained: list[Failure] = []
    for failure in soak.failures:
        found = explain(failure, soak.faults)
        if found is None:
            unexplained.append(failure)
        else:
            by_fault[soak.faults.index(found[0])].append((failure, found[1]))
    return by_fault, unexplained


def verdict(soak: Soak) -> list[str]:
    """Why the soak fails (empty: it passes)."""
    _, unexplained = _explained(soak)
    reasons = [f"{len(unexplained)} unexplained failed requests"] if unexplained else []
    reasons += [f"never recovered: {f.kind.value} at {f.at:.0f} s" for f in soak.faults if f.recovered is None]
    if soak.leaked_actors:
        reasons.append(f"leaked actors: {', '.join(soak.leaked_actors)}")
    reasons += [
        f"{role}'s anonymous memory grows {s.mb_per_h} MB/h (bound {SLOPE_BOUND_MB_PER_H})"
        for role, s in soak.slopes.items() if s.too_steep
    ]
    if not soak.serves_head:
        reasons.append(f"does not serve the branch head: {soak.head_note}")
    return reasons + soak.problems


def _kinds(failures: list[Failure]) -> str:
    counts: dict[str, int] = defaultdict(int)
    for failure in failures:
        counts[f"{failure.traffic.value} {failure.kind}"] += 1
    return ", ".join(f"{kind} {n}" for kind, n in sorted(counts.items()))


def render(soak: Soak, command: str) -> str:
    """docs/reports/soak.md for a finished soak."""
    by_fault, unexplained = _explained(soak)
    total = sum(soak.requests.values())
    reasons = verdict(soak)
    lines = [
        "# Soak: faults that overlap, for minutes on end",
        "",
        f"Written by `{command}` (`bench/soak.py`); do not edit by hand. A steady mixed load goes",
        "through the real proxies of a `gitops run` agent serving three backends from a git remote",
        "(`plain`; `relay`, which streams server-sent events and calls `plain` through a handle;",
        "`chat`, a WebSocket app) on a two-node Ray cluster (the head, whose GCS keeps its tables in",
        "Redis, and one more node, each at its own loopback address with its own proxy; every kind",
        "of traffic goes to both), while a seeded",
        "random schedule injects a fault every 20-60 s. The harness restarts the agent when it",
        "kills it, as a supervisor (systemd, Kubernetes) would.",
        "",
        "- **failed**: requests, streams and WebSocket sessions that did not end as they should,",
        "  split into the *documented* cases (below) and everything else, which fails the soak.",
        "- **recovery**: seconds from the fault's end (the kill; the SIGCONT; the remote mended;",
        "  the revert pushed) until the cluster was whole again: the agent Synced on the remote's",
        "  head, every replica and proxy worker running, every route answering.",
        "",
        "Documented failures: a request, stream or session in flight on a process killed with",
        "kill -9 (a replica, a proxy worker) dies with it; a handle call sent to a replica killed",
        "moments before, before its caller learned of the death, raises `HandleError` (ray_gitops.serving),",
        "which the soak's `relay` answers 502 (the handle leaves that replica out from then on);",
        "after a proxy worker's kill, a refused or",
        "reset connection, or the new worker's 503 before its first route table (docs/reference/http.md); a",
        "request held by a SIGSTOPped replica is answered 504 once the proxy counts the replica as",
        "stalled (docs/reference/http.md), and a stream or session on it is cut or times out; a handle call",
        "it held raises `HandleError` when the controller replaces it (ray_gitops.serving), which the",
        "soak's `relay` answers 502.",
        "",
        f"## Result: {'PASS' if not reasons else 'FAIL'}",
        "",
        f"Seed {soak.seed}, {soak.minutes:g} minutes of load, {len(soak.faults)} faults; {total} requests "
        f"({', '.join(f'{k} {v}' for k, v in soak.requests.items())}), {len(soak.failures)} failed, "
        f"{len(unexplained)} unexplained.",
        "",
    ]
    lines += [f"- {reason}" for reason in reasons] + ([""] if reasons else [])
    lines += [
        "| at (s) | fault | held (s) | recovery (s) | failed | documented | unexplained | note |",
        "| ---: | --- | ---: | ---: | ---: | --- | ---: | --- |",
    ]
    for index, fault in enumerate(soak.faults):
        explained = [f for f, _ in by_fault.get(index, [])]
        mine = [f for f in unexplained if _window_of(f, soak.faults) == index]
        recovery = "never" if fault.recovery_s is None else f"{fault.recovery_s:.2f}"
        held = f"{fault.released - fault.at:.1f}" if fault.planned.hold_s else "—"
        lines.append(
            f"| {fault.at:.0f} | {fault.kind.value} | {held} | {recovery} | {len(explained) + len(mine)} | "
            f"{_kinds(explained) or '—'} | {len(mine)} | {fault.note} |"
        )
    before = [f for f in unexplained if _window_of(f, soak.faults) is None]
    if before:
        lines.append(f"| — | before any fault | — | — | {len(before)} | — | {len(before)} | {_kinds(before)} |")
    if unexplained:
        lines += ["", "Unexplained failures (the first 20):", ""]
        lines += [f"- {f.sent:.1f} s {f.traffic.value}: {f.kind} {f.detail[:160]}" for f in unexplained[:20]]
    lines += [
        "",
        "## Memory over time",
        "",
        "The PSS and the anonymous memory (heap and private mappings, `Anonymous` in",
        "`/proc/PID/smaps_rollup`) of each long-lived process, sampled every 10 s. A slope is least",
        f"squares over each process's samples after its first {WARMUP_S / 60:.0f} minutes (its warm-up: imports,",
        "first connections, the C heap reaching its working size), pooled over the processes a",
        "role had (a process restarted by a fault starts a new series). The soak fails when a role's",
        f"anonymous memory grows faster than **{SLOPE_BOUND_MB_PER_H:g} MB/hour**, judged once a role has at",
        f"least {MIN_SLOPE_SPAN_S / 60:.0f} minutes of series (a shorter run reports the slope, unjudged): what",
        "a leak grows. PSS is shown beside it, not judged: it also rises as a process first runs code",
        "paths (shared library pages paged in) and as other users of its shared pages exit.",
        "",
        "| component | processes | newest PSS (MB) | PSS slope (MB/hour) | newest anonymous (MB) "
        "| anonymous slope (MB/hour) | judged on (min) |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for role in ROLES:
        s = soak.slopes.get(role)
        if s is None:
            continue
        pss = soak.pss_slopes.get(role)
        judged = f"{s.span_s / 60:.1f}" + ("" if s.judged else " (too short to judge)")
        lines.append(f"| {role} | {s.processes} | {_mb(pss.last_mb if pss else None)} | "
                     f"{_per_h(pss.mb_per_h if pss else None)} | {_mb(s.last_mb)} | {_per_h(s.mb_per_h)} | {judged} |")
    if soak.plot:
        lines += ["", f"![memory per component over the soak]({soak.plot})"]
    lines += [
        "",
        "## At the end",
        "",
        f"- leaked actors: {', '.join(soak.leaked_actors) if soak.leaked_actors else 'none'}",
        f"- serves exactly the branch head: {'yes' if soak.serves_head else 'NO'} ({soak.head_note})",
        "",
    ]
    return "\n".join(lines)


def _mb(value: float | None) -> str:
    return "—" if value is None else f"{value:.1f}"


def _per_h(value: float | None) -> str:
    return "—" if value is None else f"{value:+.1f}"


def _window_of(failure: Failure, faults: list[Injected]) -> int | None:
    """The index of the newest fault injected before `failure` was sent (None: before any)."""
    found = None
    for index, fault in enumerate(faults):
        if fault.at <= failure.ended:
            found = index
    return found
