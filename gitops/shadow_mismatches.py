"""The agent's `GET /shadow/mismatches`: every proxy's sample of shadow mismatches, in one list.

Each proxy keeps its newest mismatches (path, both statuses, a short diff)
at `/-/shadow/mismatches` on its public port. `proxy_urls` (pure) names
every proxy of the last observed cluster status by its address (the
agent's own proxy until a status names one), `collect` asks each
concurrently, and `merge` (pure) puts the samples together newest
first, each tagged with its proxy, and lists the proxies that did not
answer (a proxy down is shown, not hidden). A node's proxy workers share
one address and each answers the whole node's mismatches
(`proxy.node_mismatches`), so one ask per address hears them all. The admin API serves the result
behind its token; the status page draws it. Must not: compare replies (the
proxy does) or keep mismatches itself.
"""

from __future__ import annotations

import asyncio
from typing import Any, Awaitable, Callable, Iterable

import httpx

from vocabulary.status import ClusterStatus

__all__ = ["collector", "collect", "merge", "proxy_url", "proxy_urls", "LIMIT"]

LIMIT = 100  # mismatches returned, newest first, over all proxies
_PATH = "/-/shadow/mismatches"


def proxy_url(host: str, port: int) -> str:
    """The base URL the agent reaches a proxy listening on `host` at (a wildcard address: loopback)."""
    reachable = "127.0.0.1" if host in ("0.0.0.0", "", "::") else host
    return f"http://[{reachable}]:{port}" if ":" in reachable else f"http://{reachable}:{port}"


def proxy_urls(cluster: ClusterStatus | None, own: str) -> list[str]:
    """Every proxy's base URL in `cluster`, each once; `[own]` while it names none."""
    found = {"http://" + proxy.address for proxy in (cluster.proxies.values() if cluster else ()) if proxy.address}
    return sorted(found) or [own]


def collector(proxies: Callable[[], list[str]], timeout_s: float = 2.0) -> Callable[[], Awaitable[dict[str, Any]]]:
    """What the admin API calls per request: `collect` from the `proxies()` of the moment, on a short-lived client."""

    async def run() -> dict[str, Any]:
        async with httpx.AsyncClient(timeout=timeout_s) as client:
            return await collect(client, proxies())

    return run


async def collect(client: httpx.AsyncClient, proxies: Iterable[str]) -> dict[str, Any]:
    """Every proxy's sample, merged; `proxies` are base URLs."""
    urls = list(proxies)
    answers = await asyncio.gather(*(_sample(client, url) for url in urls))
    return merge(dict(zip(urls, answers)))


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


async def _sample(client: httpx.AsyncClient, url: str) -> list[dict[str, Any]] | str:
    try:
        response = await client.get(url + _PATH)
    except httpx.HTTPError as error:
        return f"unreachable ({type(error).__name__})"
    if response.status_code != 200:
        return f"HTTP {response.status_code}"
    try:
        body = response.json()
    except ValueError:
        return "answered without JSON"
    return body if isinstance(body, list) else "answered something other than a list"
