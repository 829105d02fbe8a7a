"""ray-gitops control plane: the goal-API controller actor and its client.

`configs` and `api` are the vocabulary every other package shares; they do
not import Ray.

- `environment`: what an embedded Ray's processes (replicas included)
  inherit of the agent's environment: an allow-list, never `GITOPS_*`.
"""
