"""Routing policies on an LLM: prefix_affinity against power_of_two on the simulator.

The simulator (`deployments.apps.llm_sim`, 4 replicas) charges prefill time
for each prompt token not in the answering replica's prefix cache and a
fixed time per output token, so where the proxy sends a turn decides how
long its user waits. Two workloads, each run once per policy on fresh
replicas (cold caches):

- shared: 16 conversations of 20 turns each, all at once; each turn sends
  the whole conversation so far (a long system prompt of its own, then the
  turns), streamed;
- unshared: the same number of requests, each a prompt of its own.

Per run: time to first token (mean, p99: to the first SSE chunk), output
tokens per second over the run, and the share of prompt tokens served from
a cache. Then the routing decision itself, in-process: microseconds per
request (CPU time: the machine is shared) for each policy and kind of key,
the key's read included (4 replicas, a 20-turn chat body), and for a
`json:` key its read alone next to the whole-body parse it used to cost.

Ray Serve 2.60 serves the same simulator (`bench.routing_apps`: an
ingress deployment calling 4 simulator replicas through a handle, direct
ingress, access log off) with its `PrefixCacheAffinityRouter` and, for
reference, its default power-of-two router, named by each deployment's
`request_router_config`. Each system runs in a process of its own; the load
average before and after each is recorded (the machine is shared).

    python -m bench.routing [--tiny] [--json PATH] [--systems ours,serve]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import random
import subprocess
import sys
import time
import timeit
import uuid
from pathlib import Path
from typing import Any

import httpx

from bench import machine, results, stats
from bench.routing_apps import PUBLIC_ROUTER, ROUTERS
from bench.stacks import QUIET_RAY, free_port, own_ray, serve_installed, serve_measured

ROOT = Path(__file__).resolve().parent.parent
SYSTEMS = ("ours", "serve")
WORKLOADS = ("shared", "unshared")
POLICIES = ("prefix_affinity", "power_of_two")
SERVE_ROUTERS = ("prefix_cache_affinity", "power_of_two")
SERVE_ROUTERS_PATHS = {label: ROUTERS[label] for label in SERVE_ROUTERS}
DIRECT_INGRESS = {"RAY_SERVE_ENABLE_DIRECT_INGRESS": "1"}
REPLICAS = 4
TINY_REPLICAS = 2  # `make test`'s size: half the replica starts of each of the eight fresh deployments
SIM = {"prefill_s_per_token": 0.0005, "decode_s_per_token": 0.004, "max_tokens": 16}


def conversation_turns(conversation: int, turns: int) -> list[list[dict[str, str]]]:
    """The `messages` of each turn of one conversation: each extends the one before."""
    words = random.Random(conversation)
    system = f"conversation {conversation}: " + " ".join(f"w{words.randrange(10_000)}" for _ in range(200))
    messages = [{"role": "system", "content": system}]
    bodies = []
    for turn in range(turns):
        question = " ".join(f"q{words.randrange(10_000)}" for _ in range(40))
        messages = [*messages, {"role": "user", "content": f"turn {turn}: {question}"}]
        bodies.append(messages)
        messages = [*messages, {"role": "assistant", "content": " ".join(f"tok{n}" for n in range(16))}]
    return bodies


def unshared_prompts(count: int, seed: int, turns: int) -> list[list[dict[str, str]]]:
    """Prompts of the same sizes as the shared workload's, each of its own."""
    words = random.Random(seed)
    prompts = []
    for n in range(count):
        size = 200 + 56 * (n % turns) + 40
        prompts.append([{"role": "user", "content": f"prompt {n}-{seed}: " + " ".join(
            f"u{words.randrange(1_000_000)}" for _ in range(size))}])
    return prompts


async def _one(client: httpx.AsyncClient, messages: list[dict[str, str]]) -> tuple[float, int, int, int]:
    """(time to first token, output tokens, prompt tokens, cached prompt tokens) of one streamed turn."""
    started = time.perf_counter()
    first = math.nan
    tokens = prompt = cached = 0
    body = {"model": "sim", "messages": messages, "stream": True}
    async with client.stream("POST", "/v1/chat/completions", json=body) as answer:
        answer.raise_for_status()
        async for line in answer.aiter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            if math.isnan(first):
                first = time.perf_counter() - started
            chunk = json.loads(line[len("data: "):])
            tokens += 1
            usage = chunk.get("usage")
            if usage:
                prompt, cached = usage["prompt_tokens"], usage["prompt_tokens_details"]["cached_tokens"]
    return first, tokens, prompt, cached


