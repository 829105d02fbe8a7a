"""OpenAI's wire shapes: requests read and checked, answers, stream chunks, SSE, errors.

The one place that knows what OpenAI's API looks like on the wire, for the
built-in backend (`ray_gitops.llm.http`) and the simulator
(`deployments/apps/llm_sim.py`) alike:

- `read_chat`, `read_completion`, `read_embeddings`: a parsed JSON body to a
  request value, or `OpenAIError` naming the `param` at fault (OpenAI's
  400 `invalid_request_error`); fields we do not use are ignored, as OpenAI's
  own server does with `user` or `metadata`.
- `chat_completion`, `chat_chunk`, `completion`, `completion_chunk`,
  `usage_chunk`, `model_list`, `embedding_list`: the answers, as dicts.
- `sse(obj)` and `SSE_DONE`: one server-sent event (`data: ...\\n\\n`) and
  the stream's end (`data: [DONE]\\n\\n`).
- `OpenAIError.body()`: `{"error": {"message", "type", "param", "code"}}`.

Pure: values in, values out; no I/O, no clock (callers pass `created`).
"""

from __future__ import annotations

import base64
import json
import struct
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

__all__ = [
    "OpenAIError",
    "ChatRequest",
    "CompletionRequest",
    "EmbeddingsRequest",
    "read_chat",
    "read_completion",
    "read_embeddings",
    "usage_dict",
    "chat_completion",
    "chat_chunk",
    "completion",
    "completion_chunk",
    "usage_chunk",
    "model_card",
    "model_list",
    "embedding_list",
    "sse",
    "SSE_DONE",
    "ROLES",
]

ROLES = frozenset({"system", "developer", "user", "assistant", "tool"})
MAX_STOP = 4
SSE_DONE = b"data: [DONE]\n\n"


@dataclass(eq=False)
class OpenAIError(Exception):
    """An error as OpenAI answers it: the HTTP status and `{"error": {...}}`."""

    status: int
    message: str
    type: str = "invalid_request_error"
    param: str | None = None
    code: str | None = None

    def __str__(self) -> str:
        return self.message

    def body(self) -> dict[str, Any]:
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}


@dataclass(frozen=True)
class _Sampling:
    """What both generating requests share."""

    model: str
    max_tokens: int | None
    temperature: float
    top_p: float
    seed: int | None
    stop: tuple[str, ...]
    stream: bool
    include_usage: bool


@dataclass(frozen=True)
class ChatRequest(_Sampling):
    """`POST /v1/chat/completions`: messages as `{"role", "content"}` with text content."""

    messages: tuple[Mapping[str, str], ...] = field(default=())


@dataclass(frozen=True)
class CompletionRequest(_Sampling):
    """`POST /v1/completions`: one text prompt."""

    prompt: str = ""


@dataclass(frozen=True)
class EmbeddingsRequest:
    """`POST /v1/embeddings`: texts, answered as floats or base64 (little-endian float32)."""

    model: str
    inputs: tuple[str, ...]
    encoding_format: str


def _invalid(message: str, param: str | None, code: str | None = None) -> OpenAIError:
    return OpenAIError(400, message, "invalid_request_error", param, code)


def _object(body: Any) -> Mapping[str, Any]:
    if not isinstance(body, dict):
        raise _invalid("The request body must be a JSON object.", None)
    return body


def _model(body: Mapping[str, Any]) -> str:
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise _invalid("you must provide a model parameter", "model")
    return model


def _number(body: Mapping[str, Any], name: str, default: float, low: float, high: float, low_open: bool = False) -> float:
    value = body.get(name)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise _invalid(f"{name} must be a number", name)
    if value > high or value < low or (low_open and value == low):
        bound = f"greater than {low:g}" if low_open else f"at least {low:g}"
        raise _invalid(f"{value} is not valid for {name}: it must be {bound} and at most {high:g}", name)
    return float(value)


