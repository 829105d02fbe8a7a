"""The v2 REST surface (`ray_gitops.v2.app`) in-process over httpx's ASGI transport, and inside
the replica host (`replica.host.Replica` with `protocol = "v2"`): health, server and model
metadata, JSON and binary inference, requested outputs, parameters, and every refusal as
`{"error": ...}` with 400 or 404."""

from __future__ import annotations

import asyncio
import hashlib
import struct
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import orjson
import pytest

from ray_gitops.registry import install_models
from ray_gitops.v2.app import V2App
from replica.host import Replica
from vocabulary.request_path.wire import with_root_path
from tests.support.v2_models import V2_TABLE, Adder, backend
from vocabulary.spec.backends import ModelConfig

MODULE = __name__


@pytest.fixture
def model() -> Adder:
    return Adder()


class Client:
    """httpx over the ASGI transport, one event loop per call (the app keeps no loop state)."""

    def __init__(self, app: V2App) -> None:
        self.app = app

    def request(self, method: str, path: str, **options: Any) -> httpx.Response:
        async def send() -> httpx.Response:
            transport = httpx.ASGITransport(app=self.app)
            async with httpx.AsyncClient(transport=transport, base_url="http://v2") as opened:
                return await opened.request(method, path, **options)

        return asyncio.run(send())

    def get(self, path: str, **options: Any) -> httpx.Response:
        return self.request("GET", path, **options)

    def post(self, path: str, **options: Any) -> httpx.Response:
        return self.request("POST", path, **options)


@pytest.fixture
def client(model: Adder) -> Client:
    return Client(V2App.around(model, backend()))


def infer_body(**extra: Any) -> dict[str, Any]:
    return {
        "inputs": [
            {"name": "a", "datatype": "FP32", "shape": [2, 2], "data": [1, 2, 0.5, 0.25]},
            {"name": "words", "datatype": "BYTES", "shape": [2], "data": ["ab", "héllo"]},
        ],
        **extra,
    }


def test_health_and_server_metadata(client: Client, model: Adder) -> None:
    assert (client.get("/v2/health/live")).status_code == 200
    assert (client.get("/v2/health/ready")).status_code == 200
    server = (client.get("/v2")).json()
    assert server["name"] == "ray-gitops" and server["extensions"] == ["binary_tensor_data"]
    assert model.loads == 1  # load() ran once, before the first request


def test_ready_follows_the_models_own_ready(client: Client, model: Adder) -> None:
    model.ready = False
    refused = client.get("/v2/health/ready")
    assert refused.status_code == 400 and refused.json() == {"error": "model 'adder' is not ready"}
    assert (client.get("/v2/models/adder/ready")).status_code == 400
    assert (client.get("/v2/health/live")).status_code == 200
    inference = client.post("/v2/models/adder/infer", json=infer_body())
    assert inference.status_code == 400 and "not ready" in inference.json()["error"]
    model.ready = True
    assert (client.get("/v2/models/adder/ready")).status_code == 200


def test_model_metadata_is_the_v2_table_with_the_code_version(client: Client) -> None:
    metadata = (client.get("/v2/models/adder")).json()
    assert metadata == {
        "name": "adder", "versions": ["code123"], "platform": "numpy",
        "inputs": V2_TABLE["inputs"], "outputs": V2_TABLE["outputs"],
    }
    assert (client.get("/v2/models/adder/versions/code123")).json() == metadata
    missing = client.get("/v2/models/adder/versions/7")
    assert missing.status_code == 404
    assert missing.json() == {"error": "model 'adder' has no version '7' (it has 'code123')"}
    unknown = client.get("/v2/models/other")
    assert unknown.status_code == 404 and unknown.json()["error"].startswith("unknown model 'other'")


def test_the_version_is_the_digest_of_the_model_the_table_names() -> None:
    digest = hashlib.sha256(b"w").hexdigest()
    pinned = ModelConfig(name="weights", source="file:///w", sha256=digest)
    config = backend(model="weights").model_copy(update={"models": ("weights",), "model_sources": {"weights": pinned}})
    assert V2App.around(Adder(), config).metadata.version == digest


