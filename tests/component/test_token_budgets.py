"""The token budget stage (`proxy.pipeline.stages.budget`) in the proxy app over fake replicas: a tenant
over its tokens_per_minute is answered 429 in OpenAI's shape while another is served, whole and
streamed answers settle on their usage, failures give the estimate back; the node's shared buckets
hold a budget across workers; the per-tenant counters and their bound."""

from __future__ import annotations

import asyncio
import json
import math
import random
from pathlib import Path
from typing import Any

from proxy.app import ProxyApp
from proxy.observability.metrics import TENANT_LABELS, ProxyMetrics
from proxy.routes.subscriptions import Subscriptions
from proxy.routes.rate_limits import LocalBuckets
from proxy.settings import ProxySettings
from proxy.shell.shared_buckets import SharedBuckets
from tests.support.proxy_app import FakeReplica, Proxy, Recorded, replica_set, run
from tests.support.streams import StreamingCaller, StreamingReplica
from vocabulary.control.longpoll import ReplicaInfo, ReplicaSet, RouteEntry, RouteTable
from vocabulary.request_path.wire import WireRequest, WireResponse
from vocabulary.spec.endpoints import EndpointConfig, LimitsConfig

JSON = [(b"content-type", b"application/json")]
# 600 a minute: 10 a second, a bucket of 600.
BUDGET = LimitsConfig(tokens_per_minute=600, key="header:authorization")


class Tokens(Recorded):
    """Keeps the token counts the stage reports."""

    def __init__(self) -> None:
        super().__init__()
        self.admitted: list[tuple[str, str, int]] = []
        self.charged: list[tuple[str, str, int]] = []
        self.token_refused: list[tuple[str, str]] = []

    def tokens_admitted(self, endpoint: str, tenant: str, tokens: int) -> None:
        self.admitted.append((endpoint, tenant, tokens))

    def tokens_charged(self, endpoint: str, tenant: str, tokens: int) -> None:
        self.charged.append((endpoint, tenant, tokens))

    def token_limited(self, endpoint: str, tenant: str) -> None:
        self.token_refused.append((endpoint, tenant))


