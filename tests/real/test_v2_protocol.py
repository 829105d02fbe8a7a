"""The Open Inference Protocol (v2) end to end: a `protocol = "v2"` spec loaded as the agent
loads it, its model pinned by digest (file://), served by real Ray replicas behind our
controller and proxy on 127.0.0.1, and used with Triton's official clients over both
transports: `tritonclient.http` (server and model readiness, server and model metadata whose
version is the model's digest, inference with JSON tensors and with binary tensors, refusals)
and `tritonclient.grpc` through the proxy's gRPC port (the endpoint's `grpc_service =
"inference.GRPCInferenceService"`: readiness, metadata, inference with raw inputs and with
typed contents, a wrong shape refused INVALID_ARGUMENT, another model NOT_FOUND; a second model's
endpoint at `/v2/models/NAME` beside it, each call routed by the model it names)."""

from __future__ import annotations

import hashlib
import json
import shutil
import uuid
from typing import Iterator

import numpy as np
import pytest

from gitops.specs.loading import Loader
from tests.support.examples import REPO_ROOT, TEST_SPEED
from tests.support.stack import eventually, free_port, met, proxy_url, run, start_controller
from vocabulary.spec.endpoints import EndpointConfig
from vocabulary.spec.state import ServingState

tritonclient_http = pytest.importorskip("tritonclient.http")
tritonclient_grpc = pytest.importorskip("tritonclient.grpc")
import grpc  # noqa: E402 — after the skips: the clients are a test extra
from tritonclient.grpc import service_pb2, service_pb2_grpc  # noqa: E402
from tritonclient.utils import InferenceServerException  # noqa: E402

pytestmark = pytest.mark.real

WEIGHTS = {
    "w": [[1, 0, 0], [0, 1, 0], [0, 0, 1], [1, 1, 1]], "b": [0.0, 0.5, -0.5], "labels": ["setosa", "versicolor", "virginica"],
}
SPEC = """\
[models.linear]
source = "{source}"
sha256 = "{digest}"

[backends.iris]
import_path = "deployments.apps.linear:Linear"
protocol = "v2"
models = ["linear"]

[backends.iris.v2]
name = "iris"
platform = "numpy"
model = "linear"
inputs = [{{ name = "x", datatype = "FP32", shape = [-1, 4] }}]
outputs = [{{ name = "y", datatype = "FP32", shape = [-1, 3] }}, {{ name = "label", datatype = "BYTES", shape = [-1] }}]

[endpoints.v2]
route = "/v2"
grpc_service = "inference.GRPCInferenceService"
traffic = {{ iris = 1.0 }}
"""


def expected(x: np.ndarray) -> tuple[np.ndarray, list[bytes]]:
    y = x @ np.asarray(WEIGHTS["w"], dtype=np.float32) + np.asarray(WEIGHTS["b"], dtype=np.float32)
    return y, [WEIGHTS["labels"][column].encode() for column in y.argmax(axis=1)]


class Served:
    def __init__(self, client: object, state: ServingState, code: str, digest: str, url: str, grpc_port: int) -> None:
        self.client, self.state, self.code, self.digest, self.url = client, state, code, digest, url
        self.triton = tritonclient_http.InferenceServerClient(url=url.removeprefix("http://"), network_timeout=30)
        self.grpc_address = f"127.0.0.1:{grpc_port}"
        self.triton_grpc = tritonclient_grpc.InferenceServerClient(url=self.grpc_address)


