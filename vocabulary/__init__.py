"""ray-gitops vocabulary: the values every part of the system speaks.

The leaf of the import graph: it imports nothing of ours, no Ray, no git and
no HTTP server. The agent (`gitops`), the control plane (`controller`), the
data plane (`proxy`) and the user-code host (`replica`) meet only here.

- `configs`: desired and actual serving state (backends, endpoints), goals,
  long-poll payloads (route table, replica sets).
- `serving_rules`: the rules a serving state keeps (traffic sums, known
  backends, zero-replica targets, unique routes), as located problems.
- `goal_api`: the controller's goal API as a Protocol, long-poll keys and
  the names of the actors every part must agree on.
- `status`: observed state (`ClusterStatus` and its parts), the ordered
  `Health` with `worst()`.
- `wire`: the proxy <-> replica request/response tuples (the frames they
  travel in over the data path are `datalink`'s).
- `choosing`: the request path's choices (backend by weight, replica by
  power of two, queue admission), for the proxy and for handles alike.
- `serving`: what user code in a replica may ask for (`gitops.serving`):
  handles to other backends and endpoints, and its own context.
"""
