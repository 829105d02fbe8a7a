"""A backend's `[llm]` table: the built-in OpenAI-compatible backend, and its rules.

`LLMConfig` says which engine serves (`vllm` on GPUs, `ngram` on a CPU), which
`[models.NAME]` entry holds its weights, and the engine's arguments. A backend
with an `[llm]` table writes no `import_path`: the loader points it at the
built-in app (`BUILTIN_APP`, `ray_gitops.llm.app`), which is given the table
as its `llm` keyword. `llm_problem` is the rule between the table, the
backend's models and the GPUs its replica reserves (its `[placement]`, else its
`ray_actor_options`): vLLM's `tensor_parallel_size` is what the placement
offers. `lora_adapters` names more `[models.NAME]` entries, LoRA adapters
over the base model, which a request selects by its JSON `model` field; the
proxy routes such a request to a replica that has its adapter loaded
(`adapter_models`), and `llm_problem` checks them too. Values only.
"""

from __future__ import annotations

import enum
from typing import Any, Mapping, Sequence

from pydantic import Field

from vocabulary.spec.base import Value
from vocabulary.spec.placement import PlacementConfig

__all__ = ["BUILTIN_APP", "LLMEngine", "LLMConfig", "llm_problem", "adapter_models", "DEFAULT_MAX_LORAS"]

# LoRA adapters one replica keeps loaded unless `max_loras` says otherwise.
DEFAULT_MAX_LORAS = 4

# The class every [llm] backend's replicas run (the user writes no import_path).
BUILTIN_APP = "ray_gitops.llm.app:OpenAIBackend"


class LLMEngine(str, enum.Enum):
    """The engine behind the OpenAI endpoint."""

    VLLM = "vllm"  # vLLM's async engine, on the replica's GPUs
    NGRAM = "ngram"  # a word n-gram model on the CPU (ray_gitops.llm.ngram): real tokens, no GPU


class LLMConfig(Value):
    """The built-in OpenAI-compatible backend (docs/guides/llm.md): /v1/chat/completions,
    /v1/completions, /v1/models and, where the engine offers it, /v1/embeddings."""

    engine: LLMEngine = Field(description="The engine: vllm (GPUs) or ngram (a word n-gram model on the CPU).")
    model: str | None = Field(
        default=None,
        description="The [models.NAME] entry holding the weights (it must be in the backend's `models`); "
        "ngram: a text file or a directory of .txt files it is trained on; none (ngram only): its bundled text.",
    )
    served_model_name: str | None = Field(
        default=None, min_length=1, max_length=128,
        description="The name clients send as `model` and /v1/models lists; none: `model` (ngram without one: 'ngram').",
    )
    tensor_parallel_size: int = Field(
        default=1, ge=1, le=64,
        description="GPUs one engine spreads its weights over (vllm); more than 1 needs [placement] bundles "
        "holding that many GPUs.",
    )
    max_model_len: int | None = Field(
        default=None, ge=16, le=10_000_000,
        description="Most tokens of prompt plus completion; a longer request is answered 400 "
        "context_length_exceeded. none: the engine's default.",
    )
    lora_adapters: tuple[str, ...] = Field(
        default=(), max_length=1000,
        description="LoRA adapters over the base model: [models.NAME] entries (each in the backend's `models`), "
        "selected by a request's `model` (the entry's name) and listed by /v1/models. A replica loads one on its "
        "first request, without restarting its engine, and the proxy sends the adapter's requests to a replica "
        "that has it loaded.",
    )
    max_loras: int = Field(
        default=DEFAULT_MAX_LORAS, ge=1, le=1024,
        description="Most LoRA adapters one replica keeps loaded; loading one more unloads the least recently used "
        "(vllm: its max_loras).",
    )
    engine_args: dict[str, Any] = Field(
        default_factory=dict,
        description="More of the engine's own arguments, passed as they are (vllm: AsyncEngineArgs fields such as "
        "dtype, gpu_memory_utilization; ngram: order, seed).",
    )


