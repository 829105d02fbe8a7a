"""Per-tenant limits and stream metrics across one node's two proxy workers, as the real controller runs them.

Each request comes on a fresh connection, so the kernel spreads them over both
workers (SO_REUSEPORT); the tenant's burst is granted once in all, because the
workers share their buckets, and the node's metrics port counts every refusal.
"""

from __future__ import annotations

import re
import uuid
from typing import Iterator

import httpx
import pytest

from controller.client import ControllerClient
from tests.support.stack import eventually, free_port, met, quick_backend, run, start_controller
from vocabulary.control.status import ProxyState
from vocabulary.spec.endpoints import EndpointConfig, LimitsConfig

pytestmark = pytest.mark.real


class Node:
    def __init__(self, namespace: str) -> None:
        self.port, self.metrics_port = free_port(), free_port()
        self.client: ControllerClient = start_controller(
            namespace, proxies=True, proxy_port=self.port, proxy_workers=2, proxy_metrics_port=self.metrics_port,
        )
        self.url = f"http://127.0.0.1:{self.port}"
        met(self.client, run(self.client.apply_backend(quick_backend("who", "routing_handlers:WhoAmI"))))
        met(self.client, run(self.client.apply_endpoint(EndpointConfig(
            name="metered", route="/metered", traffic={"who": 1.0},
            limits=LimitsConfig(requests_per_s=0.01, burst=10, key="header:x-api-key"),
        ))))
        met(self.client, run(self.client.apply_backend(quick_backend("tokens", "routing_handlers:Tokens"))))
        met(self.client, run(self.client.apply_endpoint(
            EndpointConfig(name="stream", route="/stream", traffic={"tokens": 1.0})
        )))
        eventually(lambda: len(self.running()) == 2 or None, 60)

    def running(self) -> list[str]:
        proxies = run(self.client.get_status()).proxies
        return [key for key, proxy in proxies.items() if proxy.state is ProxyState.RUNNING]


@pytest.fixture(scope="module")
def node(ray_session: str) -> Iterator[Node]:
    built = Node(f"{ray_session}-limits-{uuid.uuid4().hex[:6]}")
    yield built
    built.client.shutdown()


def test_a_tenant_s_burst_is_granted_once_across_the_node_s_workers(node: Node) -> None:
    eventually(lambda: httpx.get(f"{node.url}/metered", headers={"x-api-key": "warm-up"}).status_code == 200 or None, 30)
    codes = [
        httpx.get(f"{node.url}/metered", headers={"x-api-key": "tenant-a", "connection": "close"}, timeout=20).status_code
        for _ in range(30)
    ]
    assert codes.count(200) == 10 and codes.count(429) == 20, codes
    other = [
        httpx.get(f"{node.url}/metered", headers={"x-api-key": "tenant-b", "connection": "close"}, timeout=20).status_code
        for _ in range(5)
    ]
    assert other == [200] * 5

    def refused() -> float | None:
        text = httpx.get(f"http://127.0.0.1:{node.metrics_port}/metrics", timeout=10).text
        assert "tenant-a" not in text
        found = re.search(r'^gitops_http_rate_limited_total\{endpoint="metered"\} (\S+)$', text, re.MULTILINE)
        return float(found.group(1)) if found and float(found.group(1)) == 20 else None

    assert eventually(refused, 30) == 20


def test_a_token_stream_s_gaps_and_chunks_reach_the_node_s_metrics(node: Node) -> None:
    for _ in range(3):
        answer = httpx.get(f"{node.url}/stream", params={"n": "6", "gap": "0.03"}, timeout=20)
        assert answer.status_code == 200 and answer.text.startswith("token0 ")

    def observed() -> str | None:
        text = httpx.get(f"http://127.0.0.1:{node.metrics_port}/metrics", timeout=10).text
        found = re.search(r'^gitops_stream_chunks_count\{backend="tokens",endpoint="stream"\} (\S+)$', text, re.M)
        return text if found and float(found.group(1)) == 3 else None

    text = eventually(observed, 30)
    assert text is not None
    chunks = re.search(r'^gitops_stream_chunks_sum\{backend="tokens",endpoint="stream"\} (\S+)$', text, re.M)
    gaps = re.search(r'^gitops_stream_inter_chunk_seconds_count\{backend="tokens",endpoint="stream"\} (\S+)$', text, re.M)
    spent = re.search(r'^gitops_stream_inter_chunk_seconds_sum\{backend="tokens",endpoint="stream"\} (\S+)$', text, re.M)
    assert chunks and gaps and spent
    # Six tokens a stream, the first in the head: the other five each come after a gap of ~30 ms.
    assert float(chunks.group(1)) >= 3 * 5 and float(gaps.group(1)) == float(chunks.group(1)) - 3
    # The handler waits 30 ms before each token: the gaps add up to that (one may be
    # short and the next long when the machine is busy, never the total).
    assert float(spent.group(1)) >= 0.025 * float(gaps.group(1))
