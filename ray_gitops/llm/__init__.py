"""The built-in OpenAI-compatible backend (a backend's `[llm]` table, docs/guides/llm.md).

- `engine`: the interface every engine adapter implements (generate deltas
  with usage; models; optionally embed, and load LoRA adapters) and its values.
- `openai_wire`: OpenAI's request checks, answers, stream chunks, SSE and
  error shape; the simulator (`deployments/apps/llm_sim.py`) shares it.
- `http`: the OpenAI routes as an ASGI app over any engine.
- `adapters`: a replica's LoRA adapters, loaded into the running engine on
  demand (at most the `[llm]` table's limit, least recently used out).
- `token_stats`: time to first token, inter-token time and tokens/s per model.
- `publishing`: those counts handed to the node's file (the replica host's
  sink) within a second of changing, whence the node's proxies export them.
- `ngram`: the CPU engine (a word n-gram model, trained at start-up).
- `vllm_engine`: the vLLM adapter (vLLM imported only when used).
- `app`: `OpenAIBackend`, what an `[llm]` backend's replicas run.

Like the rest of `ray_gitops` it imports only the vocabulary and itself.
"""
