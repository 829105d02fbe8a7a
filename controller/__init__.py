"""ray-gitops control plane: the goal-API controller actor and its client.

`configs` and `api` are the vocabulary every other package shares; they do
not import Ray. `secrets` holds the backends' secret values in memory
(sealed to the controller's own key on the way in, to each replica's key on
the way out; never checkpointed).
"""
