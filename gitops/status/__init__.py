"""What the agent says about itself, as values, and their text. Pure.

- `rollup`: the agent's status rolled up in Flux's vocabulary (conditions,
  reasons, the `AgentStatus` every view reads).
- `environment`: the environment part of that status, as typed values.
- `environment_view`: the environment part of `gitops status` as text.
- `backend_health`: how each backend served over the last minute, and which
  answer 5xx (logged rate-limited).
- `rollouts`: what the controller's rollouts mean for the history ledger and
  the status.
- `restarts`: what the agent says of processes that died and came back.
- `ejections`: which of the replicas proxies ejected as outliers are new,
  for the history ledger (each ejection one row).

Owns the words of the status. Must not: do I/O (no clock, files, HTTP or
Ray), or import the loop, the admin API or the CLI; they read it.
"""
