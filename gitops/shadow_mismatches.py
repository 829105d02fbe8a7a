"""The agent's `GET /shadow/mismatches`: every proxy's sample of shadow mismatches, in one list.

Each proxy keeps its newest mismatches (path, both statuses, a short diff)
at `/-/shadow/mismatches` on its public port. `proxy_urls` (pure) names
every proxy of the last observed cluster status by its address (the
agent's own proxy until a status names one), `collect` asks each
concurrently, and `merge` (pure) puts the samples together newest
first, each tagged with its proxy, and lists the proxies that did not
answer (a proxy down is shown, not hidden).

A node's proxy workers share one address (SO_REUSEPORT), and which one
answers a new connection is the kernel's choice. So an address with
several workers behind it (`workers_at`) is asked `ASKS_PER_WORKER` times
as often, each on a new connection, and the distinct mismatches of all the
answers are kept: with 4 workers, the chance that one of them answered none
of the 32 asks is below 1 in 2,000 (4 × 0.75^32), and a worker's sample
missed once is there at the next look. The admin API serves the result
behind its token; the status page draws it. Must not: compare replies (the
proxy does) or keep mismatches itself.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any, Awaitable, Callable, Iterable

import httpx

from vocabulary.status import ClusterStatus

__all__ = ["collector", "collect", "merge", "proxy_url", "proxy_urls", "workers_at", "ASKS_PER_WORKER", "LIMIT"]

LIMIT = 100  # mismatches returned, newest first, over all proxies
ASKS_PER_WORKER = 8  # asks of an address per proxy worker behind it, when there are several
_PATH = "/-/shadow/mismatches"


def proxy_url(host: str, port: int) -> str:
    """The base URL the agent reaches a proxy listening on `host` at (a wildcard address: loopback)."""
    reachable = "127.0.0.1" if host in ("0.0.0.0", "", "::") else host
    return f"http://[{reachable}]:{port}" if ":" in reachable else f"http://{reachable}:{port}"


def proxy_urls(cluster: ClusterStatus | None, own: str) -> list[str]:
    """Every proxy's base URL in `cluster`, each once; `[own]` while it names none."""
    found = {"http://" + proxy.address for proxy in (cluster.proxies.values() if cluster else ()) if proxy.address}
    return sorted(found) or [own]


def workers_at(cluster: ClusterStatus | None) -> dict[str, int]:
    """Per base URL of `cluster`, how many proxy workers answer there."""
    found: dict[str, int] = {}
    for proxy in cluster.proxies.values() if cluster else ():
        if proxy.address:
            found["http://" + proxy.address] = found.get("http://" + proxy.address, 0) + 1
    return found


def collector(
    proxies: Callable[[], list[str]], timeout_s: float = 2.0, workers: Callable[[], dict[str, int]] | None = None,
) -> Callable[[], Awaitable[dict[str, Any]]]:
    """What the admin API calls per request: `collect` from the `proxies()` (and `workers()`) of the moment,
    on a short-lived client."""

    async def run() -> dict[str, Any]:
        async with httpx.AsyncClient(timeout=timeout_s) as client:
            return await collect(client, proxies(), workers() if workers is not None else None)

    return run


async def collect(
    client: httpx.AsyncClient, proxies: Iterable[str], workers: dict[str, int] | None = None,
) -> dict[str, Any]:
    """Every proxy's sample, merged; `proxies` are base URLs, `workers` how many workers answer at each (default 1)."""
    urls = list(proxies)
    answers = await asyncio.gather(*(_samples(client, url, (workers or {}).get(url, 1)) for url in urls))
    return merge(dict(zip(urls, answers)))


async def _samples(client: httpx.AsyncClient, url: str, workers: int) -> list[dict[str, Any]] | str:
    """One worker's sample; with several behind `url`, the distinct mismatches of many asks (see module doc)."""
    if workers <= 1:
        return await _sample(client, url)
    answers = await asyncio.gather(*(_sample(client, url, fresh=True) for _ in range(ASKS_PER_WORKER * workers)))
    samples = [answer for answer in answers if isinstance(answer, list)]
    if not samples:
        return next(answer for answer in answers if isinstance(answer, str))
    distinct = {json.dumps(m, sort_keys=True): m for sample in samples for m in sample}
    return list(distinct.values())


def merge(answers: dict[str, list[dict[str, Any]] | str]) -> dict[str, Any]:
    """`answers`: per proxy, its mismatches, or why it gave none. Newest first, at most `LIMIT`."""
    found = [
        {**mismatch, "proxy": proxy}
        for proxy, answer in answers.items() if isinstance(answer, list)
        for mismatch in answer
    ]
    found.sort(key=lambda mismatch: float(mismatch.get("at", 0.0)), reverse=True)
    unreachable = [{"proxy": proxy, "error": answer} for proxy, answer in sorted(answers.items()) if isinstance(answer, str)]
    return {"mismatches": found[:LIMIT], "unreachable": unreachable}


async def _sample(client: httpx.AsyncClient, url: str, fresh: bool = False) -> list[dict[str, Any]] | str:
    try:
        response = await client.get(url + _PATH, headers={"Connection": "close"} if fresh else None)
    except httpx.HTTPError as error:
        return f"unreachable ({type(error).__name__})"
    if response.status_code != 200:
        return f"HTTP {response.status_code}"
    try:
        body = response.json()
    except ValueError:
        return "answered without JSON"
    return body if isinstance(body, list) else "answered something other than a list"
