"""Issues 15, 19, 30, 31, 35, 43, 45 and 48's targets, judged against one results document.

Pure: takes the document `bench.report` writes (plain dicts) and says, for
each target, what was measured and whether it is met (None: not measured in
this run). A missed target that this machine cannot show says why, from
figures of the same run (`Target.beyond`). Measures and renders nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

SERVE_CONFIGS = ("serve-default", "serve-100", "serve-direct", "serve-haproxy")
DIRECT_STARLETTE = ("uvicorn", "granian")
WORKER_GROWTH = 1.1  # 2 workers over 1: less is within the noise of one run
BARE_NOISE = 1.25  # ours within this factor of a bare app's figure: the machine's limit, not ours


@dataclass(frozen=True)
class Target:
    target: str
    measured: str
    met: bool | None
    beyond: str = ""  # when missed: why this machine cannot show it, from figures of the same run


def targets(document: dict[str, Any]) -> list[Target]:
    m = document.get("measurements", {})
    return [
        *_proxy(m.get("proxy")),
        _moonshot(m.get("proxy"), m.get("proxy_profile")),
        *_ceiling(m.get("proxy")),
        *_update(m.get("update_latency")),
        *_rollout(m.get("rollout")),
        *_controller_kill(m.get("faults")),
        *_reconcile(m.get("reconcile")),
        _fanout(m.get("fanout")),
        *_payloads(m.get("payloads")),
        *_streams(m.get("streams")),
        *_density(m.get("density")),
        *_routing(m.get("routing")),
        *_audit(m.get("audit")),
        *_llm_endpoint(m.get("llm_endpoint")),
        *_grpc(m.get("grpc")),
    ]


def median(spread: dict[str, Any] | None) -> float | None:
    """The median of a `bench.stats.spread`, None when nothing was measured."""
    return None if not spread else spread.get("median")


def _at(runs: list[dict[str, Any]], system: str, connections: int, handler: str = "noop") -> dict[str, Any] | None:
    return next((r for r in runs if r["system"] == system and r["handler"] == handler
                 and r["connections"] == connections), None)


def best_serve(runs: list[dict[str, Any]], connections: int = 32, handler: str = "noop") -> dict[str, Any] | None:
    """Serve's fastest configuration (by req/s) at `connections` with `handler`."""
    measured = [r for s in SERVE_CONFIGS if (r := _at(runs, s, connections, handler)) and median(r["rps"])]
    return max(measured, key=lambda r: r["rps"]["median"], default=None)


def fastest_direct(runs: list[dict[str, Any]], connections: int = 32) -> dict[str, Any] | None:
    """The fastest Starlette app answering by itself (no proxy, no replica): what no proxy in front of one can beat."""
    measured = [r for s in DIRECT_STARLETTE if (r := _at(runs, s, connections)) and median(r["rps"])]
    return max(measured, key=lambda r: r["rps"]["median"], default=None)


def _proxy(doc: dict[str, Any] | None) -> list[Target]:
    names = ("Proxy at 32 connections: ≥ 10× Serve's best req/s", "…and p99 ≤ 0.1× Serve's best",
             "…and ≥ 0.5× bare uvicorn+Starlette req/s")
    runs = doc["figures"]["runs"] if doc else []
    ours, serve, uvicorn = _at(runs, "ours", 32), best_serve(runs), _at(runs, "uvicorn", 32)
    direct = fastest_direct(runs)
    rows = []
    if ours and serve:
        ratio = ours["rps"]["median"] / serve["rps"]["median"]
        wanted = 10 * serve["rps"]["median"]
        rows.append(Target(names[0], f"×{ratio:.2f} ({ours['rps']['median']:,.0f} vs {serve['system']} "
                                     f"{serve['rps']['median']:,.0f} req/s)", ratio >= 10,
                           _beyond_throughput(wanted, direct)))
        p99 = ours["p99_ms"]["median"] / serve["p99_ms"]["median"]
        rows.append(Target(names[1], f"×{p99:.2f} ({ours['p99_ms']['median']:.1f} vs "
                                     f"{serve['p99_ms']['median']:.1f} ms)", p99 <= 0.1,
                           _beyond_p99(0.1 * serve["p99_ms"]["median"], direct)))
    else:
        rows += [Target(names[0], "–", None), Target(names[1], "–", None)]
    if ours and uvicorn:
        ratio = ours["rps"]["median"] / uvicorn["rps"]["median"]
        rows.append(Target(names[2], f"×{ratio:.2f} ({uvicorn['rps']['median']:,.0f} req/s bare)", ratio >= 0.5))
    else:
        rows.append(Target(names[2], "–", None))
    return rows


