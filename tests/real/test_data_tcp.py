"""The data path across nodes under real Ray: a replica serves frames on TCP at
its node's address, and a proxy on another node connects there, proves itself
with the secret it got over Ray, and sends its requests as frames — counted by
the replica as requests on a proven TCP connection, not merely answered.

Two ways: a 2-node `ray.cluster_utils.Cluster` with the controller's own
proxies, in a subprocess (a process joins one Ray only; tests/real/apps/
data_tcp_multinode.py prints what it saw as one JSON line); and, in the
session's Ray, a replica actor called by a `RayCaller` told it is on another
node.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path
from typing import Any, Iterator

import pytest
import ray

from proxy.shell.raycalls import RayCaller
from replica.host import Replica
from vocabulary.spec.backends import BackendConfig
from vocabulary.control.actor_apis import Remote, ReplicaHandle
from vocabulary.request_path.wire import make_request

pytestmark = pytest.mark.real

SCRIPT = Path(__file__).parent / "apps" / "data_tcp_multinode.py"
ROOT = Path(__file__).parents[2]


@pytest.fixture(scope="module")
def two_nodes() -> dict:
    done = subprocess.run([sys.executable, str(SCRIPT)], cwd=ROOT, capture_output=True, text=True, timeout=240)
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    assert lines, f"scenario failed (exit {done.returncode}):\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return json.loads(lines[-1][len("RESULT "):])


def test_requests_to_a_proxy_reach_a_replica_on_another_node_over_its_tcp_listener(two_nodes: dict) -> None:
    assert two_nodes["head_proxy"] and two_nodes["replica_on_worker_node"], two_nodes
    assert two_nodes["tcp_host_is_the_nodes"], two_nodes  # the node's address, never a wildcard
    assert two_nodes["served_over_tcp"], two_nodes
    assert two_nodes["answers"] == [200] * 20 and two_nodes["served_since"] == 20, two_nodes
    # All of it on one TCP connection, none over a Unix socket: the proxy is on the other node.
    assert two_nodes["connections"] == {"unix": 0, "tcp": 1}, two_nodes


@pytest.fixture(scope="module")
def replica(ray_session: str) -> Iterator[Any]:
    # The driver's sys.path reaches its workers: the test app imports as a module of this repository.
    handle = ray.remote(Replica).options(num_cpus=0).remote(
        BackendConfig(name="echo", version="v1", import_path="tests.real.apps.proxy_handlers:Echo"), "tcp-r1"
    )
    ray.get(handle.initialize.remote(), timeout=120)
    yield handle
    ray.kill(handle)


def test_a_proxy_on_another_node_sends_its_requests_over_the_replicas_tcp_listener(replica: Any) -> None:
    # Until a proxy on another node asks, the replica listens on no TCP port.
    assert ray.get(replica.data_address.remote(), timeout=30).tcp is None

    typed: ReplicaHandle = Remote(replica)  # as the proxy holds its replicas

    async def calls() -> tuple[str | None, list[bytes]]:
        caller = RayCaller(max_calls_per_replica=8, coalesce_window_s=0.001, local_node=lambda: "another-node")
        assert caller.connections is not None
        try:
            first = await caller.call(typed, make_request("POST", "/", body=b"first"), 30.0)
            assert first[2] == b"first"  # over Ray while the address is asked
            assert await caller.connections.settled(typed) is True
            via = caller.connections.via(typed)
            replies = await asyncio.gather(
                *(caller.call(typed, make_request("POST", "/", body=str(n).encode()), 30.0) for n in range(20))
            )
            return via, [reply[2] for reply in replies]
        finally:
            caller.connections.close()

    via, bodies = asyncio.run(calls())
    assert via == "tcp"
    address = ray.get(replica.data_address.remote(), timeout=30)
    assert address.tcp is not None and address.tcp[0] == ray.util.get_node_ip_address()  # never a wildcard
    assert address.secret.hex() not in repr(address)
    assert bodies == [str(n).encode() for n in range(20)]
    assert ray.get(replica.frames_served.remote(), timeout=30) == 20
    assert ray.get(replica.data_connections.remote(), timeout=30) == {"unix": 0, "tcp": 1}
