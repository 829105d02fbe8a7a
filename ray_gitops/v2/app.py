"""The Open Inference Protocol's (v2) REST surface around one model class: an ASGI app.

A backend with `protocol = "v2"` has its replicas run `V2App` around the
class its `import_path` names (the replica host, `replica.host`, wraps it):
the model is constructed and loaded (`ray_gitops.v2.served`), and then the
app serves, under the endpoint's route:

    GET  /v2/health/live, /v2/health/ready            200, or 400 while not ready
    GET  /v2                                           server metadata
    GET  /v2/models/NAME[/versions/V]                  model metadata
    GET  /v2/models/NAME[/versions/V]/ready            200, or 400 while not ready
    POST /v2/models/NAME[/versions/V]/infer            inference (JSON or binary tensors)

`infer` reads the request (`ray_gitops.v2.protocol`), calls the model's
`predict(inputs)` (`ServedModel.predict`) and answers its dict of output
name to array. The v2 paths are found after the
endpoint's route (`/iris/v2/...` for route `/iris`), or as they are when
the route lies inside them (`/v2`, `/v2/models/iris`). Errors are
`{"error": "..."}`: 400 for a request the protocol or the metadata refuses
(or a compressed one: bodies are taken uncompressed),
404 for a path, model or version there is not, 500 when predict() raised
(its traceback goes to the replica's stderr, for `gitops logs`) or returned
what the metadata does not say. The model's `reconfigure`, `check_health`
and `reconfigure_secrets` are the replica's as for any backend.

The same model answers the v2 gRPC service (`inference.GRPCInferenceService`)
through `grpc_service` (`ray_gitops.v2.grpc_service`), which the replica
host gives the calls of the proxy's gRPC port.
"""

from __future__ import annotations

import logging
from typing import Any
from urllib.parse import unquote

import orjson

from ray_gitops.asgi import Receive, Scope, Send, no_lifespan, whole_body
from ray_gitops.v2.grpc_service import V2GrpcService
from ray_gitops.v2.protocol import (
    AnswerError,
    ModelMetadata,
    RequestError,
    UnknownModel,
    known_model,
    read_request,
    write_answer,
)
from ray_gitops.v2.served import EXTENSIONS, SERVER_NAME, PredictFailed, ServedModel, server_version
from vocabulary.spec.backends import BackendConfig

__all__ = ["V2App"]

logger = logging.getLogger(__name__)

_HEADER_LENGTH = b"inference-header-content-length"
_JSON = [(b"content-type", b"application/json")]


