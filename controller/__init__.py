"""ray-gitops control plane: the goal-API controller actor and its client.

One detached, named Ray actor per namespace. The agent reaches it only
through `client` (and starts or joins Ray with `cluster`); the proxies and
replicas share only the vocabulary with it (`vocabulary.goal_api`,
`vocabulary.configs`). Layers, from the top (each imports only the layers
below it; a contract in `pyproject.toml` keeps them):

- `client`: the agent's handle — find or start the actor, `GoalAPI` over
  Ray calls, claim the namespace, the documented reset.
- `actor`: the thin RPC façade and the control loop: observe, decide in
  the state machines, checkpoint, carry the effects out, judge goals.
- I/O shells: `ray_adapter` (every `ray.*` call that manages actors),
  `ray_kv` (the checkpoint's storage in Ray's internal KV), `prometheus`
  (the rollouts' PromQL checks), `cluster` (starting or joining Ray, token
  auth), `malloc_arenas` (the controller process's C heap: freed pages
  handed back) and `testing` (a fake adapter and storage for
  tests); below them `ray_private`, the one module that uses Ray's private
  API.
- `judging`: what "met" means for each goal kind, over observed state.
- Pure state machines: `proxy_fleet` (N proxy workers per node),
  `endpoint_state` (routes, traffic, shadows), `rollout_state` (each
  endpoint's rollout and its request totals), `goals` (what a call asked
  for), `longpoll` (per-key snapshots and acknowledgements), `checkpoint`
  (versioned JSON, written before any actor is started or stopped),
  `ownership` (whether an agent's claim is granted), `secrets` (the
  backends' secret values in memory, sealed to the controller's own key on
  the way in and to each replica's key on the way out; never checkpointed).
- `backend_state`: replicas as a transition table, the rolling-update
  step, health checks, backoff.
- Pure policies: `autoscaling`, `rollouts` (how a rollout step passes or
  fails), `request_totals` (requests summed over proxies), `recent_requests`
  (each backend's and endpoint's requests of the last minute, for the
  status), `failure_text` (a replica's exception as one line with its
  innermost user frame).
"""
