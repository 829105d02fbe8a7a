"""A real controller and proxy with its gRPC port on 127.0.0.1, for the real and the security tests of
the gRPC ingress: the `served` fixture (module scope) applies two backends of the test servicer
(tests/real/apps/grpc_greeters.py), `a` and `b`, and the endpoint `greet` serving `demo.Greeter`
90/10 over them, and yields a grpcio channel to the port with the proxy worker behind it and the
loopback OTLP receiver the proxy and replicas export their spans to."""

from __future__ import annotations

import uuid
from typing import Any, Iterator

import grpc
import pytest
import ray
from ray.actor import ActorHandle

from controller.client import ControllerClient
from controller.state.proxy_fleet import PROXY_PREFIX
from tests.support.otlp import OtlpReceiver
from tests.support.stack import eventually, free_port, met, named_actors, quick_backend, run, start_controller
from vocabulary.spec.endpoints import EndpointConfig

__all__ = ["GREETER", "SERVICE", "Served", "greeting", "served"]

SERVICE = "demo.Greeter"
GREETER = "grpc_greeters:Greeter"


class Served:
    """The controller's client, a grpcio channel to the proxy's gRPC port, the port, its proxy worker, and
    where the spans go."""

    def __init__(self, client: ControllerClient, channel: grpc.Channel, port: int, proxy: ActorHandle[Any],
                 spans: OtlpReceiver) -> None:
        self.client, self.channel, self.port, self.proxy, self.spans = client, channel, port, proxy, spans

    def unary(self, method: str, request: bytes, service: str = SERVICE, **options: object) -> bytes:
        return self.channel.unary_unary(f"/{service}/{method}")(request, **options)  # type: ignore[no-any-return]

    def streamed(self, method: str, request: bytes) -> list[bytes]:
        return list(self.channel.unary_stream(f"/{SERVICE}/{method}")(request, timeout=30))


def greeting(name: str, service: str = SERVICE, **endpoint: object) -> EndpointConfig:
    return EndpointConfig(name=name, route=f"/{name}", grpc_service=service, **endpoint)  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def served(ray_session: str) -> Iterator[Served]:
    namespace = f"{ray_session}-grpc-{uuid.uuid4().hex[:6]}"
    port = free_port()
    receiver = OtlpReceiver()
    with receiver:
        client = start_controller(namespace, proxies=True, proxy_grpc_port=port, otlp_endpoint=receiver.url)
        try:
            names = eventually(lambda: named_actors(namespace, PROXY_PREFIX), 60, what="a proxy")
            proxy = ray.get_actor(min(names), namespace=namespace)
            assert ray.get(proxy.grpc_address.remote(), timeout=30) == f"127.0.0.1:{port}"
            for name in ("a", "b"):
                backend = quick_backend(name, GREETER, init_args=[name], version=name)
                met(client, run(client.apply_backend(backend)))
            met(client, run(client.apply_endpoint(greeting("greet", traffic={"a": 0.9, "b": 0.1}))))
            with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
                yield Served(client, channel, port, proxy, receiver)
        finally:
            client.shutdown()
