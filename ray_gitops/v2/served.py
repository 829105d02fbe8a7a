"""One v2 model as both surfaces serve it: loaded, ready or not, and its predict() run.

`ServedModel` owns what the REST app (`ray_gitops.v2.app`) and the gRPC
service (`ray_gitops.v2.grpc_service`) share about the user's model class:
it is constructed by the replica host, then `load()` is called if it has
one; ready means loaded and, when the model has a `ready` attribute
(KServe's `Model.ready`) or method, what it says; `predict(inputs)` (a dict
of input name to numpy array) runs on the replica's loop when async, in a
thread when sync, given the request's `parameters` too when it takes a
`parameters` keyword. A predict() that raises is logged with its traceback
(the replica's stderr, for `gitops logs`) and becomes `PredictFailed`,
whose text names only the exception's kind, for the client. The server's
own metadata (name, version, extensions) is here too.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from importlib import metadata as package_metadata
from typing import Any, Callable

from ray_gitops.v2.protocol import ModelMetadata

__all__ = ["ServedModel", "PredictFailed", "SERVER_NAME", "EXTENSIONS", "server_version"]

logger = logging.getLogger(__name__)

SERVER_NAME = "ray-gitops"
EXTENSIONS = ("binary_tensor_data",)


def server_version() -> str:
    """This package's version, as the v2 server metadata says it."""
    try:
        return package_metadata.version(SERVER_NAME)
    except package_metadata.PackageNotFoundError:
        return "unknown"


class PredictFailed(Exception):
    """predict() raised; the text is for the client (the traceback went to the log)."""


class ServedModel:
    """The user's model object with its metadata, loaded: what a v2 request is answered by."""

    def __init__(self, model: Any, metadata: ModelMetadata) -> None:
        predict = getattr(model, "predict", None)
        if not callable(predict):
            raise TypeError(f"{type(model).__qualname__} has no predict(inputs) method: protocol = \"v2\" calls it")
        self.model = model
        self.metadata = metadata
        self._predict = predict
        self._predict_is_async = inspect.iscoroutinefunction(predict)
        self._takes_parameters = _takes_parameters(predict)
        load = getattr(model, "load", None)
        if callable(load):
            load()  # KServe's Model.load(): the replica host runs this constructor in a thread
        self.loaded = True

    def is_ready(self) -> bool:
        """Loaded, and ready by the model's own `ready` (an attribute or a method) when it has one."""
        ready = getattr(self.model, "ready", True)
        if callable(ready):
            ready = ready()
        return self.loaded and bool(ready)

    async def predict(self, inputs: dict[str, Any], parameters: dict[str, Any]) -> Any:
        """What the model's predict() returns for `inputs`; `PredictFailed` when it raises."""
        call = (
            (lambda: self._predict(inputs, parameters=parameters)) if self._takes_parameters
            else (lambda: self._predict(inputs))
        )
        try:
            if self._predict_is_async:
                return await call()
            result = await asyncio.to_thread(call)
            return await result if inspect.isawaitable(result) else result
        except Exception as error:  # noqa: BLE001 — the model may raise anything; the client gets its kind, the log its traceback
            logger.exception("model %s: predict raised", self.metadata.name)
            raise PredictFailed(
                f"predict raised {type(error).__name__} (the replica's log has its traceback)"
            ) from None


def _takes_parameters(predict: Callable[..., Any]) -> bool:
    try:
        return "parameters" in inspect.signature(predict).parameters
    except (TypeError, ValueError):
        return False