def _moonshot(proxy: dict[str, Any] | None, profile: dict[str, Any] | None) -> Target:
    """Issue 35's noop moonshot, with the CPU per request that explains a miss (from the profile's run)."""
    name = "Noop moonshot (issue 35): through the proxy and a replica, ≥ 1.0× uvicorn+Starlette answering by itself"
    runs = proxy["figures"]["runs"] if proxy else []
    ours, uvicorn = _at(runs, "ours", 32), _at(runs, "uvicorn", 32)
    if not (ours and uvicorn):
        return Target(name, "–", None)
    ratio = ours["rps"]["median"] / uvicorn["rps"]["median"]
    measured = f"×{ratio:.2f} ({ours['rps']['median']:,.0f} vs {uvicorn['rps']['median']:,.0f} req/s)"
    f = profile["figures"] if profile else None
    if ratio < 1.0 and f and f["load"]["rps"]:
        requests = f["load"]["rps"] * f["duration_s"]
        proxy_us, replica_us = (f["cpu_s"][role] / requests * 1e6 for role in ("proxy", "replica"))
        measured += (f"; the proxy and the replica spend {proxy_us:.0f} + {replica_us:.0f} µs of CPU per request "
                     f"(profile), where bare uvicorn, one process, spends at most {1e6 / uvicorn['rps']['median']:.0f}: "
                     "the hop costs more than the app answering by itself")
    return Target(name, measured, ratio >= 1.0)


def _beyond_throughput(wanted_rps: float, direct: dict[str, Any] | None) -> str:
    if direct is None or direct["rps"]["median"] >= wanted_rps:
        return ""
    return (f"it asks {wanted_rps:,.0f} req/s, and the fastest Starlette app answering by itself here, with no "
            f"proxy or replica behind it ({direct['system']}), serves {direct['rps']['median']:,.0f}")


def _beyond_p99(wanted_ms: float, direct: dict[str, Any] | None) -> str:
    if direct is None or direct["p99_ms"]["median"] <= wanted_ms:
        return ""
    return (f"it asks p99 ≤ {wanted_ms:.2f} ms, and the fastest Starlette app answering by itself here "
            f"({direct['system']}) has p99 {direct['p99_ms']['median']:.2f} ms")


def _ceiling(doc: dict[str, Any] | None) -> list[Target]:
    """Issue 19's targets: the proxy at the HTTP ceiling."""
    runs = doc["figures"]["runs"] if doc else []
    ours, serve = _at(runs, "ours", 32), best_serve(runs)
    rows = []
    name = "Proxy (issue 19) at 32 connections: p99 ≤ 0.25× Serve's fastest, 0 non-2xx"
    if ours and serve:
        p99 = ours["p99_ms"]["median"] / serve["p99_ms"]["median"]
        failed = ours["non_2xx"] + ours["socket_errors"]
        rows.append(Target(name, f"×{p99:.2f} ({ours['p99_ms']['median']:.1f} vs {serve['p99_ms']['median']:.1f} ms), "
                                 f"{failed:.0f} non-2xx", p99 <= 0.25 and failed == 0))
    else:
        rows.append(Target(name, "–", None))
    name = "…at 1 connection: p50 within 0.3 ms of uvicorn answering directly"
    ours_one, uvicorn_one = _at(runs, "ours", 1), _at(runs, "uvicorn", 1)
    if ours_one and uvicorn_one:
        gap = ours_one["p50_ms"]["median"] - uvicorn_one["p50_ms"]["median"]
        rows.append(Target(name, f"+{gap:.2f} ms ({ours_one['p50_ms']['median']:.2f} vs "
                                 f"{uvicorn_one['p50_ms']['median']:.2f} ms)", gap <= 0.3))
    else:
        rows.append(Target(name, "–", None))
    for handler, label in (("async5", "5 ms async"), ("cpu5", "5 ms CPU-bound")):
        name = f"…{label} handler, 2 replicas: req/s and p99 no worse than Serve's fastest"
        ours_slow, serve_slow = _at(runs, "ours", 32, handler), best_serve(runs, 32, handler)
        if ours_slow and serve_slow:
            a, b = ours_slow["rps"]["median"], serve_slow["rps"]["median"]
            pa, pb = ours_slow["p99_ms"]["median"], serve_slow["p99_ms"]["median"]
            rows.append(Target(name, f"{a:,.0f} vs {b:,.0f} req/s, p99 {pa:.1f} vs {pb:.1f} ms ({serve_slow['system']})",
                               a >= b and pa <= pb))
        else:
            rows.append(Target(name, "–", None))
    rows.append(_workers(runs))
    return rows


