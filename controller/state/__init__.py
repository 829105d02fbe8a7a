"""The controller's state machines: what it holds, decided as pure logic.

Owns everything the controller knows between ticks and how each part moves:
the machines take observations and calls as values and return effects as
values; none touches Ray, a clock or a file (the I/O is `controller.shell`'s,
the storage `controller.persistence`'s). All but `secrets` cross restarts
through their JSON form in the checkpoint. Layers, from the top
(a contract in `pyproject.toml` keeps them):

- `judging`: what "met" means for each goal kind, over the machines below;
  `publishing`: what the proxies are told (the long-poll keys published from
  the machines, only what changed); `checkpointed`: what the checkpoint
  holds, as one value with its JSON body.
- `proxy_fleet` (N proxy workers per node), `endpoint_state` (routes,
  traffic, shadows), `rollout_state` (each endpoint's rollout and its
  request totals), `goals` (what a call asked for), `longpoll` (per-key
  snapshots and acknowledgements), `ownership` (whether an agent's claim is
  granted), `secrets` (the backends' secret values in memory, sealed to the
  controller's own key on the way in and to each replica's key on the way
  out; never checkpointed).
- `backend_state`: replicas as a transition table, the rolling-update step,
  health checks, backoff.

May not: import the shell, the storage or Ray; the policies they apply are
`controller.policies`'.
"""
