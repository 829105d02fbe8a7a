"""The agent's `GET /shadow/mismatches`: every proxy's sample of shadow mismatches, in one list.

Each proxy keeps its newest mismatches (path, both statuses, a short diff
that names JSON paths and types, not users' values, unless the endpoint
opts in) and answers them to a Ray call (`ProxyActor.shadow_mismatches`),
never on its public port: Ray's authentication guards the sample, and the
admin API serves the result behind its token. `proxies_to_ask` (pure)
names one running proxy worker per address in the last observed cluster
status, since a node's proxy workers share one address and each answers
the whole node's mismatches (`proxy.observability.node_mismatches`); `collect` asks each
concurrently (through `ask`, the controller client's
`proxy_mismatches`), and `merge` (pure) puts the samples together newest
first, each tagged with its proxy's address, and lists the proxies that did
not answer (a proxy down is shown, not hidden). The status page draws it.
Must not: compare replies (the proxy does) or keep mismatches itself.
"""

from __future__ import annotations

import asyncio
from typing import Any, Awaitable, Callable

from vocabulary.control.status import ClusterStatus, ProxyState

__all__ = ["Ask", "collector", "collect", "merge", "proxies_to_ask", "LIMIT"]

LIMIT = 100  # mismatches returned, newest first, over all proxies

# A proxy worker's sample by its actor name, or why it gave none.
Ask = Callable[[str], Awaitable[list[dict[str, Any]] | str]]


def proxies_to_ask(cluster: ClusterStatus | None) -> dict[str, str]:
    """Per proxy address (`http://host:port`), the actor name of one running worker there (the lowest)."""
    chosen: dict[str, tuple[int, str]] = {}
    for proxy in cluster.proxies.values() if cluster else ():
        if proxy.state is not ProxyState.RUNNING:
            continue
        where = "http://" + proxy.address if proxy.address else proxy.actor_name
        if where not in chosen or proxy.worker < chosen[where][0]:
            chosen[where] = (proxy.worker, proxy.actor_name)
    return {where: name for where, (_, name) in sorted(chosen.items())}


def collector(
    ask: Ask, proxies: Callable[[], dict[str, str]], timeout_s: float = 2.0
) -> Callable[[], Awaitable[dict[str, Any]]]:
    """What the admin API calls per request: `collect` from the `proxies()` of the moment."""

    async def run() -> dict[str, Any]:
        return await collect(ask, proxies(), timeout_s)

    return run


async def collect(ask: Ask, proxies: dict[str, str], timeout_s: float = 2.0) -> dict[str, Any]:
    """Every proxy's sample, merged; `proxies`: address -> the actor name to ask."""
    names = list(proxies.items())
    answers = await asyncio.gather(*(_sample(ask, name, timeout_s) for _, name in names))
    return merge({where: answer for (where, _), answer in zip(names, answers)})


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


async def _sample(ask: Ask, name: str, timeout_s: float) -> list[dict[str, Any]] | str:
    try:
        async with asyncio.timeout(timeout_s):
            answer = await ask(name)
    except TimeoutError:
        return f"no answer within {timeout_s:g} s"
    if isinstance(answer, list) and all(isinstance(mismatch, dict) for mismatch in answer):
        return answer
    return answer if isinstance(answer, str) else "answered something other than a list"