def _integer(body: Mapping[str, Any], name: str, low: int) -> int | None:
    value = body.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise _invalid(f"{name} must be an integer", name)
    if value < low:
        raise _invalid(f"{value} is less than the minimum of {low} - '{name}'", name)
    return value


def _sampling(body: Mapping[str, Any], max_name: str) -> dict[str, Any]:
    n = _integer(body, "n", 1)
    if n not in (None, 1):
        raise _invalid("only n = 1 is supported", "n")
    stop = body.get("stop")
    if stop is None:
        stops: tuple[str, ...] = ()
    elif isinstance(stop, str):
        stops = (stop,)
    elif isinstance(stop, list) and all(isinstance(s, str) for s in stop) and len(stop) <= MAX_STOP:
        stops = tuple(stop)
    else:
        raise _invalid(f"stop must be a string or a list of at most {MAX_STOP} strings", "stop")
    stream = body.get("stream", False)
    if stream is None:
        stream = False
    if not isinstance(stream, bool):
        raise _invalid("stream must be a boolean", "stream")
    options = body.get("stream_options")
    if options is not None and (not isinstance(options, dict) or not stream):
        raise _invalid("stream_options is an object, allowed only with stream = true", "stream_options")
    seed = _integer(body, "seed", -(2**63))
    max_tokens = _integer(body, max_name, 1)
    if max_tokens is None and max_name != "max_tokens":
        max_tokens = _integer(body, "max_tokens", 1)
    return {
        "model": _model(body),
        "max_tokens": max_tokens,
        "temperature": _number(body, "temperature", 1.0, 0.0, 2.0),
        "top_p": _number(body, "top_p", 1.0, 0.0, 1.0, low_open=True),
        "seed": seed,
        "stop": stops,
        "stream": stream,
        "include_usage": bool(options and options.get("include_usage")),
    }


