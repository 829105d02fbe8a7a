"""The desired state as values: what the agent asks for, the controller runs and checkpoints as JSON.

Each field of a spec table is declared once, in these frozen models, with
its default, its range and a description (what a user reads about the spec
key of the same name). The spec file format (`gitops.specs.models`) derives
its tables from them and adds only file concerns.

- `base`: `Value`, the base of every model here, and the field markers.
- `keys`: the one grammar of `KIND:NAME` request keys, and `HTTP_TOKEN`.
- `backends`: `BackendConfig` and its tables (autoscaling, batching,
  updates, secrets, models).
- `routing`: a backend's `[routing]` (policy and key) and `[multiplex]`.
- `endpoints`: `EndpointConfig` and its tables (match rules, sticky,
  shadows, limits, tracing, capture).
- `rollout_config`: an endpoint's `[rollout]` table and its metric checks.
- `traffic_policy`: an endpoint's `[retries]` (outcomes, attempts, budget, backoff), `[outliers]`
  (ejection rules, their times and bounds) and `[circuit]` (pending requests, retries in flight).
- `state`: `ServingState`, a whole configuration.
- `placement`: a backend's `[placement]` (bundles, strategy) and whether
  nodes can offer a replica's bundles.
- `v2`: a backend's `protocol = "v2"` and `[v2]` table (the Open Inference
  Protocol's model metadata: name, platform, version, tensors) and its rule
  against the rest of the backend.
- `llm`: a backend's `[llm]` (the built-in OpenAI-compatible backend: engine,
  model, engine arguments) and its rule against the backend's GPUs.
- `serving_rules`: the rules a serving state keeps (traffic sums, known
  backends, zero-replica targets, unique routes), as located problems.
"""
