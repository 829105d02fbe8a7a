"""The v2 gRPC surface (`ray_gitops.v2.grpc_service`, `ray_gitops.v2.grpc_messages`): requests built and
answers read with Triton's own generated messages (`tritonclient.grpc.service_pb2`, wire-compatible
with KServe's proto), each method's answer, raw and typed tensors both ways, the same metadata and
refusals as the REST side as gRPC status codes; the replica host giving a v2 backend's gRPC calls to
the service; and Triton's asyncio gRPC client through the proxy's gRPC port in-process (127.0.0.1), to one
model or to several, each call routed by the model it names."""

from __future__ import annotations

import asyncio
from typing import Any

import grpc
import numpy as np
import orjson
import pytest

from proxy.grpc_ingress import serve_grpc
from proxy.settings import GrpcLimits
from ray_gitops.v2.app import V2App
from ray_gitops.v2.grpc_service import SERVICE, V2GrpcService
from replica.calling.grpc_calls import GrpcMethods
from replica.host import Replica
from tests.support.grpc_replicas import GrpcCaller
from tests.support.proxy_app import FakeReplica, Proxy, replica_set
from tests.support.v2_models import V2_TABLE, Adder, backend
from vocabulary.request_path import grpc_calls
from vocabulary.control.longpoll import RouteEntry, RouteTable
from vocabulary.request_path.grpc_calls import STATUS_HEADER, GrpcAbort, grpc_call
from vocabulary.spec.endpoints import EndpointConfig

pytestmark = pytest.mark.component

triton_grpc = pytest.importorskip("tritonclient.grpc")
triton_aio = pytest.importorskip("tritonclient.grpc.aio")
pb = pytest.importorskip("tritonclient.grpc.service_pb2")
from tritonclient.utils import InferenceServerException  # noqa: E402 — after the skip: the client is a test extra


def service(model: Adder | None = None) -> V2GrpcService:
    return V2App.around(model or Adder(), backend()).grpc_service


def call(svc: V2GrpcService, method: str, request: Any) -> bytes:
    return asyncio.run(getattr(svc, method)(request.SerializeToString()))  # type: ignore[no-any-return]


def refusal(svc: V2GrpcService, method: str, request: Any) -> GrpcAbort:
    with pytest.raises(GrpcAbort) as refused:
        call(svc, method, request)
    return refused.value


def typed_request(**extra: Any) -> Any:
    request = pb.ModelInferRequest(model_name="adder", id="r1", **extra)
    a = request.inputs.add(name="a", datatype="FP32", shape=[2, 2])
    a.contents.fp32_contents.extend([1, 2, 0.5, 0.25])
    words = request.inputs.add(name="words", datatype="BYTES", shape=[2])
    words.contents.bytes_contents.extend([b"ab", "héllo".encode()])
    return request


def raw_request(a: np.ndarray, **extra: Any) -> Any:
    request = pb.ModelInferRequest(model_name="adder", **extra)
    request.inputs.add(name="a", datatype="FP32", shape=list(a.shape))
    request.inputs.add(name="words", datatype="BYTES", shape=[1])
    request.raw_input_contents.extend([a.astype("<f4").tobytes(), b"\x02\x00\x00\x00ok"])
    return request


def outputs_of(answer: bytes) -> dict[str, np.ndarray]:
    """The response's outputs as the Triton client reads them (raw or typed BYTES)."""
    return {name: triton_grpc.InferResult(pb.ModelInferResponse.FromString(answer)).as_numpy(name)
            for name in ("sum", "upper", "flags")}


def test_health_and_server_metadata() -> None:
    model = Adder()
    svc = service(model)
    assert pb.ServerLiveResponse.FromString(call(svc, "ServerLive", pb.ServerLiveRequest())).live
    assert pb.ServerReadyResponse.FromString(call(svc, "ServerReady", pb.ServerReadyRequest())).ready
    model.ready = False
    assert not pb.ServerReadyResponse.FromString(call(svc, "ServerReady", pb.ServerReadyRequest())).ready
    assert not pb.ModelReadyResponse.FromString(call(svc, "ModelReady", pb.ModelReadyRequest(name="adder"))).ready
    server = pb.ServerMetadataResponse.FromString(call(svc, "ServerMetadata", pb.ServerMetadataRequest()))
    assert server.name == "ray-gitops" and list(server.extensions) == ["binary_tensor_data"]


def test_model_metadata_is_what_the_rest_side_says() -> None:
    app = V2App.around(Adder(), backend())
    answer = call(app.grpc_service, "ModelMetadata", pb.ModelMetadataRequest(name="adder", version="code123"))
    metadata = pb.ModelMetadataResponse.FromString(answer)
    as_rest = {
        "name": metadata.name, "versions": list(metadata.versions), "platform": metadata.platform,
        "inputs": [{"name": t.name, "datatype": t.datatype, "shape": list(t.shape)} for t in metadata.inputs],
        "outputs": [{"name": t.name, "datatype": t.datatype, "shape": list(t.shape)} for t in metadata.outputs],
    }
    assert as_rest == orjson.loads(orjson.dumps(app.metadata.as_json()))
    assert as_rest["inputs"] == V2_TABLE["inputs"] and as_rest["versions"] == ["code123"]


