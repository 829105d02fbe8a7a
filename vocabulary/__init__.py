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
- `wire`: the proxy <-> replica request/response tuples.
"""
