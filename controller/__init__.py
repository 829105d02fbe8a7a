"""ray-gitops control plane: the goal-API controller actor and its client.

One detached, named Ray actor per namespace. The agent reaches it only
through `client` (and starts or joins Ray with `cluster`); the proxies and
replicas share only the vocabulary with it (`vocabulary.control.goal_api`,
`vocabulary.spec`). Layers, from the top (each imports only the layers
below it; contracts in `pyproject.toml` keep them, and the layers inside
each room):

- `client`: the agent's handle — find or start the actor, `GoalAPI` over
  Ray calls, claim the namespace, the documented reset.
- `actor`: the thin RPC façade, its methods grouped by the room each
  delegates to.
- `loop`: the control loop and what each call changes: observe, decide in
  the state machines, checkpoint, carry the effects out, judge goals.
- `cluster` (starting or joining Ray, token auth) and `testing` (a fake
  adapter and storage for tests).
- `shell`: the I/O shell — `shell.ray_adapter` (every `ray.*` call that
  manages actors), `shell.prometheus` (the rollouts' PromQL checks),
  `shell.malloc_arenas` (the controller process's C heap) and
  `shell.ray_private` (the one module that uses Ray's private API).
  Beside it `persistence`: the checkpoint (`persistence.checkpoint`,
  versioned JSON, written before any actor is started or stopped) and its
  storage in Ray's internal KV (`persistence.ray_kv`).
- `state`: the pure state machines — goals and what "met" means for each
  (`state.goals`, `state.judging`), what the proxies are told
  (`state.publishing`), what the checkpoint holds (`state.checkpointed`),
  the proxy fleet, endpoints, rollouts,
  long poll, ownership, secrets, and `state.backend_state` (replicas as a
  transition table, the rolling-update step, health checks, backoff).
- `policies`: pure policies — autoscaling, how a rollout step passes,
  request totals over proxies, the last minute's requests, a failure as one
  line.
"""
