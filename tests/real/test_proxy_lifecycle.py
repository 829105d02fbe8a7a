"""The proxy actor's lifecycle as the controller drives it: start, ready, serve, shut down."""

from __future__ import annotations

import socket
import uuid

import httpx
import pytest
import ray

from proxy.actor import ProxyActor
from tests.real.apps.proxy_fakes import FakeController
from tests.support.stack import eventually, occupied_port
from vocabulary.control.goal_api import LongPollKey
from vocabulary.control.longpoll import RouteTable

pytestmark = pytest.mark.real


@pytest.fixture
def controller(ray_session):
    name = f"fake-controller-{uuid.uuid4().hex[:6]}"
    handle = ray.remote(FakeController).options(name=name, num_cpus=0).remote()
    yield name, handle
    ray.kill(handle)


def test_ready_returns_the_listening_address_and_healthz_answers(ray_session, controller):
    name, fake = controller
    proxy = ray.remote(ProxyActor).options(num_cpus=0).remote(name, ray_session, "node-a", "127.0.0.1", 0)
    try:
        address = ray.get(proxy.ready.remote(), timeout=30)
        assert address.startswith("127.0.0.1:")
        # 503 until the first route table arrives by long poll, then 200 while it serves.
        assert httpx.get(f"http://{address}/-/healthz", timeout=5).status_code == 503
        ray.get(fake.publish.remote({LongPollKey.ROUTES: RouteTable()}), timeout=30)
        eventually(lambda: httpx.get(f"http://{address}/-/healthz", timeout=5).status_code == 200,
                   timeout_s=15, what="/-/healthz answering 200")
    finally:
        ray.get(proxy.shutdown.remote(), timeout=30)
        ray.kill(proxy)


def test_shutdown_stops_listening(ray_session, controller):
    name, _ = controller
    proxy = ray.remote(ProxyActor).options(num_cpus=0).remote(name, ray_session, "node-a", "127.0.0.1", 0)
    address = ray.get(proxy.ready.remote(), timeout=30)
    ray.get(proxy.shutdown.remote(), timeout=30)
    ray.kill(proxy)
    host, port = address.rsplit(":", 1)
    with pytest.raises(OSError):
        socket.create_connection((host, int(port)), timeout=2).close()


def test_a_taken_port_fails_the_proxy_with_the_address(ray_session, controller):
    name, _ = controller
    with occupied_port() as port:
        proxy = ray.remote(ProxyActor).options(num_cpus=0, max_restarts=0).remote(name, ray_session, "n", "127.0.0.1", port)
        try:
            with pytest.raises(Exception, match=f"127.0.0.1:{port}"):
                ray.get(proxy.ready.remote(), timeout=30)
        finally:
            ray.kill(proxy)
