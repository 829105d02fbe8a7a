"""The report's plots, drawn from the results document with matplotlib (PNG, no display).

Owns: req/s and p99 vs connections per system (one figure per handler),
reconcile time vs specs (log-log), memory bars, MB/s vs body size, open
streams' memory and inter-event gaps, idle replicas' memory and start time,
and the soak's memory per component over time (`soak_memory`, with its faults marked). Every figure carries the
machine and the command that produced its figures. Measures nothing.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

from bench import machine

STYLE = {  # ours stands out; Serve in blues; the limits in greys
    "ours": ("tab:red", "o", 2.5), "ours-1w": ("#fb6a4a", "o", 1.5), "forwarder": ("tab:orange", "v", 1.2),
    "serve-default": ("#9ecae1", "s", 1.2), "serve-100": ("#6baed6", "s", 1.2),
    "serve-direct": ("#3182bd", "D", 1.5), "serve-haproxy": ("#08519c", "^", 1.5),
    "uvicorn": ("#636363", "x", 1.2), "granian": ("#969696", "+", 1.2), "raw": ("#252525", "*", 1.2),
    "ray-actor": ("#bdbdbd", "s", 1.2),
}


def draw_all(document: dict[str, Any], out: Path) -> dict[str, Any]:
    """Draw every plot the results allow; returns their file names (relative to `out`).

    Without matplotlib (the `bench` extra) it draws nothing and returns {}.
    """
    if not installed():
        return {}
    import matplotlib

    matplotlib.use("Agg")
    m = document["measurements"]
    drawn: dict[str, Any] = {}
    if "proxy" in m:
        drawn["proxy"] = {h: name for h in ("noop", "async5", "cpu5")
                          if (name := _proxy(m["proxy"], h, document["machine"], out))}
    if "reconcile" in m:
        drawn["reconcile"] = _reconcile(m["reconcile"], document["machine"], out)
    if "memory" in m:
        drawn["memory"] = _memory(m["memory"], document["machine"], out)
    if "payloads" in m and m["payloads"]["figures"]["runs"]:
        drawn["payloads"] = _payloads(m["payloads"], document["machine"], out)
    if "streams" in m and m["streams"]["figures"]["runs"]:
        drawn["streams"] = _streams(m["streams"], document["machine"], out)
    if "density" in m and m["density"]["figures"]["runs"]:
        drawn["density"] = _density(m["density"], document["machine"], out)
    return drawn


def installed() -> bool:
    return importlib.util.find_spec("matplotlib") is not None


def _caption(fig: Any, machine_info: dict[str, Any], command: str) -> None:
    fig.text(0.01, 0.01, f"{machine.label(machine_info)}\n{command}", fontsize=7, color="#555555", va="bottom")


def _saved(fig: Any, doc: dict[str, Any], machine_info: dict[str, Any], out: Path, name: str,
           bottom: float = 0.08) -> str:
    """`fig`, captioned with the machine and `doc`'s command, written to `out / name`; returns `name`."""
    import matplotlib.pyplot as plt

    _caption(fig, machine_info, doc["command"])
    fig.tight_layout(rect=(0, bottom, 1, 1))
    fig.savefig(out / name, dpi=90)
    plt.close(fig)
    return name


def _proxy(doc: dict[str, Any], handler: str, machine_info: dict[str, Any], out: Path) -> str | None:
    import matplotlib.pyplot as plt

    runs = [r for r in doc["figures"]["runs"] if r["handler"] == handler]
    if not runs:
        return None
    fig, (rps_ax, p99_ax) = plt.subplots(1, 2, figsize=(12, 5.2))
    for system in dict.fromkeys(r["system"] for r in runs):
        mine = sorted((r for r in runs if r["system"] == system), key=lambda r: r["connections"])
        color, marker, width = STYLE.get(system, ("black", ".", 1))
        x = [r["connections"] for r in mine]
        for ax, field in ((rps_ax, "rps"), (p99_ax, "p99_ms")):
            y = [r[field]["median"] for r in mine]
            low = [max(0.0, r[field]["median"] - r[field]["min"]) if r[field]["min"] is not None else 0 for r in mine]
            high = [max(0.0, r[field]["max"] - r[field]["median"]) if r[field]["max"] is not None else 0 for r in mine]
            ax.errorbar(x, y, yerr=[low, high], label=system, color=color, marker=marker, linewidth=width, capsize=3)
    levels = sorted({r["connections"] for r in runs})
    for ax, title in ((rps_ax, "requests per second (higher is better)"), (p99_ax, "p99 latency, ms (lower is better)")):
        ax.set_xscale("log", base=2)
        ax.set_xticks(levels, [str(level) for level in levels])
        ax.set_yscale("log")
        ax.set_xlabel("connections (wrk)")
        ax.set_title(title)
        ax.grid(True, which="both", alpha=0.3)
    rps_ax.legend(fontsize=8)
    fig.suptitle(f"Proxy: handler {handler}, {runs[0]['replicas']} replica(s); median of runs, bars min–max")
    return _saved(fig, doc, machine_info, out, f"proxy_{handler}.png", bottom=0.07)


