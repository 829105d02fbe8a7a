"""ray-gitops vocabulary: the values every part of the system speaks.

The leaf of the import graph: it imports nothing of ours, and holds values
only — no Ray, no git, no HTTP, no sockets, files, processes or threads
(contracts in `pyproject.toml`). The agent (`gitops`), the control plane
(`controller`), the data plane (`proxy`) and the user-code host (`replica`)
share their values here.

- `configs`: desired and actual serving state (backends, endpoints), goals,
  long-poll payloads (route table, replica sets).
- `serving_rules`: the rules a serving state keeps (traffic sums, known
  backends, zero-replica targets, unique routes), as located problems.
- `goal_api`: the controller's goal API as a Protocol, long-poll keys and
  the names of the actors every part must agree on.
- `actor_apis`: the replica's, proxy's and controller's actor APIs as
  Protocols (`ReplicaAPI`, `ProxyAPI`, `ControllerAPI`), and `Remote`, the
  typed handle callers call them through.
- `status`: observed state (`ClusterStatus` and its parts), the ordered
  `Health` with `worst()`.
- `rollouts`: a rollout as a value, on its way to git's traffic split.
- `request_stats`: per-backend request counts a proxy reports for rollout
  checks.
- `ownership`: the `Owner` record an agent claims its controller with.
- `proxy_workers`: the bounds of `--proxy-workers` and `--proxy-max-connections`, for the agent's flag
  and the controller's fleet.
- `replica_env`: what an embedded Ray's processes, replicas included,
  inherit of the agent's environment (an allow-list, never `GITOPS_*`), for
  `--replica-env` and the cluster starter alike.
- `wire`: the proxy <-> replica request/response tuples (the frames they
  travel in over the data path are `datalink`'s).
- `choosing`: the request path's choices (backend by weight, replica by
  power of two, queue admission), for the proxy and for handles alike.
- `policies`: the replica a backend's routing policy chooses (round robin,
  least loaded, rendezvous hashing, prefix affinity), and `request_keys`:
  the key it reads (a header, cookie, query parameter or JSON body field
  of a request; a JSON field of a handle call's argument), for the proxy
  and for handles alike.
- `serving`: what user code in a replica meets (`ray_gitops.serving`), as
  values: its context, handles to other backends and endpoints, their errors.
- `replica_output`: a replica's own stdout and stderr lines, as `gitops logs`
  reads them.
- `model_digests`: a model's digest (a file's sha256, a directory's
  manifest) and the sources a `[models.NAME]` table may name;
  `model_stats`: what a node's model cache did, in the file its replicas
  write and its proxies read.
- `multiplexing`: a multiplexed backend's settings, each request's model
  record, and what its answers tell the proxy.
"""
