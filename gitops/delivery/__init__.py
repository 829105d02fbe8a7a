"""Delivery between environments: when a commit may apply, and when it moves on.

- `cron`: five-field cron expressions (pure).
- `windows`: sync windows: whether an environment may apply a new commit
  now, and until when not (pure).
- `gates`: the promotion gates: when a commit served here may move to the
  next environment (pure).
- `evidence`: the numbers the gates judge: requests, 5xx and shadow
  comparisons, as the controller adds up the proxies' reports (pure).
- `promotion`: carrying a promotion out: a fast-forward push, or a GitHub /
  GitLab pull request.
- `automation`: artifact automation's settings and pure decisions (which
  digests are quarantined, what its commits and pull requests say).

Owns the vocabulary of environments (the spec loader reads TOML into these
values) and the I/O step of a promotion. Must not: import specs, the
loop or the CLI; `gitops.loop.environment_duties` puts these together around
its ticks (docs/guides/environments.md).
"""
