"""The data path across nodes under real Ray: a replica actor serves frames on
TCP at its node's address, and a proxy's `RayCaller` that sees it on another
node (its node id made different here: the session has one node) connects
there, proves itself with the secret it got over Ray, and sends its requests
as frames — counted by the replica as TCP ones, not merely answered."""

from __future__ import annotations

import asyncio
from typing import Any, Iterator

import pytest
import ray

from proxy.raycalls import RayCaller
from replica.host import Replica
from vocabulary.wire import make_request

pytestmark = pytest.mark.real


@pytest.fixture(scope="module")
def replica(ray_session: str) -> Iterator[Any]:
    # The driver's sys.path reaches its workers: the test app imports as a module of this repository.
    handle = ray.remote(Replica).options(num_cpus=0).remote("echo", "tcp-r1", "v1", "tests.real.apps.proxy_handlers:Echo")
    ray.get(handle.initialize.remote(), timeout=120)
    yield handle
    ray.kill(handle)


def test_a_proxy_on_another_node_sends_its_requests_over_the_replicas_tcp_listener(replica: Any) -> None:
    address = ray.get(replica.data_address.remote(), timeout=30)
    assert address.tcp is not None and address.tcp[0] == ray.util.get_node_ip_address()  # never a wildcard
    assert address.secret.hex() not in repr(address)

    async def calls() -> tuple[str | None, list[bytes]]:
        caller = RayCaller(max_calls_per_replica=8, coalesce_window_s=0.001, local_node=lambda: "another-node")
        assert caller.frames is not None
        try:
            first = await caller.call(replica, make_request("POST", "/", body=b"first"), 30.0)
            assert first[2] == b"first"  # over Ray while the address is asked
            assert await caller.frames.settled(replica) is True
            via = caller.frames.via(replica)
            replies = await asyncio.gather(
                *(caller.call(replica, make_request("POST", "/", body=str(n).encode()), 30.0) for n in range(20))
            )
            return via, [reply[2] for reply in replies]
        finally:
            caller.frames.close()

    via, bodies = asyncio.run(calls())
    assert via == "tcp"
    assert bodies == [str(n).encode() for n in range(20)]
    assert ray.get(replica.frames_served.remote(), timeout=30) == 20
    assert ray.get(replica.data_connections.remote(), timeout=30) == {"unix": 0, "tcp": 1}