def _workers(runs: list[dict[str, Any]]) -> Target:
    """2 workers against 1 at every handler and connection count measured with both: met where one
    worker was the limit and the second added throughput; every ratio is shown, not only the best."""
    name = "…throughput grows with proxy workers (2 vs 1, each handler and connection count)"
    by_handler: dict[str, list[str]] = {}
    best = None
    for two in (r for r in runs if r["system"] == "ours"):
        one = _at(runs, "ours-1w", two["connections"], two["handler"])
        if one is None or not median(one["rps"]):
            continue
        growth = two["rps"]["median"] / one["rps"]["median"]
        best = growth if best is None else max(best, growth)
        by_handler.setdefault(two["handler"], []).append(f"{two['connections']}: ×{growth:.2f}")
    if best is None:
        return Target(name, "–", None)
    measured = "; ".join(f"{handler} {', '.join(points)}" for handler, points in by_handler.items())
    return Target(name, measured, best >= WORKER_GROWTH)


def _update(doc: dict[str, Any] | None) -> list[Target]:
    names = ("Lightweight update: commit → effective p50 < 100 ms", "…and faster than Serve's API call → effective")
    if not doc:
        return [Target(n, "–", None) for n in names]
    f = doc["figures"]
    ours = {kind: median(got["seconds"]) for kind, got in f.get("ours", {}).items()}
    serve = median(f.get("serve", {}).get("user_config", {}).get("seconds"))
    worst = max((v for v in ours.values() if v is not None), default=None)
    rows = [Target(names[0], ", ".join(f"{k} {v * 1e3:.0f} ms" for k, v in ours.items() if v is not None) or "–",
                   None if worst is None else worst < 0.1)]
    ours_config = ours.get("user_config")
    if serve is None or ours_config is None:
        rows.append(Target(names[1], "–", None))
    else:
        rows.append(Target(names[1], f"user_config: ours {ours_config * 1e3:.0f} ms vs Serve {serve * 1e3:.0f} ms",
                           ours_config < serve))
    return rows


def _rollout(doc: dict[str, Any] | None) -> list[Target]:
    names = ("Code rollout under load: 0 failed requests", "…and total time no worse than Serve's")
    ours = doc["figures"].get("ours") if doc else None
    serve = doc["figures"].get("serve") if doc else None
    rows = [Target(names[0], f"{ours['failed']} of {ours['requests']}", ours["failed"] == 0) if ours
            else Target(names[0], "–", None)]
    if ours and serve:
        a, b = ours["total_s"]["median"], serve["total_s"]["median"]
        rows.append(Target(names[1], f"ours {a:.1f} s vs Serve {b:.1f} s", a <= b))
    else:
        rows.append(Target(names[1], "–", None))
    return rows


def _controller_kill(doc: dict[str, Any] | None) -> list[Target]:
    name = "Controller kill -9 under load: 0 failed requests"
    ours = (doc["figures"].get("ours") or {}).get("controller") if doc else None
    if not ours:
        return [Target(name, "–", None)]
    return [Target(name, f"{ours['failed']} of {ours['requests']}; goal API back in "
                         f"{ours['recovery_s']['median']:.1f} s", ours["failed"] == 0)]