_RESERVED_ARGS = frozenset({"model", "served_model_name", "tensor_parallel_size", "max_model_len", "max_loras"})


def adapter_models(llm: LLMConfig | None) -> frozenset[str]:
    """The model names an [llm] backend's requests select adapters by (its `lora_adapters`); empty for none."""
    return frozenset() if llm is None else frozenset(llm.lora_adapters)


def llm_problem(
    llm: LLMConfig,
    models: Sequence[str],
    placement: PlacementConfig | None,
    ray_actor_options: Mapping[str, Any],
) -> str | None:
    """Why this `[llm]` table cannot run as written, or None.

    The model must be one of the backend's `models`, and so must each LoRA
    adapter, named once, other than the base model and its served name; an engine argument that
    has its own key is written there; ngram runs on one CPU process; vllm needs
    GPUs: with `tensor_parallel_size` = 1 the replica's own (`num_gpus`, or its
    placement's), above 1 a `[placement]` whose bundles hold exactly that many
    GPUs (one per engine worker) while the replica itself asks for none.
    """
    if llm.model is not None and llm.model not in models:
        return f"llm.model '{llm.model}' is not in this backend's models: add it (models = [\"{llm.model}\"])"
    if llm.model is None and llm.engine is LLMEngine.VLLM:
        return "llm.model is required for engine 'vllm': name the [models.NAME] entry holding its weights"
    problem = _adapters_problem(llm, models)
    if problem is not None:
        return problem
    doubled = sorted(_RESERVED_ARGS & set(llm.engine_args))
    if doubled:
        return f"llm.engine_args.{doubled[0]}: write it as llm.{doubled[0]}"
    tp = llm.tensor_parallel_size
    if llm.engine is LLMEngine.NGRAM:
        return None if tp == 1 else f"llm.tensor_parallel_size = {tp}: engine 'ngram' runs on one CPU process (1)"
    own_gpus = float(ray_actor_options.get("num_gpus") or 0)
    if placement is None:
        if tp > 1:
            return (f"llm.tensor_parallel_size = {tp} needs [placement] bundles holding {tp} GPUs "
                    f"(e.g. bundles = [{{ CPU = 1 }}, " + ", ".join(["{ GPU = 1 }"] * tp) + "])")
        if own_gpus < 1:
            return "engine 'vllm' needs a GPU: ray_actor_options = { num_gpus = 1 } (or [placement])"
        return None
    gpus = sum(float(bundle.get("GPU", 0)) for bundle in placement.bundles)
    if tp == 1:
        return None if gpus >= 1 else "engine 'vllm' needs a GPU: no bundle of [placement] holds one"
    if gpus != tp:
        return f"llm.tensor_parallel_size = {tp} but the [placement] bundles hold {gpus:g} GPUs: one GPU per engine worker"
    if own_gpus:
        return (f"llm.tensor_parallel_size = {tp}: the replica's ray_actor_options.num_gpus must be 0, "
                "the engine's workers take the bundles' GPUs")
    return None


def _adapters_problem(llm: LLMConfig, models: Sequence[str]) -> str | None:
    seen: set[str] = set()
    base = llm.served_model_name or llm.model or "ngram"
    for adapter in llm.lora_adapters:
        if adapter in seen:
            return f"llm.lora_adapters names '{adapter}' twice"
        seen.add(adapter)
        if adapter == llm.model:
            return f"llm.lora_adapters: '{adapter}' is the base model (llm.model), not an adapter over it"
        if adapter == base:
            return f"llm.lora_adapters: '{adapter}' is the base model's served name: clients could not tell them apart"
        if adapter not in models:
            return (f"llm.lora_adapters: '{adapter}' is not in this backend's models: add it "
                    f"(models = [..., \"{adapter}\"]), declared as a [models.{adapter}] table")
    return None
