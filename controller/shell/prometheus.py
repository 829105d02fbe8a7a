"""Asking Prometheus the rollouts' PromQL checks: the controller's one HTTP client.

Owns the call to Prometheus' instant-query API (`GET /api/v1/query`) and
turning its answer into a `MetricReading`: the single number of a scalar or
a one-sample vector, or why there is none (unreachable, an HTTP or PromQL
error, no sample, several samples, NaN). It never raises for those: a
reading without a value is how the rollout learns the step cannot be judged.
It does not decide anything about a rollout (`controller.policies.rollouts` does).
"""

from __future__ import annotations

import asyncio
import math
import time
from typing import Any, Awaitable, Callable

import httpx

from vocabulary.control.rollouts import MetricQuery, MetricReading

__all__ = ["ask", "ask_all", "asker", "NO_PROMETHEUS"]

NO_PROMETHEUS = "no Prometheus to ask: the agent runs without --prometheus-url"


def asker(
    timeout_s: float,
) -> Callable[[str | None, tuple[MetricQuery, ...]], Awaitable[list[tuple[MetricQuery, MetricReading]]]]:
    """The controller's asker: each batch of queries to the Prometheus at `base_url`, on one short-lived client."""

    async def ask_batch(
        base_url: str | None, queries: tuple[MetricQuery, ...]
    ) -> list[tuple[MetricQuery, MetricReading]]:
        async with httpx.AsyncClient(timeout=timeout_s) as client:
            return await ask_all(client, base_url, queries)

    return ask_batch


async def ask_all(
    client: httpx.AsyncClient, base_url: str | None, queries: tuple[MetricQuery, ...],
    clock: Callable[[], float] = time.time,
) -> list[tuple[MetricQuery, MetricReading]]:
    """Every query's reading, asked concurrently; `base_url` None answers each with `NO_PROMETHEUS`."""
    if base_url is None:
        return [(query, _reading(query, clock(), error=NO_PROMETHEUS)) for query in queries]
    readings = await asyncio.gather(*(ask(client, base_url, query, clock) for query in queries))
    return list(zip(queries, readings))


async def ask(
    client: httpx.AsyncClient, base_url: str, query: MetricQuery, clock: Callable[[], float] = time.time
) -> MetricReading:
    url = base_url.rstrip("/") + "/api/v1/query"
    try:
        response = await client.get(url, params={"query": query.promql})
    except httpx.HTTPError as error:
        where = httpx.URL(base_url)  # host and port only: a URL's credentials stay out of status
        return _reading(query, clock(), error=f"Prometheus at {where.host}:{where.port} unreachable ({type(error).__name__})")
    at = clock()
    try:
        body = response.json()
    except ValueError:
        return _reading(query, at, error=f"Prometheus answered HTTP {response.status_code} without JSON")
    if body.get("status") != "success":
        return _reading(query, at, error=f"query failed: {body.get('error', f'HTTP {response.status_code}')}")
    value, problem = _single_number(body.get("data", {}))
    return _reading(query, at, value=value, error=problem)


def _single_number(data: dict[str, Any]) -> tuple[float | None, str | None]:
    kind, result = data.get("resultType"), data.get("result")
    if kind == "scalar":
        sample = result
    elif kind == "vector" and isinstance(result, list):
        if len(result) != 1:
            return None, f"the query returned {len(result)} series, not one number"
        sample = result[0].get("value")
    else:
        return None, f"the query returned a {kind}, not one number"
    if not isinstance(sample, list) or len(sample) != 2:
        return None, "the query's sample is not a [time, value] pair"
    value = float(sample[1])
    if math.isnan(value):
        return None, "the query returned NaN (no requests to divide by?)"
    return value, None


def _reading(query: MetricQuery, at: float, value: float | None = None, error: str | None = None) -> MetricReading:
    return MetricReading(check=query.check, backend=query.backend, at=at, value=value, error=error)
