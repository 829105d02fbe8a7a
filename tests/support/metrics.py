"""Reading one value out of a metrics page.

Moved out of tests/pure/test_metrics_proxy.py, whose tests use them too."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from proxy.observability.metrics import ProxyMetrics


def value(metrics: ProxyMetrics, name: str, **labels: str) -> float | None:
    for family in text_string_to_metric_families(metrics.render().decode()):
        for sample in family.samples:
            if sample.name == name and sample.labels == labels:
                return sample.value
    return None