@pytest.mark.parametrize(("method", "request_"), [
    ("ModelMetadata", pb.ModelMetadataRequest(name="other")),
    ("ModelReady", pb.ModelReadyRequest(name="other")),
    ("ModelMetadata", pb.ModelMetadataRequest(name="adder", version="7")),
    ("ModelInfer", pb.ModelInferRequest(model_name="other")),
])
def test_another_model_or_version_is_not_found(method: str, request_: Any) -> None:
    refused = refusal(service(), method, request_)
    assert refused.code == grpc_calls.NOT_FOUND
    assert refused.details in (
        "unknown model 'other': this endpoint serves 'adder'", "model 'adder' has no version '7' (it has 'code123')",
    )


def test_typed_inputs_answer_raw_outputs_as_triton_does() -> None:
    model = Adder()
    answer = call(service(model), "ModelInfer", typed_request(parameters={"tag": pb.InferParameter(string_param="t")}))
    response = pb.ModelInferResponse.FromString(answer)
    assert (response.model_name, response.model_version, response.id) == ("adder", "code123", "r1")
    assert len(response.raw_output_contents) == 3 and not response.outputs[0].HasField("contents")
    out = outputs_of(answer)
    assert out["sum"].tolist() == [3.0, 0.75] and out["upper"].tolist() == [b"AB", "HéLLO".encode()]
    assert out["flags"].tolist() == [[False, True], [False, False]]
    assert model.seen == [{"tag": "t"}]  # the request's parameters, as plain values


def test_raw_inputs_and_only_the_outputs_asked_for() -> None:
    a = np.arange(6, dtype=np.float32).reshape(3, 2)
    request = raw_request(a[:1])
    request.outputs.add(name="sum")
    answer = call(service(), "ModelInfer", request)
    response = pb.ModelInferResponse.FromString(answer)
    assert [output.name for output in response.outputs] == ["sum"] and list(response.outputs[0].shape) == [1]
    assert np.frombuffer(response.raw_output_contents[0], dtype="<f4").tolist() == [1.0]


def test_typed_outputs_when_the_request_asks_with_binary_data_output_false() -> None:
    request = typed_request(parameters={"binary_data_output": pb.InferParameter(bool_param=False)})
    response = pb.ModelInferResponse.FromString(call(service(), "ModelInfer", request))
    assert not response.raw_output_contents
    by_name = {output.name: output for output in response.outputs}
    assert list(by_name["sum"].contents.fp32_contents) == [3.0, 0.75]
    assert list(by_name["upper"].contents.bytes_contents) == [b"AB", "HéLLO".encode()]
    assert list(by_name["flags"].contents.bool_contents) == [False, True, False, False]
    # Triton's client reads typed contents of BYTES only (it asks for nothing else): as the raw ones
    assert triton_grpc.InferResult(response).as_numpy("upper").tolist() == [b"AB", "HéLLO".encode()]


def wrong_shape() -> Any:
    request = typed_request()
    request.inputs[0].shape[:] = [4]
    return request


def raw_and_typed() -> Any:
    request = typed_request()
    request.raw_input_contents.extend([b"", b""])
    return request


def too_few_raw() -> Any:
    request = raw_request(np.zeros((1, 2), dtype=np.float32))
    del request.raw_input_contents[1]
    return request


def short_raw() -> Any:
    request = raw_request(np.zeros((1, 2), dtype=np.float32))
    request.raw_input_contents[0] = b"\x00" * 7
    return request


def no_words() -> Any:
    request = typed_request()
    del request.inputs[1]
    return request


def unknown_output() -> Any:
    request = typed_request()
    request.outputs.add(name="nope")
    return request


@pytest.mark.parametrize(("request_", "message"), [
    (wrong_shape(), "input 'a': shape [4] does not fit the model's [-1, 2]"),
    (raw_and_typed(), "input 'a' has contents while raw_input_contents holds the inputs' data"),
    (too_few_raw(), "raw_input_contents has 1 entries and inputs 2: each input's data is the entry at its index"),
    (short_raw(), "input 'a': binary_data_size is 7 bytes; shape [1, 2] of FP32 is 8"),
    (no_words(), "input 'words' is missing (model 'adder' takes 'a', 'words')"),
    (unknown_output(), "output 'nope' is not an output of model 'adder' (it has 'sum', 'upper', 'flags')"),
    (pb.ModelInferRequest(model_name="adder"), "'inputs' must hold the model's input tensors"),
])
def test_requests_the_protocol_refuses_are_invalid_argument_with_the_reason(request_: Any, message: str) -> None:
    refused = refusal(service(), "ModelInfer", request_)
    assert (refused.code, refused.details) == (grpc_calls.INVALID_ARGUMENT, message)