async def run_workload(url: str, sessions: list[list[list[dict[str, str]]]]) -> dict[str, float]:
    """Each session's requests in order on its own connection, all sessions at once."""
    measured: list[tuple[float, int, int, int]] = []

    async def session(turns: list[list[dict[str, str]]]) -> None:
        async with httpx.AsyncClient(base_url=url, timeout=600) as client:
            for messages in turns:
                measured.append(await _one(client, messages))

    started = time.perf_counter()
    await asyncio.gather(*(session(turns) for turns in sessions))
    elapsed = time.perf_counter() - started
    ttft = sorted(m[0] for m in measured)
    prompt_tokens = sum(m[2] for m in measured)
    return {
        "requests": len(measured),
        "ttft_mean_s": sum(ttft) / len(ttft),
        "ttft_p99_s": stats.quantile(ttft, 0.99),
        "output_tokens_per_s": sum(m[1] for m in measured) / elapsed,
        "cached_share": sum(m[3] for m in measured) / prompt_tokens if prompt_tokens else math.nan,
        "elapsed_s": elapsed,
    }


def _sessions(workload: str, conversations: int, turns: int, run: int) -> list[list[list[dict[str, str]]]]:
    if workload == "shared":
        return [conversation_turns(n, turns) for n in range(conversations)]
    prompts = unshared_prompts(conversations * turns, run, turns)
    return [prompts[n::conversations] for n in range(conversations)]


def measure_ours(conversations: int, turns: int, replicas: int = REPLICAS) -> list[dict[str, Any]]:
    """Ours: the proxy in front of `replicas` simulator replicas, one fresh backend per (workload, policy)."""
    from controller.client import start_or_connect
    from controller.cluster import init_ray, shutdown_ray
    from vocabulary.control.goals import GoalState
    from vocabulary.spec.backends import BackendConfig
    from vocabulary.spec.endpoints import EndpointConfig
    from vocabulary.spec.routing import RoutingConfig
    from vocabulary.control.goal_api import PROXY_CLASS

    own_ray()
    init_ray(namespace=f"bench-{uuid.uuid4().hex[:6]}")
    port = free_port()
    client = start_or_connect(namespace=f"bench-{uuid.uuid4().hex[:6]}", proxy_port=port,
                              options={"proxy_class": PROXY_CLASS})
    runs: list[dict[str, Any]] = []
    previous: str | None = None
    try:
        for workload in WORKLOADS:
            for run, policy in enumerate(POLICIES):
                name = f"sim-{workload}-{run}"
                routing = RoutingConfig.model_validate(
                    {"policy": policy, **({"key": "json:messages"} if policy != "power_of_two" else {})}
                )

                async def deploy(name: str = name, routing: RoutingConfig = routing, previous: str | None = previous) -> None:
                    backend = BackendConfig(
                        name=name, version="v1", import_path="deployments.apps.llm_sim:LLMSim",
                        num_replicas=replicas, ray_actor_options={"num_cpus": 0}, user_config=SIM, routing=routing,
                    )
                    endpoint = EndpointConfig(name="v1", route="/v1", traffic={name: 1.0})
                    goals = [await client.apply_backend(backend), await client.apply_endpoint(endpoint)]
                    for goal in goals:
                        result = await client.wait_for_goal(goal, 300)
                        if result.state != GoalState.MET:
                            raise RuntimeError(f"goal not met: {result}")
                    if previous is not None:  # the last run's replicas (and caches) go
                        await client.wait_for_goal(await client.delete_backend(previous), 300)

                asyncio.run(deploy())
                figures = asyncio.run(run_workload(f"http://127.0.0.1:{port}",
                                                   _sessions(workload, conversations, turns, run)))
                runs.append({"system": "ours", "policy": policy, "workload": workload, **figures})
                previous = name
    finally:
        client.shutdown()
        shutdown_ray()
    return runs