def _reconcile(doc: dict[str, Any] | None) -> list[Target]:
    names = ("Reconcile: 10,000 specs cold < 5 s", "…linear: growth per 10× ≤ 1.1",
             "…unchanged tick < 5 ms at 1,000 specs")
    if not doc:
        return [Target(n, "–", None) for n in names]
    f = doc["figures"]
    by_size = {r["specs"]: r for r in f["rows"]}
    rows = []
    big = by_size.get(10_000)
    rows.append(Target(names[0], f"{big['cold_s']['median']:.2f} s", big["cold_s"]["median"] < 5) if big
                else Target(names[0], "–", None))
    steps = [s for s in f["growth"]["cold_s"] if s["from"] >= 100]
    worst = max((s["growth"] for s in steps), default=None)
    rows.append(Target(names[1], ", ".join(f"{s['from']:,}→{s['to']:,} ×{s['growth']:.2f}" for s in steps) or "–",
                       None if worst is None else worst <= 1.1))
    thousand = by_size.get(1_000)
    rows.append(Target(names[2], f"{thousand['unchanged_s']['median'] * 1e3:.1f} ms",
                       thousand["unchanged_s"]["median"] < 0.005) if thousand else Target(names[2], "–", None))
    return rows


def _fanout(doc: dict[str, Any] | None) -> Target:
    name = "Fan-out: bytes per traffic change flat in the number of endpoints"
    rows = doc["figures"]["rows"] if doc else []
    if len(rows) < 2:
        return Target(name, "–", None)
    small, large = rows[0], rows[-1]
    growth = large["pushed_bytes"] / small["pushed_bytes"]
    return Target(name, f"{small['pushed_bytes']:,} B at {small['endpoints']:,} → {large['pushed_bytes']:,} B at "
                        f"{large['endpoints']:,} endpoints (×{growth:.2f})", growth <= 1.1)


MIB = 1024 * 1024


def _size(size: int) -> str:
    return f"{size // MIB} MiB" if size >= MIB else f"{size // 1024} KiB"


def _worst(ratios: list[dict[str, Any]], key: str) -> tuple[float, str] | None:
    """The lowest ratio `key` among `ratios` (None counts as 0: ours answered nothing there), and where."""
    if not ratios:
        return None
    worst = min(ratios, key=lambda r: r[key] or 0.0)
    return worst[key] or 0.0, f"{worst['handler']} {_size(worst['size'])}, {worst['connections']} conn."


def _payloads(doc: dict[str, Any] | None) -> list[Target]:
    """Issue 35's bodies: MB/s ahead of Serve's fastest at every point; ≥ 0.8× uvicorn from 1 MiB."""
    names = ("Bodies (issue 35): MB/s ahead of Serve's fastest at every size", "…≥ 0.8× bare uvicorn at 1 MiB and above")
    f = doc["figures"] if doc else {}
    refused = sum(r["non_2xx"] + r["socket_errors"] for r in f.get("runs", []) if r["system"] == "ours")
    note = f"; ours refused or failed {refused:,.0f} requests" if refused else ""
    rows = []
    for name, key, ratios in (
            (names[0], "vs_serve", [r for r in f.get("ratios", []) if r["serve_fastest"]]),
            (names[1], "vs_uvicorn", [r for r in f.get("ratios", []) if r["size"] >= MIB
                                      and any(u["system"] == "uvicorn" for u in f.get("runs", []))])):
        worst = _worst(ratios, key)
        if worst is None:
            rows.append(Target(name, "–", None))
            continue
        wanted = 1.0 if key == "vs_serve" else 0.8
        reached = sum(1 for r in ratios if (r[key] or 0.0) >= wanted)
        rows.append(Target(name, f"worst ×{worst[0]:.2f} ({worst[1]}); {reached} of {len(ratios)} points{note}",
                           worst[0] >= wanted))
    return rows


# Issues 35 and 48 ask for no starved stream at 1,000 and 5,000 streams; the 10,000-stream
# point (issue 48) is shown with the streams' figures, not judged.
STARVED_JUDGED_UP_TO = 5000