def usage_replica(total: int, status: int = 200) -> FakeReplica:
    async def handler(request: WireRequest) -> WireResponse:
        if status != 200:
            return status, JSON, b'{"error": {"message": "engine failed"}}'
        reply = {"object": "chat.completion", "choices": [{"message": {"content": "x"}}],
                 "usage": {"prompt_tokens": total // 2, "completion_tokens": total - total // 2, "total_tokens": total}}
        return 200, JSON, json.dumps(reply).encode()
    return FakeReplica("sim", handler)


def chat(max_tokens: int, pad: int = 0) -> bytes:
    return json.dumps({"model": "sim", "max_tokens": max_tokens,
                       "messages": [{"role": "user", "content": "x" * pad}]}).encode()


def proxy_with(replica: FakeReplica, limits: LimitsConfig = BUDGET) -> Proxy:
    proxy = Proxy()
    proxy.recorded = Tokens()
    proxy.app = ProxyApp(proxy.app.caller, ProxySettings(), recorder=proxy.recorded)
    proxy.serve("chat", "/v1", {"sim": [replica]}, limits=limits)
    return proxy


async def post(proxy: Proxy, tenant: str, body: bytes) -> Any:
    async with proxy.client() as client:
        return await client.post("/v1/chat/completions", content=body, headers={"authorization": f"Bearer {tenant}"})


def test_a_tenant_over_its_tokens_is_refused_in_openai_s_shape_while_another_is_served() -> None:
    replica = usage_replica(500)
    proxy = proxy_with(replica)
    body = chat(max_tokens=200)
    estimated = math.ceil(len(body) / 4) + 200

    async def scenario() -> list[Any]:
        return [await post(proxy, "ada", body), await post(proxy, "ada", body), await post(proxy, "bob", body)]

    first, second, other = run(scenario())
    assert first.status_code == 200 and other.status_code == 200
    assert second.status_code == 429
    # 600 - 500 used = 100 left: the estimate is there after (estimated - 100) / 10 s.
    assert int(second.headers["retry-after"]) == math.ceil((estimated - 100) / 10)
    assert second.headers["content-type"] == "application/json"
    error = second.json()["error"]
    assert (error["type"], error["code"]) == ("rate_limit_exceeded", "rate_limit_exceeded")
    assert len(replica.seen) == 2  # the refused one never left the proxy
    recorded = proxy.recorded
    assert isinstance(recorded, Tokens)
    ada, bob = recorded.admitted[0][1], recorded.admitted[1][1]
    assert recorded.admitted == [("chat", ada, estimated), ("chat", bob, estimated)]
    assert recorded.charged == [("chat", ada, 500), ("chat", bob, 500)]
    assert recorded.token_refused == [("chat", ada)] and ada != bob
    assert ("chat", "sim", 429) in recorded.requests  # counted, as any answer after the body was read


def test_an_answer_using_less_than_its_estimate_gives_the_rest_back() -> None:
    proxy = proxy_with(usage_replica(10))
    body = chat(max_tokens=400)  # an estimate of about 450 of the 600, each time

    async def scenario() -> list[int]:
        return [(await post(proxy, "ada", body)).status_code for _ in range(5)]

    assert run(scenario()) == [200] * 5  # 10 used each: without the refunds the second would wait


def test_a_failed_answer_without_usage_gives_its_estimate_back() -> None:
    proxy = proxy_with(usage_replica(0, status=503))
    body = chat(max_tokens=500)

    async def scenario() -> list[int]:
        return [(await post(proxy, "ada", body)).status_code for _ in range(3)]

    assert run(scenario()) == [503, 503, 503]  # never 429: the engine spent nothing


def test_a_success_without_usage_keeps_its_estimate() -> None:
    async def plain(request: WireRequest) -> WireResponse:
        return 200, JSON, b'{"ok": true}'

    proxy = proxy_with(FakeReplica("sim", plain))
    body = chat(max_tokens=400)

    async def scenario() -> list[int]:
        return [(await post(proxy, "ada", body)).status_code for _ in range(2)]

    assert run(scenario()) == [200, 429]
    assert isinstance(proxy.recorded, Tokens) and proxy.recorded.charged == []


def test_a_tenant_key_sent_twice_is_refused_400_naming_it() -> None:
    proxy = proxy_with(usage_replica(10))

    async def twice() -> Any:
        async with proxy.client() as client:
            return await client.post("/v1/chat/completions", content=chat(10),
                                     headers=[("authorization", "Bearer a"), ("authorization", "Bearer b")])

    answer = run(twice())
    assert answer.status_code == 400 and "header authorization" in answer.text


def test_an_endpoint_without_tokens_per_minute_has_no_budget_stage() -> None:
    proxy = proxy_with(usage_replica(10), LimitsConfig(requests_per_s=100, burst=100))
    chain = proxy.app._chains["chat"]
    assert "TokenBudgeting" not in chain.stages("formed") + chain.stages("streaming") + chain.stages("answered")
    assert run(post(proxy, "ada", chat(max_tokens=10_000))).status_code == 200
    assert isinstance(proxy.recorded, Tokens) and proxy.recorded.admitted == []


# --- streamed answers ---------------------------------------------------------------------------

USAGE_EVENT = b'data: {"choices": [], "usage": {"prompt_tokens": 50, "completion_tokens": 550, "total_tokens": 600}}\n\n'


class Charges(LocalBuckets):
    """This process's buckets, keeping what each settlement charged."""

    def __init__(self) -> None:
        super().__init__()
        self.charges: list[float] = []

    def charge(self, slot: int, rate: float, burst: int, now: float, amount: float) -> None:
        self.charges.append(amount)
        super().charge(slot, rate, burst, now, amount)


def streaming_app(recorder: Tokens, replica: StreamingReplica, buckets: LocalBuckets | None = None) -> ProxyApp:
    app = ProxyApp(StreamingCaller(), ProxySettings(), recorder=recorder, buckets=buckets)  # type: ignore[arg-type]  # fakes
    config = EndpointConfig(name="chat", route="/v1", traffic={"sim": 1.0}, limits=BUDGET)
    info = ReplicaInfo(replica_id="sim-r", actor_name="sim", handle=replica)
    app.install(Subscriptions(ProxySettings(), random.Random(0)).apply({
        "routes": (1, RouteTable(entries=(RouteEntry(route="/v1", methods=("GET", "POST"), endpoint="chat"),))),
        "endpoint:chat": (2, config),
        "replicas:sim": (3, ReplicaSet(backend="sim", max_concurrent_queries=10, replicas=(info,))),
    }))
    return app


async def stream_post(app: ProxyApp, tenant: str, body: bytes) -> tuple[int, dict[bytes, bytes], bytes]:
    sent: list[dict[str, Any]] = []
    messages = [{"type": "http.request", "body": body, "more_body": False}]
    left = asyncio.Event()

    async def receive() -> dict[str, Any]:
        if messages:
            return messages.pop()
        await left.wait()
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    scope = {"type": "http", "method": "POST", "path": "/v1/chat/completions", "raw_path": b"/v1/chat/completions",
             "query_string": b"", "http_version": "1.1",
             "headers": [(b"authorization", f"Bearer {tenant}".encode()),
                         (b"content-length", str(len(body)).encode())]}
    await app(scope, receive, send)
    start = next(m for m in sent if m["type"] == "http.response.start")
    return start["status"], dict(start["headers"]), b"".join(m.get("body", b"") for m in sent[1:])


def test_a_streamed_answer_is_charged_its_usage_as_its_chunks_pass() -> None:
    recorder = Tokens()
    app = streaming_app(recorder, StreamingReplica([b'data: {"choices": [{"delta": {"content": "a"}}]}\n\n',
                                                    USAGE_EVENT[:40], USAGE_EVENT[40:], b"data: [DONE]\n\n"]))
    body = chat(max_tokens=10)  # admitted on about 30: the usage says 600, all of the bucket

    async def scenario() -> list[tuple[int, dict[bytes, bytes], bytes]]:
        return [await stream_post(app, "ada", body), await stream_post(app, "ada", body),
                await stream_post(app, "bob", body)]

    (first, _, streamed), (second, headers, refusal), (other, _, _) = run(scenario())
    assert (first, second, other) == (200, 429, 200)
    assert streamed.endswith(b"data: [DONE]\n\n") and USAGE_EVENT in streamed  # relayed whole, in order
    assert headers[b"content-type"] == b"application/json" and int(headers[b"retry-after"]) >= 1
    assert json.loads(refusal)["error"]["type"] == "rate_limit_exceeded"
    assert [tokens for _, _, tokens in recorder.charged] == [600, 600]


def test_a_stream_that_broke_without_usage_gives_its_estimate_back() -> None:
    recorder, buckets = Tokens(), Charges()
    app = streaming_app(recorder, StreamingReplica([b"data: 1\n\n", b"data: 2\n\n"], dies_after=1), buckets)
    assert run(stream_post(app, "ada", chat(max_tokens=550)))[0] == 200  # its head went out; then the replica died
    assert ("chat", "sim", 502) in recorder.requests and recorder.charged == []
    assert buckets.charges == [-recorder.admitted[0][2]]


# --- one node's workers share a budget ----------------------------------------------------------

def test_two_workers_spend_one_budget_through_the_shared_table(tmp_path: Path) -> None:
    one, two = SharedBuckets(str(tmp_path)), SharedBuckets(str(tmp_path))
    try:
        assert one.take(5, 10.0, 600, 0.0, 400) == 0.0
        two.charge(5, 10.0, 600, 0.0, 500 - 400)  # settled by the other worker
        assert one.take(5, 10.0, 600, 0.0, 150) == 5.0  # 100 left, 50 missing at 10 a second
        two.charge(5, 10.0, 600, 0.0, -300)
        assert one.take(5, 10.0, 600, 0.0, 400) == 0.0
    finally:
        one.close()
        two.close()


def test_proxies_given_shared_buckets_refuse_a_tenant_the_other_worker_spent(tmp_path: Path) -> None:
    replica = usage_replica(600)
    apps = []
    for _ in range(2):
        proxy = Proxy()
        proxy.app = ProxyApp(proxy.app.caller, ProxySettings(), buckets=SharedBuckets(str(tmp_path)))
        proxy.serve("chat", "/v1", {"sim": [replica]}, limits=BUDGET)
        apps.append(proxy)

    async def scenario() -> list[int]:
        return [(await post(apps[0], "ada", chat(10))).status_code, (await post(apps[1], "ada", chat(10))).status_code]

    assert run(scenario()) == [200, 429]


# --- the counters ---------------------------------------------------------------------------------

def test_the_counters_are_per_tenant_up_to_a_bound_then_other() -> None:
    metrics = ProxyMetrics()
    metrics.tokens_admitted("chat", "0000abcd", 30)
    metrics.tokens_charged("chat", "0000abcd", 550)
    metrics.token_limited("chat", "0000abcd")
    for n in range(TENANT_LABELS + 5):
        metrics.tokens_admitted("chat", f"{n:08x}", 1)
    text = metrics.render().decode()
    assert 'gitops_tenant_tokens_admitted_total{endpoint="chat",tenant="0000abcd"} 30.0' in text
    assert 'gitops_tenant_tokens_charged_total{endpoint="chat",tenant="0000abcd"} 550.0' in text
    assert 'gitops_tenant_token_limited_total{endpoint="chat",tenant="0000abcd"} 1.0' in text
    tenants = {line.split('tenant="')[1].split('"')[0] for line in text.splitlines()
               if line.startswith("gitops_tenant_tokens_admitted_total{")}
    assert len(tenants) == TENANT_LABELS + 1 and "other" in tenants
    assert 'gitops_tenant_tokens_admitted_total{endpoint="chat",tenant="other"} 6.0' in text
    metrics.retain([], [])
    assert "gitops_tenant_tokens_admitted_total{" not in metrics.render().decode()


def test_the_proxy_enforces_the_share_of_a_budget_the_route_table_names() -> None:
    """The controller's route table says how many nodes share the budget: with 2, this node's
    proxies hold 300 of 600 tokens, room for one answer of 200, not two."""
    proxy = Proxy()
    config = EndpointConfig(name="chat", route="/v1", traffic={"sim": 1.0}, limits=BUDGET)

    def publish(nodes: int) -> None:
        table = RouteTable(entries=(RouteEntry(route="/v1", methods=("GET", "POST"), endpoint="chat"),), nodes=nodes)
        proxy.publish(routes=table, endpoint__chat=config)

    async def statuses(tenant: str, count: int) -> list[Any]:
        return [await post(proxy, tenant, chat(max_tokens=170)) for _ in range(count)]

    publish(nodes=1)
    proxy.publish(replicas__sim=replica_set("sim", [usage_replica(200)]))
    alone = run(statuses("ada", 3))
    publish(nodes=2)
    shared = run(statuses("bob", 2))
    assert [answer.status_code for answer in alone] == [200, 200, 200]
    assert [answer.status_code for answer in shared] == [200, 429]
    assert "limit 600" in shared[1].json()["error"]["message"]  # the limit as written: the cluster's