def test_json_inference_answers_every_output_with_the_id_echoed(client: Client) -> None:
    answer = client.post("/v2/models/adder/infer", json=infer_body(id="req-1"))
    assert answer.status_code == 200 and answer.headers["content-type"] == "application/json"
    assert answer.json() == {
        "model_name": "adder", "model_version": "code123", "id": "req-1",
        "outputs": [
            {"name": "sum", "datatype": "FP32", "shape": [2], "data": [3.0, 0.75]},
            {"name": "upper", "datatype": "BYTES", "shape": [2], "data": ["AB", "HéLLO"]},
            {"name": "flags", "datatype": "BOOL", "shape": [2, 2], "data": [False, True, False, False]},
        ],
    }


def test_only_the_requested_outputs_and_parameters_reach_predict(client: Client, model: Adder) -> None:
    body = infer_body(outputs=[{"name": "upper"}], parameters={"temperature": 0.5})
    answer = (client.post("/v2/models/adder/versions/code123/infer", json=body)).json()
    assert [output["name"] for output in answer["outputs"]] == ["upper"] and "id" not in answer
    assert model.seen[-1] == {"temperature": 0.5}


def test_binary_inputs_and_outputs_follow_the_json(client: Client) -> None:
    a = np.array([[1, 2], [3, 4], [5, 6]], dtype="<f4").tobytes()
    words = b"".join(struct.pack("<I", len(w)) + w for w in (b"x", b"\xff\xfe", b""))
    head = orjson.dumps({
        "inputs": [
            {"name": "a", "datatype": "FP32", "shape": [3, 2], "parameters": {"binary_data_size": len(a)}},
            {"name": "words", "datatype": "BYTES", "shape": [3], "parameters": {"binary_data_size": len(words)}},
        ],
        "outputs": [{"name": "sum", "parameters": {"binary_data": True}}, {"name": "upper", "parameters": {"binary_data": True}},
                    {"name": "flags"}],
    })
    answer = client.post(
        "/v2/models/adder/infer", content=head + a + words, headers={"Inference-Header-Content-Length": str(len(head))}
    )
    assert answer.status_code == 200 and answer.headers["content-type"] == "application/octet-stream"
    length = int(answer.headers["inference-header-content-length"])
    message, tail = orjson.loads(answer.content[:length]), answer.content[length:]
    sums, upper, flags = message["outputs"]
    assert sums["parameters"] == {"binary_data_size": 12} and "data" not in sums
    assert np.frombuffer(tail[:12], dtype="<f4").tolist() == [3.0, 7.0, 11.0]
    assert tail[12:] == b"".join(struct.pack("<I", len(w)) + w for w in (b"X", b"\xff\xfe", b""))
    assert upper["parameters"] == {"binary_data_size": len(tail) - 12}
    assert flags["data"] == [False, True, True, True, True, True]


def test_binary_data_output_makes_every_output_binary(client: Client) -> None:
    answer = client.post("/v2/models/adder/infer", json=infer_body(parameters={"binary_data_output": True}))
    length = int(answer.headers["inference-header-content-length"])
    outputs = orjson.loads(answer.content[:length])["outputs"]
    assert [set(output) for output in outputs] == [{"name", "datatype", "shape", "parameters"}] * 3
    assert sum(output["parameters"]["binary_data_size"] for output in outputs) == len(answer.content) - length