def _streams(doc: dict[str, Any] | None) -> list[Target]:
    """Issue 35's open streams: memory per stream, the p99 gap at 1,000 streams, none starved."""
    names = ("Open streams (issue 35): ≤ 50 KiB per open stream across proxy + replica",
             "…p99 inter-event gap ≤ 2× the sender's period at 1,000 streams",
             "…no stream failed, ended short or starved (up to 5,000 streams)")
    runs = doc["figures"]["runs"] if doc else []
    ours = [r for r in runs if r["system"] == "ours"]
    if not ours:
        return [Target(n, "–", None) for n in names]
    per_stream = {r["streams"]: (r["proxy_pss_kib_per_stream"] or 0.0) + (r["replica_pss_kib_per_stream"] or 0.0)
                  for r in ours}
    memory = ", ".join(f"{kib:.1f} KiB at {n:,}" for n, kib in per_stream.items())
    rows = [Target(names[0], memory, max(per_stream.values()) <= 50)]
    thousand = next((r for r in ours if r["streams"] == 1000), None)
    if thousand is None:
        rows.append(Target(names[1], "–", None))
    else:
        wanted, got = 2 * thousand["period_ms"], thousand["gap_p99_ms"]
        bare = next((r for r in runs if r["system"] == "uvicorn" and r["streams"] == 1000), None)
        measured = f"{got:.0f} ms (period {thousand['period_ms']:.0f} ms)"
        if bare:
            measured += f"; uvicorn + Starlette alone, same run: {bare['gap_p99_ms']:.0f} ms"
        # Beyond this machine only when the bare app misses too and ours is within the noise of it.
        beyond = ("the bare app misses it too in the same run"
                  if bare and bare["gap_p99_ms"] > wanted and got <= BARE_NOISE * bare["gap_p99_ms"] else "")
        rows.append(Target(names[1], measured, got <= wanted, beyond))
    rows += _streams_48(ours, memory, max(per_stream.values()))
    bad = {r["streams"]: (r["failed"], r["short"], r["starved"]) for r in ours}
    judged = {n: counts for n, counts in bad.items() if n <= STARVED_JUDGED_UP_TO}
    rows.append(Target(names[2], "; ".join(f"{n:,}: {f} failed, {s} short, {st} starved"
                                           for n, (f, s, st) in judged.items()),
                       all(sum(counts) == 0 for counts in judged.values()) if judged else None))
    return rows


def _streams_48(ours: list[dict[str, Any]], memory: str, worst_kib: float) -> list[Target]:
    """Issue 48's stricter stream targets: ≤ 30 KiB per stream (`memory` says them all, the
    worst is `worst_kib`); the p99 gap within 1.5× the period at 1,000 streams and 3× at 5,000."""
    names = ("Open streams (issue 48): ≤ 30 KiB per open stream across proxy + replica",
             "…p99 inter-event gap ≤ 1.5× the period at 1,000 streams, ≤ 3× at 5,000")
    rows = [Target(names[0], memory, worst_kib <= 30)]
    allowed = {1000: 1.5, 5000: 3.0}
    judged = [r for r in ours if r["streams"] in allowed]
    if not judged:
        return [*rows, Target(names[1], "–", None)]
    rows.append(Target(names[1], ", ".join(f"{r['gap_p99_ms']:.0f} ms at {r['streams']:,} (allowed "
                                           f"{allowed[r['streams']] * r['period_ms']:.0f})" for r in judged),
                       all(r["gap_p99_ms"] <= allowed[r["streams"]] * r["period_ms"] for r in judged)))
    return rows


def _density(doc: dict[str, Any] | None) -> list[Target]:
    """Density: PSS per idle replica against Serve's (issue 35: ≤ 0.6×; issue 48: ≤ 0.5×), and the
    time until all are ready (issue 35: ≤ 0.5×; issue 48: ≤ 0.4×).

    A miss is beyond any Ray-hosted replica when a bare Ray actor of the same
    run (`ray-actor`, the floor under ours and Serve's) misses the target too."""
    runs = {r["system"]: r for r in (doc["figures"]["runs"] if doc else []) if r["replicas"] == DENSITY_JUDGED_AT}
    return [*_density_rows(runs, "issue 35", 0.6, 0.5), *_density_rows(runs, "issue 48", 0.5, 0.4)]