def _content(content: Any, where: str) -> str:
    """A message's text: a string, or a list of `{"type": "text", "text": ...}` parts."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = []
        for index, part in enumerate(content):
            if not isinstance(part, dict) or part.get("type") != "text" or not isinstance(part.get("text"), str):
                raise _invalid(f"{where}.content[{index}]: only text parts are supported", f"{where}.content")
            texts.append(part["text"])
        return "".join(texts)
    if content is None:
        return ""
    raise _invalid(f"{where}.content must be a string or a list of text parts", f"{where}.content")


def read_chat(body: Any) -> ChatRequest:
    """A chat completion request, checked as OpenAI checks it."""
    body = _object(body)
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise _invalid("messages must be a non-empty list", "messages")
    read: list[Mapping[str, str]] = []
    for index, message in enumerate(messages):
        where = f"messages[{index}]"
        if not isinstance(message, dict):
            raise _invalid(f"{where} must be an object", where)
        role = message.get("role")
        if role not in ROLES:
            raise _invalid(f"{where}.role must be one of {', '.join(sorted(ROLES))} (got {role!r})", f"{where}.role")
        read.append({"role": role, "content": _content(message.get("content"), where)})
    return ChatRequest(**_sampling(body, "max_completion_tokens"), messages=tuple(read))


def read_completion(body: Any) -> CompletionRequest:
    """A (legacy) text completion request: one prompt, as a string or a list of one string."""
    body = _object(body)
    prompt = body.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str):
        prompt = prompt[0]
    if not isinstance(prompt, str):
        raise _invalid("prompt must be a string (or a list of one string)", "prompt")
    asked = {"echo": body.get("echo") is True, "suffix": bool(body.get("suffix")),
             "logprobs": body.get("logprobs") not in (None, 0), "best_of": body.get("best_of") not in (None, 1)}
    for unsupported, is_asked in asked.items():
        if is_asked:
            raise _invalid(f"{unsupported} is not supported", unsupported)
    return CompletionRequest(**_sampling(body, "max_tokens"), prompt=prompt)


def read_embeddings(body: Any) -> EmbeddingsRequest:
    body = _object(body)
    given = body.get("input")
    inputs = (given,) if isinstance(given, str) else given
    if not isinstance(inputs, (list, tuple)) or not inputs or not all(isinstance(t, str) for t in inputs):
        raise _invalid("input must be a string or a non-empty list of strings", "input")
    encoding = body.get("encoding_format") or "float"
    if encoding not in ("float", "base64"):
        raise _invalid("encoding_format must be 'float' or 'base64'", "encoding_format")
    return EmbeddingsRequest(_model(body), tuple(inputs), encoding)


def usage_dict(prompt_tokens: int, completion_tokens: int) -> dict[str, int]:
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
    }


def chat_completion(
    ident: str, created: int, model: str, text: str, finish_reason: str, usage: Mapping[str, Any]
) -> dict[str, Any]:
    return {
        "id": ident, "object": "chat.completion", "created": created, "model": model,
        "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "logprobs": None,
                     "finish_reason": finish_reason}],
        "usage": dict(usage),
    }


def chat_chunk(
    ident: str, created: int, model: str, delta: Mapping[str, Any], finish_reason: str | None = None,
    usage: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """One `chat.completion.chunk`; `usage` is added when given (the simulator's last chunk carries it)."""
    chunk: dict[str, Any] = {
        "id": ident, "object": "chat.completion.chunk", "created": created, "model": model,
        "choices": [{"index": 0, "delta": dict(delta), "logprobs": None, "finish_reason": finish_reason}],
    }
    if usage is not None:
        chunk["usage"] = dict(usage)
    return chunk


def completion(
    ident: str, created: int, model: str, text: str, finish_reason: str, usage: Mapping[str, Any]
) -> dict[str, Any]:
    return {
        "id": ident, "object": "text_completion", "created": created, "model": model,
        "choices": [{"index": 0, "text": text, "logprobs": None, "finish_reason": finish_reason}],
        "usage": dict(usage),
    }


def completion_chunk(ident: str, created: int, model: str, text: str, finish_reason: str | None = None) -> dict[str, Any]:
    return {
        "id": ident, "object": "text_completion", "created": created, "model": model,
        "choices": [{"index": 0, "text": text, "logprobs": None, "finish_reason": finish_reason}],
    }


def usage_chunk(ident: str, created: int, model: str, obj: str, usage: Mapping[str, Any]) -> dict[str, Any]:
    """`stream_options.include_usage`: the last chunk before `[DONE]`, with no choices."""
    return {"id": ident, "object": obj, "created": created, "model": model, "choices": [], "usage": dict(usage)}


def model_card(name: str, created: int, owned_by: str = "ray-gitops", parent: str | None = None) -> dict[str, Any]:
    """A model as /v1/models lists it; a LoRA adapter names its base model as `parent` (as vLLM does)."""
    card: dict[str, Any] = {"id": name, "object": "model", "created": created, "owned_by": owned_by}
    if parent is not None:
        card["parent"] = parent
    return card


def model_list(names: Sequence[str], created: int, parents: Mapping[str, str] | None = None) -> dict[str, Any]:
    parents = parents or {}
    return {"object": "list", "data": [model_card(name, created, parent=parents.get(name)) for name in names]}


def embedding_list(
    model: str, vectors: Sequence[Sequence[float]], prompt_tokens: int, encoding_format: str
) -> dict[str, Any]:
    def encoded(vector: Sequence[float]) -> Any:
        if encoding_format == "base64":
            return base64.b64encode(struct.pack(f"<{len(vector)}f", *vector)).decode("ascii")
        return list(vector)

    return {
        "object": "list",
        "data": [{"object": "embedding", "index": i, "embedding": encoded(v)} for i, v in enumerate(vectors)],
        "model": model,
        "usage": {"prompt_tokens": prompt_tokens, "total_tokens": prompt_tokens},
    }


def sse(obj: Any) -> bytes:
    """One server-sent event carrying `obj` as compact JSON."""
    return b"data: " + json.dumps(obj, separators=(",", ":")).encode() + b"\n\n"