@pytest.mark.parametrize(
    "body, headers, error",
    [
        (b"{", {}, "the request is not JSON"),
        (b"[]", {}, "the request must be a JSON object with 'inputs'"),
        (orjson.dumps({"inputs": []}), {}, "'inputs' must be a list of tensors"),
        (orjson.dumps({"id": 5, **infer_body()}), {}, "'id' must be a string"),
        (orjson.dumps({"inputs": [{"name": "b", "datatype": "FP32", "shape": [1], "data": [1]}]}), {},
         "input 'b' is not an input of model 'adder' (it takes 'a', 'words')"),
        (orjson.dumps({"inputs": infer_body()["inputs"][:1]}), {}, "input 'words' is missing"),
        (orjson.dumps({"inputs": infer_body()["inputs"] * 2}), {}, "input 'a' is given twice"),
        (orjson.dumps({"inputs": [{"name": "a", "datatype": "FP64", "shape": [1, 2], "data": [1, 2]}]}), {},
         "input 'a': datatype must be FP32 (got 'FP64')"),
        (orjson.dumps({"inputs": [{"name": "a", "datatype": "FP32", "shape": [1, 3], "data": [1, 2, 3]}]}), {},
         "input 'a': shape [1, 3] does not fit the model's [-1, 2]"),
        (orjson.dumps({"inputs": [{"name": "a", "datatype": "FP32", "shape": [2, 2], "data": [1, 2]}]}), {},
         "input 'a': shape [2, 2] holds 4 elements; data has 2"),
        (orjson.dumps({"inputs": [{"name": "a", "datatype": "FP32", "shape": [1, 2]}]}), {},
         "input 'a' has no 'data' (nor a binary_data_size parameter)"),
        (orjson.dumps(infer_body(outputs=[{"name": "nope"}])), {},
         "output 'nope' is not an output of model 'adder' (it has 'sum', 'upper', 'flags')"),
        (orjson.dumps(infer_body(outputs=[{"name": "sum", "parameters": {"binary_data": 1}}])), {},
         "output 'sum': parameter 'binary_data' must be true or false"),
        (b"{}", {"Inference-Header-Content-Length": "abc"}, "Inference-Header-Content-Length must be a number of bytes"),
        (orjson.dumps(infer_body()), {"Content-Encoding": "gzip"},
         "Content-Encoding gzip is not accepted: send the request uncompressed"),
        (b"{}", {"Inference-Header-Content-Length": "99999999999"},
         "Inference-Header-Content-Length is 99999999999; the body has 2 bytes"),
    ],
)
def test_requests_the_protocol_refuses_are_400_with_the_reason(
    client: Client, body: bytes, headers: dict[str, str], error: str
) -> None:
    answer = client.post("/v2/models/adder/infer", content=body, headers=headers)
    assert answer.status_code == 400
    assert answer.json()["error"].startswith(error)


def test_a_hostile_binary_size_is_refused_before_anything_is_read(client: Client) -> None:
    head = orjson.dumps({"inputs": [
        {"name": "a", "datatype": "FP32", "shape": [10**9, 2], "parameters": {"binary_data_size": 8 * 10**9}},
        {"name": "words", "datatype": "BYTES", "shape": [1], "data": ["x"]},
    ]})
    answer = client.post("/v2/models/adder/infer", content=head + b"\0" * 8,
                               headers={"Inference-Header-Content-Length": str(len(head))})
    assert answer.status_code == 400
    assert answer.json() == {"error": "input 'a': binary_data_size is 8000000000 bytes; 8 bytes of binary data are left"}
    short = orjson.dumps({"inputs": [
        {"name": "a", "datatype": "FP32", "shape": [1, 2], "parameters": {"binary_data_size": 4}},
        {"name": "words", "datatype": "BYTES", "shape": [1], "data": ["x"]},
    ]})
    answer = client.post("/v2/models/adder/infer", content=short + b"\0" * 8,
                               headers={"Inference-Header-Content-Length": str(len(short))})
    assert answer.json() == {"error": "input 'a': binary_data_size is 4 bytes; shape [1, 2] of FP32 is 8"}
    answer = client.post("/v2/models/adder/infer", content=head[:0] + orjson.dumps(infer_body()) + b"\0",
                               headers={"Inference-Header-Content-Length": str(len(orjson.dumps(infer_body())))})
    assert answer.json() == {"error": "1 bytes of binary data follow the JSON that no input's binary_data_size claims"}


