"""docs/metrics.md from the metric registries: name, type, labels and help of each."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

from prometheus_client import CollectorRegistry

__all__ = ["MetricRow", "metric_rows", "render_metrics"]

HEADER = (
    "<!-- Generated from gitops/metrics.py and proxy/metrics.py by `make docs`; "
    "edit the registries, not this file. -->\n"
)

_WHERE = {
    "agent": "the agent, on its admin port: `http://127.0.0.1:8001/metrics` by default",
    "proxy": "the proxies of every Ray node, on the node's one metrics port (any worker answers the sum of all "
    "the node's workers): `http://<node>:8002/metrics` by default",
}


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
        for family in collector.describe():
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
    return "\n".join(lines) + "\n"
