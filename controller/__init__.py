"""ray-gitops control plane: the goal-API controller actor and its client.

`configs` and `api` are the vocabulary every other package shares; they do
not import Ray. `failure_text` turns a replica's exception into one line
with its innermost user frame.
"""
