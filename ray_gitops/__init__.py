"""ray-gitops' user API: what user code running in a replica imports.

    from ray_gitops import serving

- `serving`: handles to other backends and endpoints, the replica's context,
  its secrets and models, its reported load, and for a multiplexed backend
  `@serving.multiplexed` and the request's model id.
- `model_slots`: the models a multiplexed replica keeps loaded (least
  recently used out), behind `@serving.multiplexed`.
- `v2`: the Open Inference Protocol (KServe's and Triton's v2 REST API) a
  `protocol = "v2"` backend's replicas serve around its model class: the
  tensor codec, the messages, the ASGI app the replica host builds.
- `llm`: the built-in OpenAI-compatible backend a backend's `[llm]` table
  runs: the engine interface, OpenAI's wire shapes, the HTTP layer, token
  metrics, and the CPU (n-gram) and vLLM engines.
- `asgi`: what those two built-in apps share of ASGI (a request's whole body,
  a lifespan with nothing to start).
- `registry`: what the replica host installs in its process before user
  code runs (context, handle calls, secrets, models, multiplex settings,
  each request's model record, the reported load); `serving` reads it back.

It imports only values (`vocabulary`) and its own registry: no agent,
controller, proxy or replica code (contracts in `pyproject.toml`), so it
stays the same small surface wherever user code runs. The replica host
(`replica.host`) imports `registry` to fill it. The old names
`gitops.serving` and `gitops.model_slots` still work for one release and warn.
"""