# The count issues 35 and 48 judge density at; 300 replicas (issue 48) are measured, shown, not judged.
DENSITY_JUDGED_AT = 100
# bench.density starts a larger count only when the smaller one's replicas, scaled up, need at most this
# share of the node's memory: the rest is for Ray, the proxy and the machine itself. Here, not in
# bench.density, so that the report says it without importing a measurement (and its HTTP clients).
FIT_SHARE = 0.8


def _density_rows(runs: dict[str, dict[str, Any]], issue: str, memory_limit: float, ready_limit: float) -> list[Target]:
    names = (f"Density ({issue}): PSS per idle replica ≤ {memory_limit:g}× Serve's",
             f"…all replicas ready in ≤ {ready_limit:g}× Serve's time")
    ours, serve, floor = runs.get("ours"), runs.get("serve"), runs.get("ray-actor")
    if not ours or not serve:
        return [Target(n, "–", None) for n in names]
    rows = []
    for name, field, unit, limit in ((names[0], "replica_pss_mb", "MB", memory_limit),
                                     (names[1], "ready_s", "s", ready_limit)):
        ratio = ours[field] / serve[field]
        measured = f"×{ratio:.2f} ({ours[field]:.1f} vs {serve[field]:.1f} {unit}"
        measured += f", {ours['replicas']} replicas)" if unit == "MB" else ")"
        beyond = ""
        if floor and floor[field] > limit * serve[field]:
            beyond = (f"a bare Ray actor alone is ×{floor[field] / serve[field]:.2f} Serve's ({floor[field]:.1f} "
                      f"{unit}); ours is {ours[field] - floor[field]:.1f} {unit} above it, Serve "
                      f"{serve[field] - floor[field]:.1f}")
        elif floor:
            measured += f"; a bare Ray actor {floor[field]:.1f} {unit}"
        rows.append(Target(name, measured, ratio <= limit, beyond))
    return rows


DECISION_BUDGET_US = 20.0


def routing_run(runs: list[dict[str, Any]], workload: str, system: str, policy: str) -> dict[str, Any] | None:
    return next((r for r in runs if (r["workload"], r["system"], r["policy"]) == (workload, system, policy)), None)


def _routing(doc: dict[str, Any] | None) -> list[Target]:
    """Issue 30's routing targets: prefix_affinity's TTFT against power_of_two and Serve's router; the decision."""
    names = ("Routing (issue 30): prefix_affinity TTFT mean ≥ 2× lower than power_of_two, shared prefixes",
             "…no more than 5% above power_of_two's without shared prefixes",
             "…ahead of Ray Serve's PrefixCacheAffinityRouter (TTFT mean, shared prefixes)",
             f"…the routing decision < {DECISION_BUDGET_US:g} µs per request, key read included")
    f = doc["figures"] if doc else {}
    runs = f.get("runs", [])
    rows = []
    ours, p2 = routing_run(runs, "shared", "ours", "prefix_affinity"), routing_run(runs, "shared", "ours", "power_of_two")
    if ours and p2 and ours["ttft_mean_s"]:
        ratio = p2["ttft_mean_s"] / ours["ttft_mean_s"]
        rows.append(Target(names[0], f"{ratio:.2f}× lower ({ours['ttft_mean_s'] * 1e3:.0f} vs "
                                     f"{p2['ttft_mean_s'] * 1e3:.0f} ms)", ratio >= 2))
    else:
        rows.append(Target(names[0], "–", None))
    ours, p2 = (routing_run(runs, "unshared", "ours", "prefix_affinity"),
                routing_run(runs, "unshared", "ours", "power_of_two"))
    if ours and p2 and p2["ttft_mean_s"]:
        above = ours["ttft_mean_s"] / p2["ttft_mean_s"] - 1
        rows.append(Target(names[1], f"{above:+.0%} ({ours['ttft_mean_s'] * 1e3:.0f} vs "
                                     f"{p2['ttft_mean_s'] * 1e3:.0f} ms)", above <= 0.05))
    else:
        rows.append(Target(names[1], "–", None))
    ours, serve = (routing_run(runs, "shared", "ours", "prefix_affinity"),
                   routing_run(runs, "shared", "serve", "prefix_cache_affinity"))
    if ours and serve and ours["ttft_mean_s"]:
        ratio = serve["ttft_mean_s"] / ours["ttft_mean_s"]
        rows.append(Target(names[2], f"Serve's {ratio:.2f}× ours ({serve['ttft_mean_s'] * 1e3:.0f} vs "
                                     f"{ours['ttft_mean_s'] * 1e3:.0f} ms)", ratio > 1))
    else:
        rows.append(Target(names[2], "–", None))
    decisions = f.get("decision_us") or []
    if decisions:
        worst = max(decisions, key=lambda r: r["decision_us"])
        over = [f"{r['policy']} {r['key']} {r['decision_us']:.1f} µs" for r in decisions
                if r["decision_us"] >= DECISION_BUDGET_US]
        measured = f"worst {worst['decision_us']:.1f} µs ({worst['policy']} {worst['key']})"
        if over:
            measured += "; over: " + ", ".join(over)
        rows.append(Target(names[3], measured, not over))
    else:
        rows.append(Target(names[3], "–", None))
    return rows


