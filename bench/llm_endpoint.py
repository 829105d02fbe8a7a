"""The OpenAI endpoint's overhead: TTFT and tokens/s through our proxy against the same engine served directly.

One engine, the built-in CPU engine (`ngram`, trained on its own corpus),
behind the same OpenAI layer (`ray_gitops.llm.http.OpenAIApp`), two ways:

- direct: that app served by uvicorn on loopback in a process of its own
  (an engine's own OpenAI server, as `vllm serve` is one);
- ours: a `[backends.X.llm]` backend (one replica, the built-in app) behind
  our controller and proxy, on a local Ray of this process's own.

The same client (this process, httpx) sends streamed chat completions
(`max_tokens` each, temperature 0: every answer the same length) to each,
one system after the other in alternating rounds so both see the same
machine load; at each concurrency (requests in flight at once) it records
per request the time to the first content chunk (TTFT) and its tokens per
second (its tokens over its whole time: a relay that sends several tokens
in one chunk cannot flatter it, as it would a first-to-last-chunk gap), and
over a round the output tokens per second. Figures: each round's median
and p99 TTFT, median request time and tokens/s, and throughput, as medians
of the rounds with [min–max]; ours over direct is the overhead (issue 43's
target: ≤ 5%). The CPU engine makes ~10⁴ tokens/s, far more than a GPU
model's 10–100 per request, so the per-token share of our cost is at its
worst here: the overhead rows also say what the proxy adds per request
and per token, in time. A second series runs the same engine at a GPU
model's pace (`bench.llm_paced`: the first token after
`bench.targets.GPU_TTFT_S`, then one each `GPU_TOKEN_S`), the pace an
endpoint's clients meet; both series are reported, the engine's own speed
first.

    python -m bench.llm_endpoint [--tiny] [--json PATH]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any, NamedTuple

import httpx

from bench import machine, results, stats
from bench.stacks import free_port, own_ray, poll
from bench.targets import GPU_TOKEN_S, GPU_TTFT_S

ROOT = Path(__file__).resolve().parent.parent
SYSTEMS = ("direct", "ours")
MODEL = "tiny-ngram"
LLM = {"engine": "ngram", "served_model_name": MODEL}
PROMPT = [{"role": "user", "content": "what does the proxy do with a request ?"}]


class Shape(NamedTuple):
    """How much one series sends: `rounds` of `requests` at each of `concurrencies`, `max_tokens` each."""

    rounds: int
    requests: int
    concurrencies: tuple[int, ...]
    max_tokens: int


FULL = Shape(5, 200, (1, 8), 128)
TINY = Shape(2, 8, (1, 4), 32)  # a few seconds of requests
# The GPU-paced series: fewer and shorter requests (~30 s a round).
PACED_FULL = Shape(3, 12, (1, 8), 48)
PACED_TINY = Shape(2, 3, (1, 4), 8)


async def _one(client: httpx.AsyncClient, max_tokens: int) -> tuple[float, float, int]:
    """(TTFT, whole time, completion tokens) of one streamed chat completion."""
    body = {"model": MODEL, "messages": PROMPT, "max_tokens": max_tokens, "temperature": 0, "stream": True,
            "stream_options": {"include_usage": True}}
    started = time.perf_counter()
    first = math.nan
    tokens = 0
    async with client.stream("POST", "/v1/chat/completions", json=body) as answer:
        answer.raise_for_status()
        async for line in answer.aiter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[len("data: "):])
            if chunk.get("usage"):
                tokens = chunk["usage"]["completion_tokens"]
            if math.isnan(first) and chunk.get("choices") and chunk["choices"][0]["delta"].get("content"):
                first = time.perf_counter()
    return first - started, time.perf_counter() - started, tokens


async def run_round(url: str, requests: int, concurrency: int, max_tokens: int) -> dict[str, float]:
    """`requests` streamed completions, `concurrency` at a time (each on a connection of its own)."""
    measured: list[tuple[float, float, int]] = []

    async def session(client: httpx.AsyncClient, count: int) -> None:
        for _ in range(count):
            measured.append(await _one(client, max_tokens))

    # Every client is made before any request: making one (its TLS context) takes ~40 ms of this loop,
    # which would count in the first tokens of the requests already sent.
    clients = [httpx.AsyncClient(base_url=url, timeout=120) for _ in range(concurrency)]
    try:
        started = time.perf_counter()
        await asyncio.gather(*(session(client, len(range(n, requests, concurrency)))
                               for n, client in enumerate(clients)))
        elapsed = time.perf_counter() - started
    finally:
        for client in clients:
            await client.aclose()
    ttft = sorted(m[0] for m in measured)
    return {
        "ttft_p50_s": stats.quantile(ttft, 0.5),
        "ttft_p99_s": stats.quantile(ttft, 0.99),
        # The same nearest-rank estimator as the TTFT's: a request's first token never comes after its end,
        # and so neither does their p50 (statistics.median of an even count would average two requests).
        "request_p50_s": stats.quantile(sorted(m[1] for m in measured), 0.5),
        "request_tokens_per_s": statistics.median(m[2] / m[1] for m in measured),
        "output_tokens_per_s": sum(m[2] for m in measured) / elapsed,
    }


def serve_direct(port: int, paced: bool) -> None:
    """The direct system: the OpenAI app over the CPU engine (at a GPU's pace when `paced`),
    served by uvicorn (runs until killed)."""
    import uvicorn

    from bench.llm_paced import PacedEngine
    from ray_gitops.llm.app import build_engine
    from ray_gitops.llm.http import OpenAIApp
    from vocabulary.spec.llm import LLMConfig

    engine = build_engine(LLMConfig.model_validate(LLM), None)
    app = OpenAIApp(PacedEngine(engine, GPU_TTFT_S, GPU_TOKEN_S) if paced else engine)
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning", access_log=False, lifespan="off")


def _ready(url: str) -> bool:
    return httpx.get(f"{url}/v1/models", timeout=2).json()["data"][0]["id"] == MODEL


def start_direct(paced: bool) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    process = subprocess.Popen([sys.executable, "-m", "bench.llm_endpoint", "--serve-direct", str(port),
                                *(["--paced"] if paced else [])], cwd=ROOT, env=env)
    url = f"http://127.0.0.1:{port}"
    poll(lambda: _ready(url), 60, "the direct OpenAI server")
    return process, url


def start_ours() -> tuple[Any, str]:
    """Our controller and proxy on a local Ray of this process's own, the [llm] backend on one replica
    under /v1 and the same backend at a GPU's pace (`bench.llm_paced`) under /paced/v1."""
    from controller.client import start_or_connect
    from controller.cluster import init_ray
    from vocabulary.control.goal_api import PROXY_CLASS
    from vocabulary.control.goals import GoalState
    from vocabulary.spec.backends import BackendConfig
    from vocabulary.spec.endpoints import EndpointConfig
    from vocabulary.spec.llm import BUILTIN_APP

    own_ray()
    namespace = f"bench-{uuid.uuid4().hex[:6]}"
    init_ray(namespace=namespace)
    port = free_port()
    client = start_or_connect(namespace=namespace, proxy_port=port, options={"proxy_class": PROXY_CLASS})

    async def deploy() -> None:
        backend = BackendConfig(name="chat", version="v1", import_path=BUILTIN_APP, init_kwargs={"llm": LLM},
                                num_replicas=1, ray_actor_options={"num_cpus": 0})
        paced = BackendConfig(name="paced", version="v1", import_path="bench.llm_paced:PacedBackend",
                              init_kwargs={"llm": LLM, "first_s": GPU_TTFT_S, "token_s": GPU_TOKEN_S}, num_replicas=1,
                              ray_actor_options={"num_cpus": 0})
        goals = [await client.apply_backend(backend), await client.apply_backend(paced),
                 await client.apply_endpoint(EndpointConfig(name="chat", route="/v1", traffic={"chat": 1.0})),
                 await client.apply_endpoint(EndpointConfig(name="paced", route="/paced", traffic={"paced": 1.0}))]
        for goal in goals:
            result = await client.wait_for_goal(goal, 300)
            if result.state != GoalState.MET:
                raise RuntimeError(f"goal not met: {result}")

    asyncio.run(deploy())
    url = f"http://127.0.0.1:{port}"
    poll(lambda: _ready(url), 60, "our proxy's OpenAI endpoint")
    poll(lambda: _ready(f"{url}/paced"), 60, "our proxy's GPU-paced OpenAI endpoint")
    return client, url


def measure(shape: Shape, paced: Shape) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Per (system, concurrency): each figure as a spread over the rounds, the systems alternating;
    the engine at its own speed in the `shape` given, then at a GPU's pace in `paced`."""
    from controller.cluster import shutdown_ray

    direct, direct_url = start_direct(paced=False)
    direct_paced, direct_paced_url = start_direct(paced=True)
    client = None
    try:
        client, ours_url = start_ours()
        own = _alternated({"direct": direct_url, "ours": ours_url}, *shape)
        at_pace = _alternated({"direct": direct_paced_url, "ours": f"{ours_url}/paced"}, *paced)
    finally:
        for process in (direct, direct_paced):
            process.kill()
            process.wait()
        if client is not None:
            client.shutdown()
        shutdown_ray()
    return own, at_pace


def _alternated(urls: dict[str, str], rounds: int, requests: int, concurrencies: tuple[int, ...],
                max_tokens: int) -> list[dict[str, Any]]:
    for url in urls.values():  # warm both: connections, the engine's first request
        asyncio.run(run_round(url, 2, 1, max_tokens))
    measured: dict[tuple[str, int], list[dict[str, float]]] = {}
    for _ in range(rounds):
        for concurrency in concurrencies:
            for system in SYSTEMS:
                figures = asyncio.run(run_round(urls[system], requests, concurrency, max_tokens))
                measured.setdefault((system, concurrency), []).append(figures)
    return [
        {"system": system, "concurrency": concurrency,
         **{name: stats.spread(r[name] for r in runs) for name in runs[0]}}
        for (system, concurrency), runs in measured.items()
    ]


def overheads(runs: list[dict[str, Any]], max_tokens: int) -> list[dict[str, Any]]:
    """Ours against direct at each concurrency (medians): TTFT p50, a request's tokens/s and the throughput
    as ratios; the time added to the first token, to a request and per token (a request's added time
    over its `max_tokens`)."""
    rows = []
    for concurrency in sorted({r["concurrency"] for r in runs}):
        at = {r["system"]: r for r in runs if r["concurrency"] == concurrency}
        if set(at) != set(SYSTEMS):
            continue
        ours, direct = at["ours"], at["direct"]
        added = ours["request_p50_s"]["median"] - direct["request_p50_s"]["median"]
        rows.append({
            "concurrency": concurrency,
            "ttft_added_s": ours["ttft_p50_s"]["median"] - direct["ttft_p50_s"]["median"],
            "ttft_ratio": ours["ttft_p50_s"]["median"] / direct["ttft_p50_s"]["median"],
            "request_added_s": added,
            "token_added_s": added / max_tokens,
            "tokens_ratio": ours["request_tokens_per_s"]["median"] / direct["request_tokens_per_s"]["median"],
            "throughput_ratio": ours["output_tokens_per_s"]["median"] / direct["output_tokens_per_s"]["median"],
        })
    return rows


def print_runs(runs: list[dict[str, Any]], rows: list[dict[str, Any]]) -> None:
    print(f"{'system':<7} {'in flight':>9} {'TTFT p50':>10} {'TTFT p99':>10} {'request p50':>12} "
          f"{'request tok/s':>14} {'output tok/s':>13}")
    for r in sorted(runs, key=lambda r: (r["concurrency"], r["system"])):
        print(f"{r['system']:<7} {r['concurrency']:>9} {r['ttft_p50_s']['median'] * 1e3:>8.2f}ms "
              f"{r['ttft_p99_s']['median'] * 1e3:>8.2f}ms {r['request_p50_s']['median'] * 1e3:>10.2f}ms "
              f"{r['request_tokens_per_s']['median']:>14,.0f} {r['output_tokens_per_s']['median']:>13,.0f}")
    for o in rows:
        print(f"ours vs direct, {o['concurrency']} in flight: TTFT p50 {o['ttft_ratio']:.2f}x "
              f"({o['ttft_added_s'] * 1e3:+.2f} ms), a request's tokens/s {o['tokens_ratio']:.2f}x "
              f"({o['request_added_s'] * 1e3:+.2f} ms a request, {o['token_added_s'] * 1e6:+.0f} us a token), "
              f"throughput {o['throughput_ratio']:.2f}x")


def main() -> int:
    parser = results.parser(__doc__.splitlines()[0])
    parser.add_argument("--serve-direct", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--paced", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve_direct:
        serve_direct(args.serve_direct, args.paced)
        return 0
    shape, paced_shape = (TINY, PACED_TINY) if args.tiny else (FULL, PACED_FULL)
    before = float(machine.describe()["load_average_1m"])  # type: ignore[arg-type]  # a float there
    runs, paced_runs = measure(shape, paced_shape)
    rows, paced_rows = overheads(runs, shape.max_tokens), overheads(paced_runs, paced_shape.max_tokens)
    print(f"the engine at its own speed ({LLM['engine']}):")
    print_runs(runs, rows)
    print(f"\nthe same engine at a GPU model's pace (first token {GPU_TTFT_S * 1e3:g} ms, then {GPU_TOKEN_S * 1e3:g} ms "
          "each):")
    print_runs(paced_runs, paced_rows)
    results.write(args.json, "llm_endpoint", args.tiny, {
        "runs": runs, "overhead": rows, "rounds": shape.rounds, "requests": shape.requests,
        "max_tokens": shape.max_tokens,
        "engine": LLM["engine"],
        "paced": {"first_s": GPU_TTFT_S, "token_s": GPU_TOKEN_S, "runs": paced_runs, "overhead": paced_rows,
                  "rounds": paced_shape.rounds, "requests": paced_shape.requests,
                  "max_tokens": paced_shape.max_tokens},
        "load_average": [before, float(machine.describe()["load_average_1m"])],  # type: ignore[arg-type]
    })
    return 0


if __name__ == "__main__":
    sys.exit(main())