@pytest.fixture(scope="module")
def served(ray_session: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    tree = tmp_path_factory.mktemp("v2-tree")
    weights = tree / "weights.json"
    weights.write_bytes(json.dumps(WEIGHTS).encode())
    digest = hashlib.sha256(weights.read_bytes()).hexdigest()
    (tree / "deployments" / "apps").mkdir(parents=True)
    for package in ("deployments/__init__.py", "deployments/apps/__init__.py"):
        (tree / package).write_text("")
    shutil.copy(REPO_ROOT / "deployments" / "apps" / "linear.py", tree / "deployments" / "apps" / "linear.py")
    (tree / "deployments" / "iris.toml").write_text(SPEC.format(source=weights.as_uri(), digest=digest))
    loaded = Loader().load_directory(tree / "deployments", root=tree)
    assert loaded.state is not None, [str(error) for error in loaded.errors]
    namespace = f"{ray_session}-v2-{uuid.uuid4().hex[:6]}"
    grpc_port = free_port()
    client = start_controller(namespace, proxies=True, proxy_grpc_port=grpc_port)
    try:
        yield Served(client, loaded.state, str(tree), digest, proxy_url(namespace), grpc_port)
    finally:
        client.shutdown()


@pytest.fixture(scope="module")
def ready(served: Served) -> Served:
    """The v2 backend and its /v2 endpoint applied; before that, the proxy says not ready."""
    assert served.triton.is_server_live() is False  # no route to any v2 backend yet: the proxy's 404
    assert served.triton.is_server_ready() is False
    backend = served.state.backends["iris"].model_copy(update={"working_dir": served.code, **TEST_SPEED})
    met(served.client, run(served.client.apply_backend(backend)))
    met(served.client, run(served.client.apply_endpoint(served.state.endpoints["v2"])))
    return served


def test_health_follows_the_backend_and_its_model(ready: Served) -> None:
    assert ready.triton.is_server_live() and ready.triton.is_server_ready()
    assert ready.triton.is_model_ready("iris") and ready.triton.is_model_ready("iris", ready.digest)
    assert not ready.triton.is_model_ready("iris", "1")
    assert not ready.triton.is_model_ready("resnet")


def test_metadata_says_the_spec_with_the_models_digest_as_its_version(ready: Served) -> None:
    server = ready.triton.get_server_metadata()
    assert server["name"] == "ray-gitops" and "binary_tensor_data" in server["extensions"]
    assert ready.triton.get_model_metadata("iris") == {
        "name": "iris",
        "versions": [ready.digest],
        "platform": "numpy",
        "inputs": [{"name": "x", "datatype": "FP32", "shape": [-1, 4]}],
        "outputs": [{"name": "y", "datatype": "FP32", "shape": [-1, 3]}, {"name": "label", "datatype": "BYTES", "shape": [-1]}],
    }
    assert ready.triton.get_model_metadata("iris", ready.digest)["versions"] == [ready.digest]
    with pytest.raises(InferenceServerException, match="model 'iris' has no version '2'") as refused:
        ready.triton.get_model_metadata("iris", "2")
    assert refused.value.status() == "404"


def infer(ready: Served, x: np.ndarray, binary: bool, **options: object) -> object:
    tensor = tritonclient_http.InferInput("x", list(x.shape), "FP32")
    tensor.set_data_from_numpy(x, binary_data=binary)
    outputs = [tritonclient_http.InferRequestedOutput(name, binary_data=binary) for name in ("y", "label")]
    return ready.triton.infer("iris", [tensor], outputs=outputs, **options)


def test_inference_with_json_tensors(ready: Served) -> None:
    x = np.array([[1, 2, 3, 4], [4, 3, 2, 1.5]], dtype=np.float32)
    result = infer(ready, x, binary=False, request_id="json-1")
    y, labels = expected(x)
    assert np.array_equal(result.as_numpy("y"), y)
    assert result.as_numpy("label").tolist() == [label.decode() for label in labels]  # JSON BYTES: the client's str
    response = result.get_response()
    assert response["id"] == "json-1" and response["model_version"] == ready.digest
    assert "data" in response["outputs"][0]  # answered as JSON, as asked


def test_inference_with_binary_tensors_of_a_large_batch(ready: Served) -> None:
    x = np.random.default_rng(7).random((20_000, 4), dtype=np.float32)  # 320 kB in, 240 kB out
    result = infer(ready, x, binary=True)
    y, labels = expected(x)
    assert result.as_numpy("y").shape == (20_000, 3)
    assert np.allclose(result.as_numpy("y"), y) and result.as_numpy("label").tolist() == labels
    assert result.get_output("y")["parameters"]["binary_data_size"] == 20_000 * 3 * 4


def test_every_output_comes_binary_when_none_is_named(ready: Served) -> None:
    tensor = tritonclient_http.InferInput("x", [1, 4], "FP32")
    tensor.set_data_from_numpy(np.ones((1, 4), dtype=np.float32))
    result = ready.triton.infer("iris", [tensor])  # the client asks binary_data_output
    assert result.as_numpy("y").tolist() == [[2.0, 2.5, 1.5]] and result.as_numpy("label").tolist() == [b"versicolor"]


def test_a_tensor_that_does_not_fit_the_metadata_is_refused_with_400(ready: Served) -> None:
    tensor = tritonclient_http.InferInput("x", [2, 3], "FP32")
    tensor.set_data_from_numpy(np.ones((2, 3), dtype=np.float32))
    does_not_fit = r"input 'x': shape \[2, 3\] does not fit the model's \[-1, 4\]"
    with pytest.raises(InferenceServerException, match=does_not_fit) as refused:
        ready.triton.infer("iris", [tensor])
    assert refused.value.status() == "400"


# --- the same model over gRPC: Triton's gRPC client at the proxy's gRPC port -------------------------


def test_grpc_health_follows_the_backend_and_its_model(ready: Served) -> None:
    triton = ready.triton_grpc
    assert triton.is_server_live() and triton.is_server_ready()
    assert triton.is_model_ready("iris") and triton.is_model_ready("iris", ready.digest)
    with pytest.raises(InferenceServerException, match="unknown model 'resnet': this endpoint serves 'iris'") as unknown:
        triton.is_model_ready("resnet")
    assert unknown.value.status() == str(grpc.StatusCode.NOT_FOUND)


def test_grpc_metadata_is_the_rest_metadata(ready: Served) -> None:
    server = ready.triton_grpc.get_server_metadata()
    assert server.name == "ray-gitops" and "binary_tensor_data" in server.extensions
    metadata = ready.triton_grpc.get_model_metadata("iris", ready.digest)
    as_rest = {
        "name": metadata.name, "versions": list(metadata.versions), "platform": metadata.platform,
        "inputs": [{"name": t.name, "datatype": t.datatype, "shape": list(t.shape)} for t in metadata.inputs],
        "outputs": [{"name": t.name, "datatype": t.datatype, "shape": list(t.shape)} for t in metadata.outputs],
    }
    assert as_rest == ready.triton.get_model_metadata("iris")
    with pytest.raises(InferenceServerException, match="model 'iris' has no version '2'") as refused:
        ready.triton_grpc.get_model_metadata("iris", "2")
    assert refused.value.status() == str(grpc.StatusCode.NOT_FOUND)


def test_grpc_inference_with_raw_inputs_of_a_large_batch(ready: Served) -> None:
    x = np.random.default_rng(11).random((20_000, 4), dtype=np.float32)
    tensor = tritonclient_grpc.InferInput("x", list(x.shape), "FP32")
    tensor.set_data_from_numpy(x)  # the client sends raw_input_contents
    result = ready.triton_grpc.infer("iris", [tensor], request_id="grpc-1")
    y, labels = expected(x)
    assert np.allclose(result.as_numpy("y"), y) and result.as_numpy("label").tolist() == labels
    response = result.get_response()
    assert (response.id, response.model_version) == ("grpc-1", ready.digest)
    assert len(response.raw_output_contents) == 2  # answered raw, as Triton answers


def test_grpc_inference_with_typed_contents(ready: Served) -> None:
    x = np.array([[1, 2, 3, 4], [4, 3, 2, 1.5]], dtype=np.float32)
    request = service_pb2.ModelInferRequest(model_name="iris")
    tensor = request.inputs.add(name="x", datatype="FP32", shape=list(x.shape))
    tensor.contents.fp32_contents.extend(x.reshape(-1).tolist())
    with grpc.insecure_channel(ready.grpc_address) as channel:  # Triton's generated stub: the client sends raw only
        response = service_pb2_grpc.GRPCInferenceServiceStub(channel).ModelInfer(request, timeout=30)
    result = tritonclient_grpc.InferResult(response)
    y, labels = expected(x)
    assert np.array_equal(result.as_numpy("y"), y) and result.as_numpy("label").tolist() == labels


def test_grpc_a_tensor_that_does_not_fit_the_metadata_is_invalid_argument(ready: Served) -> None:
    tensor = tritonclient_grpc.InferInput("x", [2, 3], "FP32")
    tensor.set_data_from_numpy(np.ones((2, 3), dtype=np.float32))
    does_not_fit = r"input 'x': shape \[2, 3\] does not fit the model's \[-1, 4\]"
    with pytest.raises(InferenceServerException, match=does_not_fit) as refused:
        ready.triton_grpc.infer("iris", [tensor])
    assert refused.value.status() == str(grpc.StatusCode.INVALID_ARGUMENT)


# --- two models on the one gRPC port: each call routed by the model it names (last: it adds a model) ---


def test_grpc_two_models_on_one_port_each_call_routed_by_the_model_it_names(ready: Served) -> None:
    iris = ready.state.backends["iris"]
    assert iris.v2 is not None
    lily = iris.model_copy(update={
        "name": "lily", "working_dir": ready.code, "v2": iris.v2.model_copy(update={"name": "lily"}), **TEST_SPEED,
    })
    met(ready.client, run(ready.client.apply_backend(lily)))
    at_its_path = EndpointConfig(
        name="lily", route="/v2/models/lily", traffic={"lily": 1.0}, grpc_service="inference.GRPCInferenceService",
    )
    met(ready.client, run(ready.client.apply_endpoint(at_its_path)))
    triton = ready.triton_grpc
    eventually(lambda: triton.is_model_ready("lily"), 60, 0.5, what="lily ready over gRPC",
               retry_on=(InferenceServerException,))
    x = np.array([[1, 2, 3, 4]], dtype=np.float32)
    y, labels = expected(x)
    for model in ("iris", "lily"):
        assert triton.is_model_ready(model) and triton.get_model_metadata(model).name == model
        tensor = tritonclient_grpc.InferInput("x", list(x.shape), "FP32")
        tensor.set_data_from_numpy(x)
        result = triton.infer(model, [tensor])
        assert result.get_response().model_name == model
        assert np.allclose(result.as_numpy("y"), y) and result.as_numpy("label").tolist() == labels
    assert triton.is_server_live() and triton.get_server_metadata().name == "ray-gitops"  # the /v2 endpoint's
    # A model no endpoint serves: the /v2 endpoint's replica says so.
    with pytest.raises(InferenceServerException, match="unknown model 'resnet': this endpoint serves 'iris'"):
        triton.get_model_metadata("resnet")
    assert ready.triton.get_model_metadata("lily")["name"] == "lily"  # and over REST, at its route
