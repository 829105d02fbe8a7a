"""Token budgets per tenant (`[limits] tokens_per_minute`) through the real proxy, with the shipped LLM
simulator as the real controller runs it: one node's two proxy workers, every request on a fresh
connection (so the kernel spreads them over both workers, which share their buckets).

A tenant over its budget is answered 429 with Retry-After and OpenAI's error body, for a plain and a
streamed request, while another tenant is served; a stream's usage, read as its chunks pass, is
charged; the node's metrics port counts each tenant's tokens under a hash, never its key. The
`openai` client is not a dependency of the project: the requests are made with httpx, and a 429 is
what that client raises `RateLimitError` for.
"""

from __future__ import annotations

import json
import re
import shutil
import uuid
from pathlib import Path
from typing import Any, Iterator

import httpx
import pytest

from controller.client import ControllerClient
from proxy.routes.token_budgets import TokenBudget, tenant_label
from tests.support.stack import eventually, free_port, met, quick_backend, run, start_controller
from vocabulary.control.status import ProxyState
from vocabulary.spec.endpoints import EndpointConfig, LimitsConfig

pytestmark = pytest.mark.real

# 600 tokens a minute: a bucket of 600, 10 tokens back a second.
LIMITS = LimitsConfig(tokens_per_minute=600, key="header:authorization")
# Output tokens the simulator writes when a request asks for none (so its estimate is its prompt alone).
DEFAULT_REPLY = 500


class Node:
    def __init__(self, namespace: str, apps: Path) -> None:
        self.port, self.metrics_port = free_port(), free_port()
        self.client: ControllerClient = start_controller(
            namespace, proxies=True, proxy_port=self.port, proxy_workers=2, proxy_metrics_port=self.metrics_port,
        )
        self.url = f"http://127.0.0.1:{self.port}"
        met(self.client, run(self.client.apply_backend(quick_backend(
            "sim", "llm_sim:LLMSim", working_dir=str(apps),
            user_config={"prefill_s_per_token": 0.0, "decode_s_per_token": 0.0005, "max_tokens": DEFAULT_REPLY},
        ))))
        met(self.client, run(self.client.apply_endpoint(
            EndpointConfig(name="llm", route="/v1", traffic={"sim": 1.0}, limits=LIMITS)
        )))
        eventually(lambda: len(self.running()) == 2 or None, 60)

    def running(self) -> list[str]:
        proxies = run(self.client.get_status()).proxies
        return [key for key, proxy in proxies.items() if proxy.state is ProxyState.RUNNING]

    def chat(self, tenant: str, **fields: Any) -> httpx.Response:
        body = {"model": "sim", "messages": [{"role": "user", "content": "hello there"}], **fields}
        return httpx.post(f"{self.url}/v1/chat/completions", json=body, timeout=30,
                          headers={"authorization": f"Bearer {tenant}", "connection": "close"})

    def metrics(self) -> str:
        return httpx.get(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=10).text


@pytest.fixture(scope="module")
def node(ray_session: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Node]:
    apps = tmp_path_factory.mktemp("apps")
    # The shipped simulator, as a user's repository would hold it.
    shutil.copy(Path(__file__).parents[2] / "deployments" / "apps" / "llm_sim.py", apps / "llm_sim.py")
    built = Node(f"{ray_session}-tokens-{uuid.uuid4().hex[:6]}", apps)
    yield built
    built.client.shutdown()


def label(tenant: str) -> str:
    budget = TokenBudget.from_config("llm", LIMITS)
    assert budget is not None
    return tenant_label(budget.slot(b"", [(b"authorization", f"Bearer {tenant}".encode())]))


def assert_openai_rate_limit(answer: httpx.Response) -> None:
    assert answer.status_code == 429, answer.text
    assert 1 <= int(answer.headers["retry-after"]) <= 60
    assert answer.headers["content-type"] == "application/json"
    error = answer.json()["error"]
    assert (error["type"], error["code"]) == ("rate_limit_exceeded", "rate_limit_exceeded")
    assert "tokens per minute" in error["message"] and "Bearer" not in error["message"]


def sse_usage(answer: httpx.Response) -> dict[str, int]:
    events = [event[len("data: "):] for event in answer.text.split("\n\n") if event]
    assert events[-1] == "[DONE]", events[-3:]
    return json.loads(events[-2])["usage"]


def counter(text: str, name: str, tenant: str) -> float:
    found = re.search(rf'^{name}\{{endpoint="llm",tenant="{tenant}"\}} (\S+)$', text, re.MULTILINE)
    return float(found.group(1)) if found else 0.0


def counted(node: Node, **wanted: float) -> str:
    """The node's metrics once each `gitops_tenant_token_limited_total{tenant=T}` wanted has its count."""

    def check() -> str | None:
        text = node.metrics()
        reached = all(counter(text, "gitops_tenant_token_limited_total", label(t)) == n for t, n in wanted.items())
        return text if reached else None

    text = eventually(check, 30)
    assert text is not None and "Bearer" not in text
    return text


def test_a_tenant_over_its_tokens_gets_429_while_another_is_served_plain_and_streamed(node: Node) -> None:
    eventually(lambda: node.chat("warm-up", max_tokens=1).status_code == 200 or None, 60)
    # ada: one answer of 503 tokens (3 of prompt) leaves ~97 of 600; her next asks for ~520 more.
    first = node.chat("ada", max_tokens=500)
    assert first.status_code == 200 and first.json()["usage"]["total_tokens"] == 503
    assert_openai_rate_limit(node.chat("ada", max_tokens=500))
    assert_openai_rate_limit(node.chat("ada", max_tokens=500, stream=True))  # refused before any stream
    # bob is served, plain and streamed, while ada waits.
    assert node.chat("bob", max_tokens=100).status_code == 200
    streamed = node.chat("bob", max_tokens=100, stream=True)
    assert streamed.status_code == 200 and streamed.headers["content-type"].startswith("text/event-stream")
    assert sse_usage(streamed)["total_tokens"] == 103

    text = counted(node, ada=2, bob=0)
    assert "ada" not in text and "bob" not in text
    ada, bob = label("ada"), label("bob")
    assert counter(text, "gitops_tenant_tokens_charged_total", ada) == 503  # the usage: one answer
    assert counter(text, "gitops_tenant_tokens_charged_total", bob) == 2 * 103
    assert counter(text, "gitops_tenant_tokens_admitted_total", ada) > 500  # her one estimate, max_tokens in it


def test_a_stream_is_charged_the_usage_its_last_event_reports(node: Node) -> None:
    eventually(lambda: node.chat("warm-up", max_tokens=1).status_code == 200 or None, 60)
    # cy asks for no max_tokens: each request is admitted on its prompt alone (~20 tokens), and each
    # stream's usage (503: the simulator's default reply) is charged as its events pass: two
    # streams take the bucket below zero, and the third is refused.
    codes = []
    for _ in range(3):
        answer = node.chat("cy", stream=True)
        codes.append(answer.status_code)
        if answer.status_code == 200:
            assert sse_usage(answer)["total_tokens"] == DEFAULT_REPLY + 3
        else:
            assert_openai_rate_limit(answer)
    assert codes == [200, 200, 429]

    text = counted(node, cy=1)
    cy = label("cy")
    assert counter(text, "gitops_tenant_tokens_charged_total", cy) == 2 * (DEFAULT_REPLY + 3)
    assert counter(text, "gitops_tenant_tokens_admitted_total", cy) < 100  # her prompts alone
