"""The Open Inference Protocol's (v2) REST surface around one model class: an ASGI app.

A backend with `protocol = "v2"` has its replicas run `V2App` around the
class its `import_path` names (the replica host, `replica.host`, wraps it):
the model is constructed, its `load()` called if it has one, and then the
app serves, under the endpoint's route:

    GET  /v2/health/live, /v2/health/ready            200, or 400 while not ready
    GET  /v2                                           server metadata
    GET  /v2/models/NAME[/versions/V]                  model metadata
    GET  /v2/models/NAME[/versions/V]/ready            200, or 400 while not ready
    POST /v2/models/NAME[/versions/V]/infer            inference (JSON or binary tensors)

`infer` reads the request (`ray_gitops.v2.protocol`), calls the model's
`predict(inputs)` (a dict of input name to numpy array; async, or run in a
thread when sync; given the request's `parameters` too when it takes a
`parameters` keyword) and answers its dict of output name to array. Ready
means loaded and, when the model has a `ready` attribute (KServe's
`Model.ready`) or method, what it says. The v2 paths are found after the
endpoint's route (`/iris/v2/...` for route `/iris`), or as they are when
the route lies inside them (`/v2`, `/v2/models/iris`). Errors are
`{"error": "..."}`: 400 for a request the protocol or the metadata refuses
(or a compressed one: bodies are taken uncompressed),
404 for a path, model or version there is not, 500 when predict() raised
(its traceback goes to the replica's stderr, for `gitops logs`) or returned
what the metadata does not say. The model's `reconfigure`, `check_health`
and `reconfigure_secrets` are the replica's as for any backend.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from importlib import metadata as package_metadata
from typing import Any, Callable
from urllib.parse import unquote

import orjson

from ray_gitops.asgi import Receive, Scope, Send, no_lifespan, whole_body
from ray_gitops.v2.protocol import AnswerError, ModelMetadata, RequestError, read_request, write_answer
from vocabulary.spec.backends import BackendConfig

__all__ = ["V2App", "SERVER_NAME", "EXTENSIONS"]

logger = logging.getLogger(__name__)

SERVER_NAME = "ray-gitops"
EXTENSIONS = ("binary_tensor_data",)
_HEADER_LENGTH = b"inference-header-content-length"
_JSON = [(b"content-type", b"application/json")]


def _server_version() -> str:
    try:
        return package_metadata.version(SERVER_NAME)
    except package_metadata.PackageNotFoundError:
        return "unknown"


class V2App:
    """One v2 model served as an ASGI app (`await app(scope, receive, send)`)."""

    def __init__(self, model: Any, metadata: ModelMetadata) -> None:
        predict = getattr(model, "predict", None)
        if not callable(predict):
            raise TypeError(f"{type(model).__qualname__} has no predict(inputs) method: protocol = \"v2\" calls it")
        self.model = model
        self.metadata = metadata
        self._predict = predict
        self._predict_is_async = inspect.iscoroutinefunction(predict)
        self._takes_parameters = _takes_parameters(predict)
        self._server = orjson.dumps({"name": SERVER_NAME, "version": _server_version(), "extensions": list(EXTENSIONS)})
        self._model_json = orjson.dumps(metadata.as_json())
        load = getattr(model, "load", None)
        if callable(load):
            load()  # KServe's Model.load(): the replica host runs this constructor in a thread
        self.loaded = True

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
        """Loaded, and ready by the model's own `ready` (an attribute or a method) when it has one."""
        ready = getattr(self.model, "ready", True)
        if callable(ready):
            ready = ready()
        return self.loaded and bool(ready)

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
        name, rest = parts[1], parts[2:]
        if name != self.metadata.name:
            return _error(404, f"unknown model '{name[:128]}': this endpoint serves '{self.metadata.name}'")
        if rest[:1] == ["versions"]:
            if len(rest) < 2:
                return _error(404, "no version given after /versions")
            if rest[1] != self.metadata.version:
                return _error(
                    404, f"model '{name}' has no version '{rest[1][:80]}' (it has '{self.metadata.version}')"
                )
            rest = rest[2:]
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
            results = await self._run(request.inputs, request.parameters)
        except Exception as error:  # noqa: BLE001 — the model may raise anything; the client gets its kind, the log its traceback
            logger.exception("model %s: predict raised", self.metadata.name)
            return _error(500, f"predict raised {type(error).__name__} (the replica's log has its traceback)")
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

    async def _run(self, inputs: dict[str, Any], parameters: dict[str, Any]) -> Any:
        call = (
            (lambda: self._predict(inputs, parameters=parameters)) if self._takes_parameters
            else (lambda: self._predict(inputs))
        )
        if self._predict_is_async:
            return await call()
        result = await asyncio.to_thread(call)
        return await result if inspect.isawaitable(result) else result


def _v2_parts(path: str, root_path: str) -> list[str] | None:
    """The path's segments after its `/v2`: found after the route (`root_path`), else at the
    path's start (a route inside the v2 paths); None when neither holds a `/v2`."""
    root = root_path.rstrip("/")
    for base in (root, ""):
        prefix = f"{base}/v2"
        if path == prefix or path.startswith(prefix + "/"):
            return [unquote(part) for part in path[len(prefix):].split("/") if part]
    return None


def _takes_parameters(predict: Callable[..., Any]) -> bool:
    try:
        return "parameters" in inspect.signature(predict).parameters
    except (TypeError, ValueError):
        return False


def _optional(model: Any, method: str, *args: Any) -> Any:
    fn = getattr(model, method, None)
    return fn(*args) if callable(fn) else None


def _error(status: int, message: str) -> tuple[int, list[tuple[bytes, bytes]], bytes]:
    return status, list(_JSON), orjson.dumps({"error": message})