def test_bytes_that_are_no_message_are_invalid_argument() -> None:
    with pytest.raises(GrpcAbort) as refused:
        asyncio.run(service().ModelInfer(b"\xff\xff\xff"))
    assert refused.value.code == grpc_calls.INVALID_ARGUMENT
    assert refused.value.details == "the request is not a inference.ModelInferRequest message"


def test_not_ready_is_unavailable_and_a_failing_predict_internal() -> None:
    model = Adder()
    svc = service(model)
    model.ready = False
    refused = refusal(svc, "ModelInfer", typed_request())
    assert (refused.code, refused.details) == (grpc_calls.UNAVAILABLE, "model 'adder' is not ready")
    model.ready = True
    failed = refusal(svc, "ModelInfer", typed_request(parameters={"fail": pb.InferParameter(bool_param=True)}))
    assert (failed.code, failed.details) == (
        grpc_calls.INTERNAL, "predict raised RuntimeError (the replica's log has its traceback)",
    )
    wrong = refusal(svc, "ModelInfer", typed_request(parameters={"wrong_shape": pb.InferParameter(bool_param=True)}))
    assert wrong.code == grpc_calls.INTERNAL and "of shape [1, 1]; the model's is [-1]" in wrong.details


def test_the_replica_host_gives_a_v2_backends_grpc_calls_to_the_service() -> None:
    replica = Replica(backend(), "adder#1")
    asyncio.run(replica.initialize())

    def answer(method: str, message: bytes) -> tuple[Any, ...]:
        return tuple(asyncio.run(replica.handle_request(grpc_call(f"/{SERVICE}/{method}", [], message)))[:3])

    status, _, body = answer("ModelInfer", typed_request().SerializeToString())
    assert status == 200 and outputs_of(body)["sum"].tolist() == [3.0, 0.75]
    status, headers, body = answer("ModelMetadata", pb.ModelMetadataRequest(name="other").SerializeToString())
    assert (status, body) == (404, b"unknown model 'other': this endpoint serves 'adder'")
    assert (STATUS_HEADER, b"5") in headers  # NOT_FOUND, as the proxy ends the call
    for not_a_method in ("is_ready", "around", "predict", "reconfigure"):  # the app's and the model's own
        assert answer(not_a_method, b"")[0] == 501


# --- Triton's asyncio gRPC client through the proxy's gRPC port, in-process -----------------------


def test_tritons_grpc_client_through_the_proxy() -> None:
    proxy = Proxy()
    proxy.app.caller = proxy.app.sender._caller = GrpcCaller()  # type: ignore[assignment]  # the replica's dispatch in-process
    replica = FakeReplica("v1", GrpcMethods(service()).call)  # type: ignore[arg-type]
    proxy.serve("models", "/models", {"v1": [replica]}, grpc_service=SERVICE)

    async def test() -> None:
        server, port = await serve_grpc(proxy.app, "127.0.0.1", 0, GrpcLimits(), shared=False)
        client = triton_aio.InferenceServerClient(url=f"127.0.0.1:{port}")
        try:
            assert await client.is_server_live() and await client.is_model_ready("adder")
            metadata = await client.get_model_metadata("adder", as_json=True)
            assert metadata["versions"] == ["code123"] and metadata["platform"] == "numpy"
            a = triton_grpc.InferInput("a", [2, 2], "FP32")
            a.set_data_from_numpy(np.array([[1, 2], [3, 4]], dtype=np.float32))
            words = triton_grpc.InferInput("words", [1], "BYTES")
            words.set_data_from_numpy(np.array([b"hi"], dtype=object))
            result = await client.infer("adder", [a, words])
            assert result.as_numpy("sum").tolist() == [3.0, 7.0] and result.as_numpy("upper").tolist() == [b"HI"]
            a.set_shape([4])
            a.set_data_from_numpy(np.zeros(4, dtype=np.float32))
            with pytest.raises(InferenceServerException) as refused:
                await client.infer("adder", [a, words])
            assert refused.value.status() == str(grpc.StatusCode.INVALID_ARGUMENT)
            assert "input 'a': shape [4] does not fit the model's [-1, 2]" in refused.value.message()
            with pytest.raises(InferenceServerException) as unknown:
                await client.get_model_metadata("other")
            assert unknown.value.status() == str(grpc.StatusCode.NOT_FOUND)
        finally:
            await client.close()
            await server.stop(None)

    asyncio.run(test())
    assert [code for _, _, code in proxy.recorded.requests] == [200, 200, 200, 200, 400, 404]


