"""docs/reference/metrics.md from the metric registries: name, type, labels and help of each."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

from prometheus_client import CollectorRegistry

__all__ = ["MetricRow", "metric_rows", "render_metrics"]

HEADER = (
    "<!-- Generated from gitops/loop/metrics.py and proxy/observability/metrics.py by `make docs`; "
    "edit the registries, not this file. -->\n"
)

_WHERE = {
    "agent": "the agent, on its admin port: `http://127.0.0.1:8001/metrics` by default",
    "proxy": "the proxies of every Ray node, on the node's one metrics port (any worker answers the sum of all "
    "the node's workers): `http://<node>:8002/metrics` by default",
}


def _websocket_notes() -> list[str]:
    """How the proxy counts WebSocket sessions (the codes are `proxy.pipeline.websockets`')."""
    from proxy.pipeline import websockets as s

    return [
        "",
        "### WebSockets",
        "",
        "A WebSocket session is one request in `gitops_http_requests_total`, counted once, when it ends",
        "(an open session shows in `gitops_backend_ongoing_requests`: it holds a replica slot for its",
        "lifetime). Its `code` is the handshake's status the client got, or, for a session that failed",
        "after it, the 5xx a plain request (or a stream) gets for the same failure:",
        "",
        "| session | the client sees | `code` |",
        "| --- | --- | --- |",
        f"| accepted by the app, closed by either side with any code | 101, then the close | `{s.ACCEPTED}` |",
        f"| refused by the app at the handshake | 403 (or the app's own status) | `{s.REFUSED}` (or that status) |",
        f"| no free replica | 101, then close 1013 | `{s.NO_REPLICA}` |",
        f"| the replica died | 101, then close 1011 | `{s.REPLICA_DIED}` |",
        f"| the app raised | 101, then close 1011 | `{s.APP_FAILED}` |",
        f"| the client left before the app answered | - | `{s.CLIENT_LEFT}` |",
        "| no route, no route table yet, a refused path | 403 | not counted (no endpoint, as a 404) |",
        "",
        "The 5xx sessions count toward a rollout's error share like 5xx answers, and every session but a",
        "499 toward its `min_requests`. A session's lifetime is not a request duration: sessions are",
        "never in `gitops_http_request_duration_seconds` nor in a rollout's p99 (minutes-long sessions",
        "would swamp the latency of plain requests). The time from the handshake to the app's accept is",
        "the session's `gitops_http_time_to_first_byte_seconds`, observed at the accept.",
    ]


@dataclass(frozen=True, order=True)
class MetricRow:
    """One metric as Prometheus scrapes it (a counter's name ends in `_total`)."""

    name: str
    type: str
    labels: tuple[str, ...]
    help: str


def metric_rows(registry: CollectorRegistry) -> list[MetricRow]:
    rows = []
    # prometheus_client keeps a registry's collectors in this mapping; a
    # collector's label names are not part of its described families.
    for collector in registry._collector_to_names:
        labels = tuple(getattr(collector, "_labelnames", ()))
        describe = getattr(collector, "describe", collector.collect)  # as the registry falls back
        for family in describe():
            name = family.name + ("_total" if family.type == "counter" else "")
            rows.append(MetricRow(name, family.type, labels, family.documentation))
    return sorted(rows)


def render_metrics(registries: Mapping[str, CollectorRegistry]) -> str:
    lines = [
        HEADER,
        "# Metrics",
        "",
        "Every metric ray-gitops exports, by the process that exports it. Labels come from the",
        "specs (endpoint, backend names), never from requests. Histograms also carry `le` and",
        "export `_bucket`, `_sum` and `_count` series. Scrape config, alerts and a Grafana",
        "dashboard are in `monitoring/`.",
    ]
    for where, registry in registries.items():
        lines += ["", f"## {where.capitalize()}", "", f"Exported by {_WHERE.get(where, where)}.", ""]
        lines += ["| name | type | labels | help |", "| --- | --- | --- | --- |"]
        lines += [
            f"| `{row.name}` | {row.type} | {', '.join(f'`{label}`' for label in row.labels) or '-'} | {row.help} |"
            for row in metric_rows(registry)
        ]
        if where == "proxy":
            lines += _websocket_notes()
    return "\n".join(lines) + "\n"
