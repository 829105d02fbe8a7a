"""One reconcile: desired x actual -> a plan, the plan applied, what it came to.

- `plans`: plan values: the ordered actions, each saying what it does to which object.
- `planner`: `planner.plan`, the ordered actions from the actual serving state
  to the desired one (pure).
- `applying`: carries a plan out against the controller's goal API, waiting for goals.
- `apply_traces`: an apply's stages and goals, timed, as trace records.
- `outcomes`: what one reconcile of a commit came to: `Outcome` and `HistoryEntry`.
- `rollback`: which commit applies when the newest one is held back (pure).
- `prune_guard`: a commit that deletes everything applies only with a
  `gitops: prune-all` trailer (pure).
- `gpus`: the GPUs a plan needs, whether a rolling update has spare ones, and
  the bundles no node of the cluster could hold (pure).
- `simulating`: a pure model of the controller's configured state, for
  property tests and dry runs.

Owns the decision and the apply of one commit. Must not: loop, keep files,
read git or specs (it takes a desired state as a value), or import any
other part of the agent except `gitops.errors`.
"""
