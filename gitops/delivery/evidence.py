"""The numbers a promotion is judged on: requests, 5xx and shadow comparisons, from the proxies.

Each node's proxy serves its counters on its metrics port
(`gitops_http_requests_total{endpoint,backend,code}`,
`gitops_shadow_comparisons_total{endpoint,backend,result}`). `counts`
(pure) reads one scrape into `Counts`; `scrape` asks every proxy of the last
observed cluster status and adds them up. The counters are cumulative
since each proxy started: the promotion subtracts the counts taken when
the commit began to serve (`Counts.since`). A proxy that does not answer
makes the whole scrape None: a gate is never passed on partial numbers.
Must not: decide anything (`gitops.delivery.gates` does).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

import httpx
from prometheus_client.parser import text_string_to_metric_families

from vocabulary.control.status import ClusterStatus

__all__ = ["Counts", "counts", "metrics_urls", "scrape"]


@dataclass(frozen=True)
class Counts:
    requests: int = 0
    errors: int = 0  # 5xx answers
    compared: int = 0  # shadow replies compared
    mismatched: int = 0

    def plus(self, other: Counts) -> Counts:
        return Counts(
            self.requests + other.requests, self.errors + other.errors,
            self.compared + other.compared, self.mismatched + other.mismatched,
        )

    def since(self, earlier: Counts) -> Counts:
        """What was counted after `earlier`; a counter that went down restarted: all of it is new."""
        if self.requests < earlier.requests or self.compared < earlier.compared:
            return self
        return Counts(
            self.requests - earlier.requests, max(0, self.errors - earlier.errors),
            self.compared - earlier.compared, max(0, self.mismatched - earlier.mismatched),
        )


def counts(text: str) -> Counts:
    """One proxy's /metrics page as counts."""
    total = Counts()
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "gitops_http_requests_total":
                value = int(sample.value)
                is_error = sample.labels.get("code", "").startswith("5")
                total = total.plus(Counts(requests=value, errors=value if is_error else 0))
            elif sample.name == "gitops_shadow_comparisons_total":
                value = int(sample.value)
                total = total.plus(Counts(compared=value, mismatched=value if sample.labels.get("result") == "mismatch" else 0))
    return total


def metrics_urls(cluster: ClusterStatus | None, own_host: str, metrics_port: int) -> list[str]:
    """Each node's proxy metrics URL, each once; the agent's own node's until a status names one."""
    hosts = {proxy.address.rpartition(":")[0] for proxy in (cluster.proxies.values() if cluster else ()) if proxy.address}
    reachable = sorted(host if host not in ("", "0.0.0.0", "::") else "127.0.0.1" for host in hosts) or [own_host]
    return [f"http://{host}:{metrics_port}/metrics" for host in reachable]


async def scrape(urls: list[str], timeout_s: float = 2.0) -> Counts | None:
    """Every proxy's counts added up; None when one of them did not answer."""
    async with httpx.AsyncClient(timeout=timeout_s) as client:
        pages = await asyncio.gather(*(_page(client, url) for url in urls))
    if any(page is None for page in pages):
        return None
    total = Counts()
    for page in pages:
        assert page is not None
        total = total.plus(counts(page))
    return total


async def _page(client: httpx.AsyncClient, url: str) -> str | None:
    try:
        answer = await client.get(url)
    except httpx.HTTPError:
        return None
    return answer.text if answer.status_code == 200 else None
