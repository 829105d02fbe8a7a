"""ray-gitops control plane: the goal-API controller actor and its client.

`configs` and `api` are the vocabulary every other package shares; they do
not import Ray. `recent_requests` keeps each backend's requests of the last
minute for the status.
"""
