"""The same-node data path under real Ray: requests really go over the replica's
Unix socket, and a replica killed with requests in flight on it costs no request."""

from __future__ import annotations

import os
import stat
import time

import httpx
import ray

from tests.support.faults import kill9
from tests.support.load import SteadyLoad
from tests.support.scenario import under_load
from tests.support.serving import Serving
from tests.support.stack import eventually


def frames_served(serving: Serving, replica_id: str) -> int:
    return int(ray.get(serving.replica_handle(replica_id).frames_served.remote(), timeout=30))


def test_requests_to_a_replica_on_the_proxys_node_go_over_its_unix_socket(serving: Serving, backend: str) -> None:
    serving.deploy(backend, 1)
    serving.route(backend)
    [replica] = serving.replicas(backend, "RUNNING")
    address = ray.get(serving.replica_handle(replica.replica_id).data_address.remote(), timeout=30)
    node, path = address.node, address.path
    # No proxy on another node asked: the replica listens on no TCP port.
    assert address.tcp is None
    assert node == ray.get_runtime_context().get_node_id()  # one node: the proxy's
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(os.path.dirname(path)).st_mode) == 0o700

    url = f"{serving.url}/{backend}"
    with httpx.Client(timeout=10) as client:
        # The proxy asks for the address in the background; until then, Ray carries requests.
        eventually(
            lambda: client.get(url).status_code == 200 and frames_served(serving, replica.replica_id) > 0,
            60, what="a request served over the data socket",
        )
        before = frames_served(serving, replica.replica_id)
        answers = [client.post(url, content=f"body {n}".encode()) for n in range(20)]
    assert [answer.status_code for answer in answers] == [200] * 20
    assert frames_served(serving, replica.replica_id) - before == 20
    # Its proxy, on its own node, asked too: still no TCP port.
    assert ray.get(serving.replica_handle(replica.replica_id).data_address.remote(), timeout=30).tcp is None


def test_killing_a_replica_with_requests_in_flight_on_its_socket_fails_no_get(
    serving: Serving, backend: str, window_s: float
) -> None:
    serving.deploy(backend, 2)
    serving.route(backend)
    victim, survivor = serving.replicas(backend, "RUNNING")
    counts: dict[str, int] = {}

    def kill_one_replica(load: SteadyLoad) -> float:
        # Both replicas serve the load over their sockets before the kill.
        eventually(
            lambda: all(frames_served(serving, r.replica_id) > 0 for r in (victim, survivor)),
            60, what="both replicas serving over their data sockets",
        )
        counts["survivor before"] = frames_served(serving, survivor.replica_id)
        started = time.monotonic()
        kill9(serving.replica_handle(victim.replica_id))
        eventually(
            lambda: len(serving.replicas(backend, "RUNNING")) == 2
            and victim.replica_id not in {r.replica_id for r in serving.replicas(backend)},
            60, what="a replacement replica running",
        )
        counts["survivor after"] = frames_served(serving, survivor.replica_id)
        return time.monotonic() - started

    # The load's GETs spend 10 ms on the replica each, so the kill meets some in flight.
    report, _ = under_load(serving.load_url(backend), window_s, kill_one_replica)
    assert report.failed == 0, report.summary()
    assert counts["survivor after"] > counts["survivor before"]  # the load kept going over the socket
    assert serving.leaked() == 0