def _reconcile(doc: dict[str, Any], machine_info: dict[str, Any], out: Path) -> str:
    import matplotlib.pyplot as plt

    rows = doc["figures"]["rows"]
    fig, ax = plt.subplots(figsize=(8, 5.2))
    x = [r["specs"] for r in rows]
    for field, label in (("cold_s", "cold load+validate+plan"), ("one_file_s", "one-file change"),
                         ("unchanged_s", "unchanged tick")):
        y = [r[field]["median"] for r in rows]
        yerr = [[r[field]["median"] - r[field]["min"] for r in rows], [r[field]["max"] - r[field]["median"] for r in rows]]
        ax.errorbar(x, y, yerr=yerr, marker="o", capsize=3, label=label)
    ax.plot(x, [rows[0]["cold_s"]["median"] * n / x[0] for n in x], linestyle=":", color="grey",
            label="linear from the first point")
    ax.axhline(5.0, color="tab:red", linestyle="--", linewidth=1, label="target: 10,000 cold < 5 s")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("specs in the repository")
    ax.set_ylabel("seconds")
    ax.set_title("Agent reconcile cost vs repository size (median, bars min–max)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    return _saved(fig, doc, machine_info, out, "reconcile.png")


def _memory(doc: dict[str, Any], machine_info: dict[str, Any], out: Path) -> str:
    import matplotlib.pyplot as plt

    roles = ("agent", "controller", "proxy", "replica")
    bars = [(system, state) for system in ("ours", "serve") for state in ("idle", "load") if system in doc["figures"]]
    fig, ax = plt.subplots(figsize=(9, 5))
    width = 0.8 / max(1, len(bars))
    colors = {("ours", "idle"): "#fc9272", ("ours", "load"): "tab:red",
              ("serve", "idle"): "#9ecae1", ("serve", "load"): "#08519c"}
    for i, (system, state) in enumerate(bars):
        values = [doc["figures"][system][state].get(role, 0.0) for role in roles]
        ax.bar([j + i * width for j in range(len(roles))], values, width, label=f"{system} {state}",
               color=colors[(system, state)])
    ax.set_xticks([j + width * (len(bars) - 1) / 2 for j in range(len(roles))], roles)
    ax.set_ylabel("PSS, MB")
    ax.set_title("Memory per process (Serve has no agent); idle and under wrk -c32")
    ax.legend(fontsize=8)
    ax.grid(True, axis="y", alpha=0.3)
    return _saved(fig, doc, machine_info, out, "memory.png")


def _payloads(doc: dict[str, Any], machine_info: dict[str, Any], out: Path) -> str:
    import matplotlib.pyplot as plt

    runs = doc["figures"]["runs"]
    panels = sorted({(r["handler"], r["connections"]) for r in runs})
    fig, axes = plt.subplots(1, len(panels), figsize=(5.5 * len(panels), 5.2), squeeze=False)
    for ax, (handler, connections) in zip(axes[0], panels):
        mine = [r for r in runs if (r["handler"], r["connections"]) == (handler, connections)]
        for system in dict.fromkeys(r["system"] for r in mine):
            points = sorted((r for r in mine if r["system"] == system), key=lambda r: r["size"])
            color, marker, width = STYLE.get(system, ("black", ".", 1))
            ax.plot([r["size"] / 1024 for r in points], [r["mb_s"]["median"] for r in points], label=system,
                    color=color, marker=marker, linewidth=width)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("body, KiB")
        ax.set_title(f"{handler}, {connections} connection(s): MB/s (higher is better)")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle("Bodies through each system: MB/s carried both ways, median of runs")
    return _saved(fig, doc, machine_info, out, "payloads.png")


def _streams(doc: dict[str, Any], machine_info: dict[str, Any], out: Path) -> str:
    """Memory per open stream (proxy and replica stacked) and the inter-event gap, per system and count."""
    import matplotlib.pyplot as plt

    runs = doc["figures"]["runs"]
    labels = [f"{r['system']}\n{r['streams']:,}" for r in runs]
    fig, (memory, gaps) = plt.subplots(1, 2, figsize=(12, 5.2))
    proxy = [r["proxy_pss_kib_per_stream"] or 0.0 for r in runs]
    replica = [r["replica_pss_kib_per_stream"] or 0.0 for r in runs]
    colors = [STYLE.get(r["system"], ("black", ".", 1))[0] for r in runs]
    memory.bar(labels, replica, color=colors, alpha=0.5, label="replica (or the app itself)")
    memory.bar(labels, proxy, bottom=replica, color=colors, label="proxy")
    memory.axhline(50, color="#555555", linestyle="--", linewidth=1, label="target: 50 KiB")
    memory.set_ylabel("PSS per open stream, KiB")
    memory.set_title("Memory per open stream (lower is better)")
    memory.legend(fontsize=8)
    memory.grid(True, axis="y", alpha=0.3)
    positions = range(len(runs))
    for position, r, color in zip(positions, runs, colors):
        points = [r["gap_p50_ms"], r["gap_p99_ms"], r["gap_max_ms"]]
        gaps.plot([position] * 3, points, color=color, linewidth=1)
        gaps.scatter([position] * 3, points, color=color, marker="o", s=[15, 40, 15])
    period = runs[0]["period_ms"]
    gaps.axhline(2 * period, color="#555555", linestyle="--", linewidth=1, label=f"target p99: 2 × {period:g} ms")
    gaps.set_xticks(list(positions), labels)
    gaps.set_yscale("log")
    gaps.set_ylabel("gap between events, ms (p50, p99 large, max)")
    gaps.set_title("Inter-event gap (lower is better)")
    gaps.legend(fontsize=8)
    gaps.grid(True, which="both", axis="y", alpha=0.3)
    fig.suptitle(f"Open SSE streams, {doc['figures']['rate']} events/s each for {doc['figures']['seconds']:g} s")
    return _saved(fig, doc, machine_info, out, "streams.png")


def _density(doc: dict[str, Any], machine_info: dict[str, Any], out: Path) -> str:
    """PSS per idle replica and the seconds until all were ready, per system."""
    import matplotlib.pyplot as plt

    runs = doc["figures"]["runs"]
    systems = [f"{r['system']}\n{r['replicas']}" for r in runs]
    colors = [STYLE.get(r["system"], ("#3182bd", "s", 1))[0] for r in runs]
    fig, (memory, ready) = plt.subplots(1, 2, figsize=(10, 4.8))
    memory.bar(systems, [r["replica_pss_mb"] for r in runs], color=colors)
    memory.set_ylabel("PSS per replica, MB")
    memory.set_title("Memory per idle replica (lower is better)")
    ready.bar(systems, [r["ready_s"] for r in runs], color=colors)
    ready.set_ylabel("seconds")
    ready.set_title("All replicas ready (lower is better)")
    for ax in (memory, ready):
        ax.grid(True, axis="y", alpha=0.3)
    fig.suptitle(f"{' and '.join(map(str, doc['figures']['replicas']))} idle replicas on one node")
    return _saved(fig, doc, machine_info, out, "density.png")


def soak_memory(samples: list[Any], faults: list[Any], path: Path, command: str) -> str:
    """PSS and anonymous memory over time per role (each process a thin line, a role's colour), faults as ticks.

    `samples` are `bench.soak_plan.Sample`, `faults` `bench.soak_plan.Injected`;
    returns the file name written beside the document ("" without matplotlib).
    """
    if not installed():
        return ""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    colours = {"agent": "tab:red", "controller": "tab:blue", "proxy worker": "tab:orange", "replica host": "tab:green"}
    fig, axes = plt.subplots(2, 1, figsize=(9, 8), sharex=True)
    for ax, field, label in ((axes[0], "mb", "PSS"), (axes[1], "anonymous_mb", "anonymous (judged)")):
        labelled: set[str] = set()
        for role, colour in colours.items():
            pids = sorted({s.pid for s in samples if s.role == role})
            for pid in pids:
                series = sorted((s.t / 60, getattr(s, field)) for s in samples if s.role == role and s.pid == pid)
                ax.plot([t for t, _ in series], [mb for _, mb in series], color=colour, linewidth=1.2,
                        label=None if role in labelled else role)
                labelled.add(role)
        for fault in faults:
            ax.axvline(fault.at / 60, color="#bbbbbb", linewidth=0.6, zorder=0)
        ax.set_ylabel(f"{label} per process (MB)")
        ax.grid(alpha=0.3)
    axes[0].set_title("Memory per component over the soak")
    axes[0].legend(loc="upper left", fontsize=8)
    axes[1].set_xlabel("minutes (grey lines: faults)")
    fig.text(0.01, 0.01, f"{machine.label(machine.describe())}\n{command}", fontsize=7, color="#555555", va="bottom")
    fig.subplots_adjust(bottom=0.12)
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path.name
