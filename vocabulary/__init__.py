"""ray-gitops vocabulary: the values every part of the system speaks.

The leaf of the import graph: it imports nothing of ours, and holds values
only — no Ray, no git, no HTTP, no sockets, files, processes or threads, no
context variables and no module-level mutable state (contracts in
`pyproject.toml`, tests/pure/test_vocabulary_values.py). The agent
(`gitops`), the control plane (`controller`), the data plane (`proxy`), the
user-code host (`replica`) and the user API (`ray_gitops`) share their
values here, in four rooms:

- `spec/`: the desired state, field by field (backends, endpoints, their
  tables, the one grammar of request keys) and the rules it keeps.
- `control/`: the controller's goal API and actor APIs, the long-poll
  payloads, observed status, rollouts and the request counts they judge.
- `request_path/`: the proxy <-> replica tuples and the request path's
  choices (weights, routing policies, request keys, multiplexing).
- `replicas/`: what user code in a replica meets, a replica's environment
  and output, models' digests and cache statistics.
"""