AUDIT_RATIO = 0.95  # issue 31: req/s with 1% tracing and with 10% capture, at least this share of off's


def _audit(doc: dict[str, Any] | None) -> list[Target]:
    """Issue 31's targets: proxy req/s with 1% tracing and with 10% capture against off (paired rounds)."""
    rows = {r["config"]: r for r in (doc["figures"]["rows"] if doc else [])}
    judged = []
    for config in ("tracing 1%", "capture 10%"):
        name = f"Audit trail (issue 31): req/s with {config} ≥ {AUDIT_RATIO:g}× of off, 32 connections, 1 KiB bodies"
        row = rows.get(config)
        if row is None:
            judged.append(Target(name, "–", None))
            continue
        judged.append(Target(name, f"{row['ratio']:.2f}× ({row['rps']:,.0f} vs {row['off_rps']:,.0f} req/s)",
                             row["ratio"] >= AUDIT_RATIO))
    return judged


LLM_OVERHEAD = 0.05  # issue 43: the OpenAI endpoint through our proxy within 5% of the engine served directly
# A GPU model's time to its first token and per output token of one request (50 tokens/s): the pace of
# `bench.llm_endpoint`'s second series (`bench.llm_paced`). Assumed times of a GPU, there being none here;
# what our proxy adds at that pace is measured.
GPU_TTFT_S = 0.1
GPU_TOKEN_S = 0.02


def _llm_endpoint(doc: dict[str, Any] | None) -> list[Target]:
    """Issue 43's target: TTFT and a request's tokens/s through our proxy within 5% of the same engine served
    directly, 1 in flight: with the CPU engine at its own speed (~10⁴ tokens/s, where a miss also says the
    time added), and with the same engine at a GPU model's pace (`GPU_TTFT_S`, `GPU_TOKEN_S`)."""
    figures = doc["figures"] if doc else {}
    own = _at_one_in_flight(figures.get("overhead", []))
    paced = _at_one_in_flight(figures["paced"]["overhead"]) if "paced" in figures else None
    pace = f"{GPU_TTFT_S * 1e3:g} ms to the first token, {GPU_TOKEN_S * 1e3:g} ms a token"
    own_names = (f"OpenAI endpoint (issue 43): TTFT p50 through our proxy ≤ {1 + LLM_OVERHEAD:g}× the engine served "
                 "directly, 1 in flight", f"…a request's tokens/s ≥ {1 - LLM_OVERHEAD:g}× direct")
    paced_names = (f"…at a GPU model's pace ({pace}): TTFT p50 ≤ {1 + LLM_OVERHEAD:g}× direct",
                   f"…at a GPU model's pace: a request's tokens/s ≥ {1 - LLM_OVERHEAD:g}× direct")
    at_pace = "measured at a GPU model's pace in the rows below"
    return [*_llm_pair(own_names, own, (
                lambda row: f"the proxy adds {row['ttft_added_s'] * 1e3:.2f} ms to the first token, "
                            f"{row['ttft_added_s'] / GPU_TTFT_S:.1%} of a GPU model's {GPU_TTFT_S * 1e3:g} ms; {at_pace}",
                lambda row: f"the proxy adds {row['token_added_s'] * 1e6:.0f} µs a token, "
                            f"{row['token_added_s'] / GPU_TOKEN_S:.1%} of a GPU model's {GPU_TOKEN_S * 1e3:g} ms; {at_pace}")),
            *_llm_pair(paced_names, paced)]


