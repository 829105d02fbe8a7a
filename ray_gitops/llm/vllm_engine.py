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
Closing a request's iterator before it finished aborts it in vLLM.

Never run on a GPU in this project's CI: see docs/guides/llm.md.
"""

from __future__ import annotations

from typing import Any, AsyncGenerator, Mapping, Sequence

from ray_gitops.llm.engine import Delta, EngineRefused, Prompt, SamplingParams, Usage

__all__ = ["engine_kwargs", "sampling_kwargs", "VLLMEngine"]


def engine_kwargs(
    model_path: str, served_model_name: str, tensor_parallel_size: int, max_model_len: int | None,
    engine_args: Mapping[str, Any],
) -> dict[str, Any]:
    """`AsyncEngineArgs(**...)` for an [llm] table whose model is staged at `model_path`."""
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
    return kwargs


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

        args = AsyncEngineArgs(**kwargs)
        try:
            from vllm.v1.engine.async_llm import AsyncLLM as engine_class
        except ImportError:  # vLLM before its V1 engine
            from vllm.engine.async_llm_engine import AsyncLLMEngine as engine_class
        self._engine: Any = engine_class.from_engine_args(args)
        self._names = list(kwargs["served_model_name"])
        self._tokenizer: Any = None

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

    async def generate(self, prompt: Prompt, params: SamplingParams, request_id: str) -> AsyncGenerator[Delta, None]:
        from vllm import SamplingParams as VllmSampling
        from vllm.sampling_params import RequestOutputKind

        sampling = VllmSampling(**sampling_kwargs(params), output_kind=RequestOutputKind.DELTA)
        text = await self._text(prompt)
        produced, finished = 0, False
        try:
            try:
                outputs = self._engine.generate(text, sampling, request_id)
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