def measure_serve(conversations: int, turns: int, replicas: int = REPLICAS) -> list[dict[str, Any]]:
    """Ray Serve 2.60 (direct ingress): `bench.routing_apps`, one fresh application per (workload, router)."""
    import logging

    import ray
    from ray import serve

    from bench.proxy import direct_targets, kill_haproxy
    from bench.routing_apps import serve_app
    from bench.serving import _new_target

    os.environ.update(QUIET_RAY)
    own_ray()
    ray.init(include_dashboard=False, logging_level=logging.ERROR, log_to_driver=False,
             namespace=f"bench-{uuid.uuid4().hex[:6]}")
    port = free_port()
    serve.start(http_options={"host": "127.0.0.1", "port": port})
    controller = ray.get_actor("SERVE_CONTROLLER_ACTOR", namespace="serve")
    runs: list[dict[str, Any]] = []
    previous: str | None = None
    try:
        for workload in WORKLOADS:
            for run, router in enumerate(SERVE_ROUTERS):
                name = f"sim-{workload}-{run}"
                if previous is not None:  # the last run's replicas (and caches) go
                    serve.delete(previous)
                stale = set(direct_targets(controller))
                serve.run(serve_app(router, replicas, SIM), name=name, route_prefix="/")
                url = _new_target(controller, stale).rstrip("/")
                figures = asyncio.run(run_workload(url, _sessions(workload, conversations, turns, run)))
                runs.append({"system": "serve", "policy": router, "workload": workload, **figures})
                previous = name
    finally:
        serve.shutdown()
        kill_haproxy(port)
        ray.shutdown()
    return runs