def _at_one_in_flight(rows: list[dict[str, Any]]) -> dict[str, Any] | None:
    return next((o for o in rows if o["concurrency"] == 1), None)


Beyond = Callable[[dict[str, Any]], str]


def _llm_pair(names: tuple[str, str], row: dict[str, Any] | None,
              beyond: tuple[Beyond, Beyond] | None = None) -> list[Target]:
    """TTFT and a request's tokens/s at 1 in flight; a miss says what `beyond` makes of the row."""
    if row is None:
        return [Target(name, "–", None) for name in names]
    ttft_met, tokens_met = row["ttft_ratio"] <= 1 + LLM_OVERHEAD, row["tokens_ratio"] >= 1 - LLM_OVERHEAD
    said = ("", "") if beyond is None else (beyond[0](row), beyond[1](row))
    return [
        Target(names[0], f"×{row['ttft_ratio']:.2f} ({row['ttft_added_s'] * 1e3:+.2f} ms)", ttft_met,
               "" if ttft_met else said[0]),
        Target(names[1], f"×{row['tokens_ratio']:.2f} ({row['request_added_s'] * 1e3:+.2f} ms a request)",
               tokens_met, "" if tokens_met else said[1]),
    ]


GRPC_VS_GRPCIO = 0.7  # issue 45: gRPC through our proxy at least this share of grpcio serving the servicer itself


def _grpc(doc: dict[str, Any] | None) -> list[Target]:
    """Issue 45's targets: the noop unary call's calls/s through our proxy ahead of Serve's gRPC ingress (its
    faster configuration) and ≥ 0.7× grpcio's, at the most calls in flight measured; v2 ModelInfer alongside."""
    names = ("gRPC (issue 45): unary noop calls/s through our proxy ahead of Ray Serve's gRPC ingress",
             f"…≥ {GRPC_VS_GRPCIO:g}× the same servicer on grpcio directly")
    f = doc["figures"] if doc else {}
    rows = f.get("ratios", [])
    noop = max((r for r in rows if r["call"] == "noop"), key=lambda r: r["in_flight"], default=None)
    if noop is None:
        return [Target(name, "–", None) for name in names]
    v2 = next((r for r in rows if r["call"] == "v2" and r["in_flight"] == noop["in_flight"]), None)

    def calls_per_s(system: str | None, call: str = "noop") -> float | None:
        return next((r["calls_per_s"]["median"] for r in f["runs"]
                     if (r["system"], r["call"], r["in_flight"]) == (system, call, noop["in_flight"])), None)

    def judged(name: str, key: str, versus: str | None, wanted: float, strictly: bool) -> Target:
        ratio = noop[key]
        if ratio is None:
            return Target(name, "–", None)
        measured = (f"×{ratio:.2f} ({calls_per_s('ours'):,.0f} vs {versus} {calls_per_s(versus):,.0f} calls/s, "
                    f"{noop['in_flight']} in flight)")
        if v2 and v2[key] is not None:
            measured += f"; v2 ModelInfer ×{v2[key]:.2f}"
        return Target(name, measured, ratio > wanted if strictly else ratio >= wanted)

    return [judged(names[0], "vs_serve", noop["serve_fastest"], 1.0, strictly=True),
            judged(names[1], "vs_grpcio", "grpcio", GRPC_VS_GRPCIO, strictly=False)]
