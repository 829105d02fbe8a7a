"""ray-gitops replica host: the Ray actor that runs user code.

Owns loading a backend's handler from its commit's code, calling it with a
Starlette request, turning its return value into a wire response, health
checks, reconfigure and graceful drain. Started and stopped by the
controller's Ray adapter by class path (`vocabulary.control.goal_api.REPLICA_CLASS`);
talks to the proxy only through `vocabulary.request_path.wire` (as Ray calls, or as
`datalink.frames` over its data-path connection).

- `host`: the replica actor (load, call, reconfigure, health check, drain).
- `data_socket`: its end of the data path: frames over a private Unix
  socket on its node, and over TCP to proxies on other nodes.
- `calling/`: a call from the proxy as user code meets it (the Starlette
  request and response conversions, ASGI apps, gRPC calls, held streams).
- `handles`: handle calls from user code to other backends and endpoints
  (`ray_gitops.serving`), over Ray, with config by long poll.
- `tracing`: its spans (handler, handle calls) in its caller's trace,
  exported over OTLP.
- `secrets`: its secrets: its own age key, the values sealed to it, their
  tmpfs files.
- `own_output`: reads the replica's own stdout and stderr back for
  `gitops logs`.
- `models`: the node's model cache (content-addressed by digest, one
  download per node, verified, LRU-evicted), which stages a backend's
  models before its user code runs, its bytes fetched by the `fetching` room.
- `fetching`: a model's bytes by its source's scheme (`fetching.sources`: the
  dispatch, its errors and progress; file sources copied there), each
  scheme's fetcher imported when a model of it is fetched: `fetching.store`
  for S3 and HTTP(S) sources (obstore), `fetching.hub` for an hf:// model's
  selected files from a Hugging Face Hub (its HTTP API, httpx, resumable),
  `fetching.oci` for an oci:// model's directory from an OCI registry (its
  distribution API, httpx: blobs verified as they stream, safe tar extraction).
- `token_stats_file`: the node's LLM token counts, which an OpenAI backend's
  replicas add to and the node's proxies export.
"""
