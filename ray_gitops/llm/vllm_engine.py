"""The vLLM adapter: `Engine` over vLLM's async engine (`AsyncLLM`, else `AsyncLLMEngine`).

vLLM is imported only when a replica builds this engine (it is not a
dependency of ray-gitops: install it in the replicas' image, or through the
backend's `runtime_env.pip`). `engine_kwargs` and `sampling_kwargs` map the
`[llm]` table and a request's sampling onto vLLM's own `AsyncEngineArgs` and
`SamplingParams` (pure, tested without vLLM); the engine streams deltas
(`RequestOutputKind.DELTA`) and renders chats with the model's chat template.
With `tensor_parallel_size` above 1 the engine runs its workers through Ray
(`distributed_executor_backend = "ray"`) in the replica's placement group,
whose bundles hold one GPU per worker (`vocabulary.spec.llm.llm_problem`).
Closing a request's iterator before it finished aborts it in vLLM. LoRA
adapters: with `lora_adapters`, the engine starts with `enable_lora` and
`max_loras`; an adapter is loaded into the running engine with
`add_lora(LoRARequest(...))` (`lora_request_kwargs`), unloaded with
`remove_lora`, and a request for it is generated with its `lora_request`.

Never run on a GPU in this project's CI: see docs/guides/llm.md.
"""

from __future__ import annotations

from typing import Any, AsyncGenerator, Mapping, Sequence

from ray_gitops.llm.engine import Delta, EngineRefused, Prompt, SamplingParams, Usage

__all__ = ["engine_class", "engine_kwargs", "sampling_kwargs", "lora_request_kwargs", "VLLMEngine"]


def engine_class() -> Any:
    """vLLM's async engine class: its V1 `AsyncLLM`, else (vLLM before it) `AsyncLLMEngine`."""
    try:
        from vllm.v1.engine.async_llm import AsyncLLM
    except ImportError:
        from vllm.engine.async_llm_engine import AsyncLLMEngine

        return AsyncLLMEngine
    return AsyncLLM


def engine_kwargs(
    model_path: str, served_model_name: str, tensor_parallel_size: int, max_model_len: int | None,
    engine_args: Mapping[str, Any], max_loras: int | None = None,
) -> dict[str, Any]:
    """`AsyncEngineArgs(**...)` for an [llm] table whose model is staged at `model_path`;
    `max_loras`: the table has LoRA adapters, at most that many loaded at once (None: none)."""
    kwargs: dict[str, Any] = {
        "model": model_path,
        "served_model_name": [served_model_name],
        "tensor_parallel_size": tensor_parallel_size,
        **engine_args,
    }
    if max_model_len is not None:
        kwargs["max_model_len"] = max_model_len
    if tensor_parallel_size > 1:
        kwargs.setdefault("distributed_executor_backend", "ray")
    if max_loras is not None:
        kwargs["enable_lora"] = True
        kwargs["max_loras"] = max_loras
    return kwargs


def lora_request_kwargs(name: str, int_id: int, path: str) -> dict[str, Any]:
    """`vllm.lora.request.LoRARequest(**...)` for the adapter `name` staged at `path`; `int_id`
    is vLLM's own id for it, unique in the engine and at least 1."""
    return {"lora_name": name, "lora_int_id": int_id, "lora_path": path}


def sampling_kwargs(params: SamplingParams) -> dict[str, Any]:
    """`vllm.SamplingParams(**...)` for one request (the output kind is added by the engine)."""
    return {
        "n": 1,
        "max_tokens": params.max_tokens,
        "temperature": params.temperature,
        "top_p": params.top_p,
        "seed": params.seed,
        "stop": list(params.stop),
    }


class VLLMEngine:
    """`Engine` over vLLM's async engine."""

    def __init__(self, kwargs: Mapping[str, Any]) -> None:
        from vllm.engine.arg_utils import AsyncEngineArgs

        self._engine: Any = engine_class().from_engine_args(AsyncEngineArgs(**kwargs))
        self._names = list(kwargs["served_model_name"])
        self._tokenizer: Any = None
        self._loras: dict[str, Any] = {}  # name -> its LoRARequest, while loaded
        self._next_lora_id = 1

    async def load_adapter(self, name: str, path: str) -> None:
        from vllm.lora.request import LoRARequest

        request = LoRARequest(**lora_request_kwargs(name, self._next_lora_id, path))
        self._next_lora_id += 1
        await self._engine.add_lora(request)
        self._loras[name] = request

    async def unload_adapter(self, name: str) -> None:
        request = self._loras.pop(name, None)
        if request is not None:
            await self._engine.remove_lora(request.lora_int_id)

    def adapters(self) -> Sequence[str]:
        return list(self._loras)

    def models(self) -> Sequence[str]:
        return self._names

    async def _text(self, prompt: Prompt) -> str:
        if prompt.messages is None:
            return prompt.text or ""
        if self._tokenizer is None:
            self._tokenizer = await self._engine.get_tokenizer()
        return str(self._tokenizer.apply_chat_template(
            [dict(m) for m in prompt.messages], tokenize=False, add_generation_prompt=True
        ))

    async def generate(
        self, prompt: Prompt, params: SamplingParams, request_id: str, adapter: str | None = None
    ) -> AsyncGenerator[Delta, None]:
        from vllm import SamplingParams as VllmSampling
        from vllm.sampling_params import RequestOutputKind

        sampling = VllmSampling(**sampling_kwargs(params), output_kind=RequestOutputKind.DELTA)
        lora = None if adapter is None else self._loras.get(adapter)
        if adapter is not None and lora is None:
            raise EngineRefused(f"the adapter `{adapter}` is not loaded", "model_not_found", "model")
        text = await self._text(prompt)
        produced, finished = 0, False
        try:
            try:
                outputs = self._engine.generate(text, sampling, request_id, lora_request=lora)
                async for output in outputs:
                    choice = output.outputs[0]
                    produced += len(choice.token_ids)
                    usage = Usage(len(output.prompt_token_ids or ()), produced) if output.finished else None
                    finished = bool(output.finished)
                    yield Delta(choice.text, len(choice.token_ids), choice.finish_reason if finished else None, usage)
            except ValueError as error:  # vLLM refuses a prompt longer than max_model_len with a ValueError
                if produced == 0 and "length" in str(error):
                    raise EngineRefused(str(error), "context_length_exceeded", "messages") from None
                raise
        finally:
            if not finished:
                await self._engine.abort(request_id)
