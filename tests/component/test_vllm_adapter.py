"""The vLLM adapter (ray_gitops.llm.vllm_engine) against vLLM's own interfaces.

vLLM is not a dependency of ray-gitops (with torch it is gigabytes), so in `make test` these
tests skip with that reason; `make test-vllm` installs it in a venv of its own and runs them
(on a CPU machine too: vLLM 0.33.0 installs and imports without a GPU). There, vLLM's own
`AsyncEngineArgs`, `SamplingParams` and `LoRARequest` must take what the adapter builds
from an [llm] table, its async engine must take each call the adapter makes (bound to the
signatures, not run), and its outputs must have the fields the adapter reads. Where a GPU
is also available (and `RAY_GITOPS_VLLM_MODEL` names a local model directory), the adapter
streams real tokens and aborts a closed request.
"""

from __future__ import annotations

import asyncio
import inspect
import os
import shutil

import pytest

from ray_gitops.llm.engine import Prompt, SamplingParams
from ray_gitops.llm.vllm_engine import VLLMEngine, engine_class, engine_kwargs, lora_request_kwargs, sampling_kwargs

vllm = pytest.importorskip("vllm", reason="vLLM is not installed here: `make test-vllm` runs these in a venv of its own")


def test_vllm_takes_the_arguments_the_adapter_builds() -> None:
    from vllm.engine.arg_utils import AsyncEngineArgs
    from vllm.sampling_params import RequestOutputKind

    args = AsyncEngineArgs(**engine_kwargs("/models/m", "m", 2, 2048, {"dtype": "float16"}))
    assert (args.tensor_parallel_size, args.max_model_len, args.distributed_executor_backend) == (2, 2048, "ray")
    params = vllm.SamplingParams(**sampling_kwargs(SamplingParams(max_tokens=4, stop=("x",))),
                                 output_kind=RequestOutputKind.DELTA)
    assert params.max_tokens == 4 and params.stop == ["x"]


def test_vllm_takes_the_lora_arguments_the_adapter_builds() -> None:
    from vllm.engine.arg_utils import AsyncEngineArgs
    from vllm.lora.request import LoRARequest

    args = AsyncEngineArgs(**engine_kwargs("/models/m", "m", 1, None, {}, max_loras=2))
    assert (args.enable_lora, args.max_loras) == (True, 2)
    request = LoRARequest(**lora_request_kwargs("sql", 1, "/models/sql"))
    assert (request.lora_name, request.lora_int_id, request.lora_path) == ("sql", 1, "/models/sql")


def test_vllms_async_engine_takes_each_call_the_adapter_makes() -> None:
    """Bound to vLLM's own signatures, not run (running needs a GPU): the calls of VLLMEngine, as it makes them."""
    engine = engine_class()

    def takes(name: str, *args: object, **kwargs: object) -> None:
        of_the_class = isinstance(inspect.getattr_static(engine, name), (classmethod, staticmethod))
        inspect.signature(getattr(engine, name)).bind(*(() if of_the_class else ("self",)), *args, **kwargs)

    takes("from_engine_args", object())
    takes("generate", "a prompt", object(), "request-1", lora_request=None)
    takes("add_lora", object())
    takes("remove_lora", 1)
    takes("abort", "request-1")
    takes("get_tokenizer")
    assert inspect.isasyncgenfunction(engine.generate)


def test_vllms_outputs_have_the_fields_the_adapter_reads() -> None:
    from vllm.outputs import CompletionOutput, RequestOutput

    assert {"outputs", "prompt_token_ids", "finished"} <= set(inspect.signature(RequestOutput).parameters)
    assert {"text", "token_ids", "finish_reason"} <= set(inspect.signature(CompletionOutput).parameters)


def _gpu_model() -> str | None:
    return os.environ.get("RAY_GITOPS_VLLM_MODEL") if shutil.which("nvidia-smi") else None


@pytest.mark.gpu
@pytest.mark.skipif(_gpu_model() is None, reason="needs a GPU (nvidia-smi) and RAY_GITOPS_VLLM_MODEL, a local model")
def test_vllm_streams_real_tokens_and_aborts_a_closed_request() -> None:
    engine = VLLMEngine(engine_kwargs(str(_gpu_model()), "m", 1, 1024, {}))

    async def run() -> None:
        deltas = [d async for d in engine.generate(Prompt(text="Hello"), SamplingParams(max_tokens=8, temperature=0), "a")]
        assert deltas[-1].usage is not None and deltas[-1].usage.completion_tokens == 8
        stream = engine.generate(Prompt(text="Hello"), SamplingParams(max_tokens=512), "b")
        await stream.__anext__()
        await stream.aclose()  # aborts "b" in vLLM

    asyncio.run(run())