# --- several v2 models behind one gRPC port --------------------------------------------------


def two_models(server_endpoint: bool) -> tuple[Proxy, dict[str, FakeReplica]]:
    """The proxy with endpoints `adder` and `twice` at their models' REST paths, each its own v2 backend
    (models named so), and with `server_endpoint` a third, `server` at `/v2`, serving `adder` too."""
    proxy = Proxy()
    proxy.app.caller = proxy.app.sender._caller = GrpcCaller()  # type: ignore[assignment]
    replicas = {
        "adder-v1": FakeReplica("adder-r", GrpcMethods(service()).call),  # type: ignore[arg-type]
        "twice-v1": FakeReplica("twice-r", GrpcMethods(V2App.around(Adder(), backend(name="twice")).grpc_service).call),  # type: ignore[arg-type]
    }
    routes = {"adder": ("/v2/models/adder", "adder-v1"), "twice": ("/v2/models/twice", "twice-v1")}
    if server_endpoint:
        replicas["server-v1"] = FakeReplica("server-r", GrpcMethods(service()).call)  # type: ignore[arg-type]
        routes["server"] = ("/v2", "server-v1")
    table = RouteTable(entries=tuple(RouteEntry(route=route, methods=("POST",), endpoint=name)
                                     for name, (route, _) in routes.items()))
    configs = {f"endpoint__{name}": EndpointConfig(name=name, route=route, traffic={b: 1.0}, grpc_service=SERVICE)
               for name, (route, b) in routes.items()}
    proxy.publish(routes=table, **configs)
    proxy.publish(**{f"replicas__{b}": replica_set(b, [replica]) for b, replica in replicas.items()})
    return proxy, replicas


def test_two_v2_models_on_one_port_each_call_routed_by_the_model_it_names() -> None:
    proxy, replicas = two_models(server_endpoint=False)

    async def test() -> None:
        server, port = await serve_grpc(proxy.app, "127.0.0.1", 0, GrpcLimits(), shared=False)
        client = triton_aio.InferenceServerClient(url=f"127.0.0.1:{port}")
        try:
            assert await client.is_server_live()  # a server method: the first model's endpoint
            for model in ("adder", "twice"):
                assert await client.is_model_ready(model)
                assert (await client.get_model_metadata(model, as_json=True))["name"] == model
                a = triton_grpc.InferInput("a", [1, 2], "FP32")
                a.set_data_from_numpy(np.array([[1, 2]], dtype=np.float32))
                words = triton_grpc.InferInput("words", [1], "BYTES")
                words.set_data_from_numpy(np.array([model.encode()], dtype=object))
                result = await client.infer(model, [a, words])
                assert result.get_response().model_name == model and result.as_numpy("upper").tolist() == [
                    model.upper().encode()]
            with pytest.raises(InferenceServerException) as unknown:
                await client.get_model_metadata("nope")  # no endpoint's model: the first's, which knows it not
            assert unknown.value.status() == str(grpc.StatusCode.NOT_FOUND)
        finally:
            await client.close()
            await server.stop(None)

    asyncio.run(test())
    assert [(endpoint, code) for endpoint, _, code in proxy.recorded.requests] == [
        ("adder", 200), ("adder", 200), ("adder", 200), ("adder", 200),
        ("twice", 200), ("twice", 200), ("twice", 200), ("adder", 404),
    ]
    assert [r[1].rpartition("/")[2] for r in replicas["twice-v1"].seen] == ["ModelReady", "ModelMetadata", "ModelInfer"]


def test_beside_a_v2_endpoint_the_server_methods_and_unknown_models_go_to_it() -> None:
    proxy, replicas = two_models(server_endpoint=True)
    assert proxy.app.snapshot.grpc_services == {SERVICE: "server"}
    assert proxy.app.snapshot.grpc_models == {"adder": "adder", "twice": "twice"}

    async def test() -> None:
        server, port = await serve_grpc(proxy.app, "127.0.0.1", 0, GrpcLimits(), shared=False)
        try:
            async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
                def method(name: str) -> Any:
                    return channel.unary_unary(f"/{SERVICE}/{name}")
                assert pb.ServerReadyResponse.FromString(
                    await method("ServerReady")(pb.ServerReadyRequest().SerializeToString())).ready
                assert pb.ModelReadyResponse.FromString(
                    await method("ModelReady")(pb.ModelReadyRequest(name="twice").SerializeToString())).ready
                with pytest.raises(grpc.aio.AioRpcError) as broken:  # no message: the replica says so
                    await method("ModelInfer")(b"\xff\xff")
                assert broken.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        finally:
            await server.stop(None)

    asyncio.run(test())
    assert [endpoint for endpoint, _, _ in proxy.recorded.requests] == ["server", "twice", "server"]
    assert len(replicas["adder-v1"].seen) == 0