def in_subprocess(system: str, tiny: bool) -> list[dict[str, Any]]:
    """One system's runs in a process of its own (its own Ray; Serve's with direct ingress)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    if system == "serve":
        env.update(DIRECT_INGRESS)
    command = [sys.executable, "-m", "bench.routing", "--child", system, *(["--tiny"] if tiny else [])]
    done = subprocess.run(command, capture_output=True, text=True, env=env, cwd=ROOT, timeout=1800)
    lines = [line for line in done.stdout.splitlines() if line.startswith("[")]
    if done.returncode != 0 or not lines:
        raise RuntimeError(f"exit {done.returncode}: " + "\n".join(done.stderr.strip().splitlines()[-6:]))
    runs: list[dict[str, Any]] = json.loads(lines[-1])
    return runs


# (policy, key): every policy, and each kind of key for the two that read one.
DECISIONS = (
    ("power_of_two", None), ("round_robin", None), ("least_loaded", None),
    ("consistent_hash", "header:x-user"), ("consistent_hash", "cookie:session"),
    ("consistent_hash", "query:user"), ("consistent_hash", "json:user"), ("consistent_hash", "json:messages"),
    ("prefix_affinity", "header:x-user"), ("prefix_affinity", "json:messages"),
)


def decision_request() -> tuple[str, str, bytes, list[tuple[bytes, bytes]], bytes]:
    """An OpenAI chat request of a 20-turn conversation (~9 KB), with a user in a header, a cookie and the query."""
    body = json.dumps({"model": "sim", "messages": conversation_turns(0, 20)[-1], "stream": True,
                       "user": "user-17"}).encode()
    return ("POST", "/v1/chat/completions", b"api-version=1&user=user-17",
            [(b"x-user", b"user-17"), (b"cookie", b"theme=dark; session=s-17")], body)


def measure_decision() -> list[dict[str, Any]]:
    """CPU microseconds per routing decision, key read included (4 replicas; best of 7 x 2000), for each
    policy and key kind; for a `json:` key also the read alone, and the whole-body parse it replaced."""
    from vocabulary.request_path.policies import policy_for
    from vocabulary.request_path.request_keys import KeyReader, json_bytes, json_field
    from vocabulary.request_path.choosing import pick_replica
    from vocabulary.spec.routing import RoutingConfig

    rng = random.Random(0)
    ids = [f"sim#r{n}" for n in range(REPLICAS)]
    in_flight = [1, 0, 2, 1]
    request = decision_request()

    def micros(case: Any) -> float:
        # CPU time, not wall time: on a shared machine a wall clock also counts the
        # time this process waited for a core, which no decision costs.
        return min(timeit.repeat(case, number=2000, repeat=7, timer=time.process_time)) / 2000 * 1e6

    rows: list[dict[str, Any]] = []
    for policy, key in DECISIONS:
        config = RoutingConfig.model_validate({"policy": policy, **({"key": key} if key else {})})
        chosen = policy_for(config)
        reader = KeyReader.from_config(config)
        row: dict[str, Any] = {"policy": policy, "key": key or "–", "body_bytes": len(request[4])}
        if chosen is None:
            row["decision_us"] = micros(lambda: pick_replica(in_flight, 100, rng))
        else:
            chosen.members(ids)
            assert reader is not None or key is None

            def decide(chosen: Any = chosen, reader: KeyReader | None = reader) -> None:
                chosen.choose(in_flight, 100, None if reader is None else reader.read(request), rng)

            row["decision_us"] = micros(decide)
        if reader is not None and reader.kind.value == "json":
            row["read_us"] = micros(lambda reader=reader: reader.read(request))
            row["full_parse_read_us"] = micros(
                lambda reader=reader: json_bytes(json_field(request[4], reader.name), reader.limit))
        rows.append(row)
    return rows


def _load_average() -> float:
    return float(machine.describe()["load_average_1m"])  # type: ignore[arg-type]  # describe() holds a float there


def print_runs(runs: list[dict[str, Any]]) -> None:
    print(f"{'workload':<10} {'system':<7} {'policy':<22} {'TTFT mean':>10} {'TTFT p99':>10} {'tokens/s':>9} {'cached':>7}")
    for r in runs:
        print(f"{r['workload']:<10} {r['system']:<7} {r['policy']:<22} {r['ttft_mean_s'] * 1000:>8.1f}ms "
              f"{r['ttft_p99_s'] * 1000:>8.1f}ms {r['output_tokens_per_s']:>9.1f} {r['cached_share']:>7.1%}")


def print_decisions(rows: list[dict[str, Any]]) -> None:
    print(f"\nrouting decision per request, CPU time, key read included (4 replicas, {rows[0]['body_bytes']:,} B "
          "body; best of 7 x 2000):")
    for r in rows:
        extra = ""
        if "read_us" in r:
            extra = f"  (read {r['read_us']:.2f} us; whole-body parse {r['full_parse_read_us']:.2f} us)"
        print(f"  {r['policy']:<16} {r['key']:<16} {r['decision_us']:7.2f} us{extra}")


def main() -> int:
    parser = results.parser(__doc__.splitlines()[0])
    parser.add_argument("--systems", default=",".join(SYSTEMS))
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    conversations, turns = (4, 4) if args.tiny else (16, 20)
    replicas = TINY_REPLICAS if args.tiny else REPLICAS
    if args.child:
        measure = measure_serve if args.child == "serve" else measure_ours
        print(json.dumps(measure(conversations, turns, replicas)))
        return 0
    decision = measure_decision()
    runs: list[dict[str, Any]] = []
    failures: dict[str, str] = {}
    load: dict[str, list[float]] = {}
    for system in args.systems.split(","):
        if system == "serve" and not serve_installed():
            failures[system] = "Ray Serve is not installed (`pip install -e '.[bench]'`)"
            continue
        if system == "serve" and not serve_measured("routing", args.tiny):
            continue  # Serve's routers at the tiny size: `make bench` measures them
        print(f"measuring {system} ...", file=sys.stderr, flush=True)
        before = _load_average()
        try:
            runs += in_subprocess(system, args.tiny)
        except (RuntimeError, subprocess.TimeoutExpired) as error:
            failures[system] = str(error)
            print(f"  {system} failed: {error}", file=sys.stderr)
        load[system] = [before, _load_average()]
    print_runs(runs)
    print("load average (1 min) before and after: " + ", ".join(f"{s} {a:.2f} → {b:.2f}" for s, (a, b) in load.items()))
    for system, reason in failures.items():
        print(f"{system}: not measured: {reason}")
    print_decisions(decision)
    results.write(args.json, "routing", args.tiny, {
        "runs": runs, "failures": failures, "load_average": load, "decision_us": decision,
        "conversations": conversations, "turns": turns, "replicas": replicas, "sim": SIM,
        "serve_router": SERVE_ROUTERS_PATHS, "serve_public_router": PUBLIC_ROUTER,
    })
    return 0


if __name__ == "__main__":
    sys.exit(main())
