"""The reconcile loop: ticks, what each tick writes, and what the agent keeps on disk.

- `agent`: the loop itself: a commit in git becomes the state of the cluster.
- `ticks`: one tick as a value (`ticks.TickReport`), and what is written from it.
- `environment_duties`: what an environment's agent does around its ticks:
  sync windows before an apply, promotion after.
- `automation`: artifact automation at run time: each moving reference looked
  at on its own timer, off the apply path, and the new pin proposed.
- `history`: the history ledger, every attempted commit, in SQLite.
- `quarantine_file`: the quarantine on disk, kept across restarts.
- `statedir`: the state dir's layout, private and out of git.
- `metrics`: every agent-side Prometheus metric (docs/reference/metrics.md, "Agent").
- `secrets`: the agent's part in secrets: identities, decryption, keyed
  hashes, sending them to the controller sealed (docs/guides/secrets.md).

Owns when things happen and what is kept. Must not: serve HTTP (the admin API
does, reading the loop through a protocol), parse arguments or print (the
CLI's), start or watch Ray (gitops.process), or decide a plan itself
(gitops.reconcile decides; the loop calls it).
"""