class V2App:
    """One v2 model served as an ASGI app (`await app(scope, receive, send)`), and its gRPC service."""

    def __init__(self, model: Any, metadata: ModelMetadata) -> None:
        self.served = ServedModel(model, metadata)
        self.model = model
        self.metadata = metadata
        self.grpc_service = V2GrpcService(self.served)
        self._server = orjson.dumps({"name": SERVER_NAME, "version": server_version(), "extensions": list(EXTENSIONS)})
        self._model_json = orjson.dumps(metadata.as_json())

    @classmethod
    def around(cls, model: Any, backend: BackendConfig) -> V2App:
        """The app a `protocol = "v2"` backend's replica serves around its constructed model."""
        return cls(model, ModelMetadata.of(backend))

    # --- what the replica host calls on a backend's class, passed on to the model ---------

    def reconfigure(self, user_config: Any) -> Any:
        return _optional(self.model, "reconfigure", user_config)

    def check_health(self) -> Any:
        return _optional(self.model, "check_health")

    def reconfigure_secrets(self) -> Any:
        return _optional(self.model, "reconfigure_secrets")

    def is_ready(self) -> bool:
        return self.served.is_ready()

    # --- ASGI ----------------------------------------------------------------------

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await no_lifespan(receive, send)
            return
        if scope["type"] != "http":
            return  # a WebSocket: refused by closing before accepting
        status, headers, body = await self._answer(scope, receive)
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body})

    async def _answer(self, scope: Scope, receive: Receive) -> tuple[int, list[tuple[bytes, bytes]], bytes]:
        parts = _v2_parts(scope.get("path", ""), scope.get("root_path", ""))
        method = scope.get("method", "GET")
        if parts is None:
            return _error(404, f"no v2 path here: {scope.get('path', '')[:200]}")
        if parts in ([], ["health", "live"], ["health", "ready"]):
            if method != "GET":
                return _error(405, f"{method} is not allowed here; GET is")
            if parts == []:
                return 200, list(_JSON), self._server
            if parts[1] == "ready" and not self.is_ready():
                return _error(400, f"model '{self.metadata.name}' is not ready")
            return 200, [], b""
        if len(parts) < 2 or parts[0] != "models":
            return _error(404, f"no v2 path /v2/{'/'.join(parts)[:200]}")
        name, rest, version = parts[1], parts[2:], None
        if rest[:1] == ["versions"]:
            if len(rest) < 2:
                return _error(404, "no version given after /versions")
            version, rest = rest[1], rest[2:]
        try:
            known_model(name, version, self.metadata)
        except UnknownModel as error:
            return _error(404, str(error))
        if rest == []:
            return (200, list(_JSON), self._model_json) if method == "GET" else _error(405, "GET is allowed here")
        if rest == ["ready"]:
            if method != "GET":
                return _error(405, "GET is allowed here")
            return (200, [], b"") if self.is_ready() else _error(400, f"model '{name}' is not ready")
        if rest == ["infer"]:
            if method != "POST":
                return _error(405, "POST is allowed here")
            return await self._infer(scope, receive)
        return _error(404, f"no v2 path /v2/{'/'.join(parts)[:200]}")

    async def _infer(self, scope: Scope, receive: Receive) -> tuple[int, list[tuple[bytes, bytes]], bytes]:
        body = await whole_body(receive) or b""  # None: the client left mid-body; refused as empty below
        headers = {key.lower(): value for key, value in scope.get("headers", ())}
        encoding = headers.get(b"content-encoding", b"identity").strip().lower()
        if encoding != b"identity":
            shown = encoding.decode("latin-1")[:40]
            return _error(400, f"Content-Encoding {shown} is not accepted: send the request uncompressed")
        header_length = headers[_HEADER_LENGTH].decode("latin-1") if _HEADER_LENGTH in headers else None
        try:
            request = read_request(body, header_length, self.metadata)
        except RequestError as error:
            return _error(400, str(error))
        if not self.is_ready():
            return _error(400, f"model '{self.metadata.name}' is not ready")
        try:
            results = await self.served.predict(request.inputs, request.parameters)
        except PredictFailed as error:
            return _error(500, str(error))
        try:
            answer, head_length = write_answer(request, results, self.metadata)
        except AnswerError as error:
            logger.error("model %s: %s", self.metadata.name, error)
            return _error(500, str(error))
        except RequestError as error:
            return _error(400, str(error))
        if head_length is None:
            return 200, list(_JSON), answer
        return 200, [(b"content-type", b"application/octet-stream"), (_HEADER_LENGTH, str(head_length).encode())], answer


def _v2_parts(path: str, root_path: str) -> list[str] | None:
    """The path's segments after its `/v2`: found after the route (`root_path`), else at the
    path's start (a route inside the v2 paths); None when neither holds a `/v2`."""
    root = root_path.rstrip("/")
    for base in (root, ""):
        prefix = f"{base}/v2"
        if path == prefix or path.startswith(prefix + "/"):
            return [unquote(part) for part in path[len(prefix):].split("/") if part]
    return None


def _optional(model: Any, method: str, *args: Any) -> Any:
    fn = getattr(model, method, None)
    return fn(*args) if callable(fn) else None


def _error(status: int, message: str) -> tuple[int, list[tuple[bytes, bytes]], bytes]:
    return status, list(_JSON), orjson.dumps({"error": message})
