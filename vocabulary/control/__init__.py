"""The controller's interfaces and what it reports, as values.

- `goal_api`: the goal API as a Protocol, long-poll keys and the names of
  the actors every part must agree on; `goals`: what a goal comes to.
- `actor_apis`: the replica's, proxy's and controller's actor APIs as
  Protocols (`ReplicaAPI`, `ProxyAPI`, `ControllerAPI`), and `Remote`, the
  typed handle callers call them through.
- `longpoll`: the long-poll payloads (a backend's replica set, the route
  table) and a replica's lifecycle state.
- `status`: observed state (`ClusterStatus` and its parts), the ordered
  `Health` with `worst()`.
- `rollouts`: a rollout as a value, on its way to git's traffic split;
  `request_stats`: per-backend request counts a proxy reports for its checks.
- `ownership`: the `Owner` record an agent claims its controller with.
- `proxy_workers`: the bounds of `--proxy-workers` and
  `--proxy-max-connections`, for the agent's flag and the controller's fleet.
"""