def test_a_predict_that_raises_or_answers_wrong_is_500_with_why(client: Client) -> None:
    raised = client.post("/v2/models/adder/infer", json=infer_body(parameters={"fail": True}))
    assert raised.status_code == 500
    assert raised.json() == {"error": "predict raised RuntimeError (the replica's log has its traceback)"}
    wrong = client.post("/v2/models/adder/infer", json=infer_body(parameters={"wrong_shape": True}))
    assert wrong.status_code == 500
    assert wrong.json() == {"error": "predict returned output 'sum' of shape [1, 1]; the model's is [-1]"}


def test_bytes_that_are_not_text_must_be_asked_for_as_binary(client: Client) -> None:
    words = struct.pack("<I", 1) + b"\xff"
    head = orjson.dumps({"inputs": [
        {"name": "a", "datatype": "FP32", "shape": [1, 2], "data": [1, 2]},
        {"name": "words", "datatype": "BYTES", "shape": [1], "parameters": {"binary_data_size": len(words)}},
    ], "outputs": [{"name": "upper"}]})
    answer = client.post("/v2/models/adder/infer", content=head + words,
                               headers={"Inference-Header-Content-Length": str(len(head))})
    assert answer.status_code == 400 and "ask for it with binary_data" in answer.json()["error"]


@pytest.mark.parametrize(
    "path, method, status",
    [("/v2/models/adder/infer", "GET", 405), ("/v2/health/ready", "POST", 405), ("/v2/models/adder/explain", "POST", 404),
     ("/v2/repository/index", "POST", 404), ("/elsewhere", "GET", 404)],
)
def test_other_paths_and_methods_are_refused_as_json(client: Client, path: str, method: str, status: int) -> None:
    answer = client.request(method, path)
    assert answer.status_code == status and "error" in answer.json()


def wire(method: str, path: str, root: str, body: bytes = b"") -> Any:
    return (method, path, b"", with_root_path([(b"content-type", b"application/json")], root), body)


@pytest.mark.parametrize(
    "route, path",
    [("/v2", "/v2/models/adder"), ("/", "/v2/models/adder"), ("/adder", "/adder/v2/models/adder"),
     ("/v2/models/adder", "/v2/models/adder")],
)
def test_the_replica_host_serves_the_v2_app_under_any_route(route: str, path: str) -> None:
    replica = Replica(backend(), "adder#1")
    asyncio.run(replica.initialize())
    status, headers, body = asyncio.run(replica.handle_request(wire("GET", path, "" if route == "/" else route)))[:3]
    assert status == 200 and orjson.loads(body)["versions"] == ["code123"]
    answer = asyncio.run(replica.handle_request(wire("POST", path + "/infer", route, orjson.dumps(infer_body()))))
    assert answer[0] == 200 and orjson.loads(answer[2])["outputs"][0]["data"] == [3.0, 0.75]


def test_a_model_class_without_predict_fails_the_replicas_start() -> None:
    config = backend().model_copy(update={"import_path": f"{MODULE}:NoPredict"})
    with pytest.raises(TypeError, match=r'NoPredict has no predict\(inputs\) method: protocol = "v2" calls it'):
        asyncio.run(Replica(config, "x#1").initialize())


class NoPredict:
    pass


def test_the_example_model_serves_its_weights(tmp_path: Path) -> None:
    from deployments.apps.linear import Linear

    weights = tmp_path / "linear.json"
    weights.write_text('{"w": [[1, 0], [0, 1], [1, 1]], "b": [0.5, -0.5], "labels": ["left", "right"]}')
    install_models({"linear": str(weights)})  # as the replica host does once the model is staged
    linear = Linear()
    linear.load()
    out = linear.predict({"x": np.array([[1, 2, 3], [0, 0, 0]], dtype=np.float32)})
    assert out["y"].tolist() == [[4.5, 4.5], [0.5, -0.5]] and out["label"] == [b"left", b"left"]
