"""ray-gitops agent side: specs, planning, applying, the agent loop and its CLI.

Nothing in this package defines or runs Ray actors. It reaches the
controller only through `controller.client` (the goal API over Ray calls)
and `controller.cluster` (starting or joining Ray); what else it shares
with the controller is vocabulary (`vocabulary.goal_api`,
`vocabulary.ownership`, `vocabulary.proxy_workers`). `__version__` is the
installed distribution's version, so `gitops --version` says what pip
installed.

- Where specs come from and what they say: `sources/` (the only git code),
  `specs/` (TOML to a desired state, or every error with FILE:LINE:COL).
- Deciding, pure: `planning` (desired x actual -> ordered plan) and `plans`
  (its values), `simulating` (a model of the controller for property tests
  and dry runs), `rollback` (which commit applies when the newest is held
  back), `rollout_outcomes` (what rollouts mean for history and status),
  `outcomes` (`Outcome` and `HistoryEntry`), `prune_guard` (a commit
  that deletes everything applies only with a `gitops: prune-all` trailer), `status` (Flux-style
  conditions), `process_events`, `errors` (every error's kind: stalled or
  retry).
- Doing: `applying` (a plan against the goal API), `agent` (the reconcile
  loop), `ticks` (one tick as a value, and what is written from it),
  `history` (the SQLite ledger), `quarantine_file`, `statedir`, `metrics`,
  `logs`, `apply_traces` (an applied commit's stages and goals as a
  trace) and `tracing` (sent over OTLP), `redaction` (secrets kept out of
  everything shown), `secrets`
  (the commit's age-encrypted secrets decrypted and sent to the controller
  sealed: docs/guides/secrets.md),
  `notifications/`.
- Serving people: `cli` and `commands/` (one module per verb), `__main__`,
  `agent_address` (how client commands find the running agent),
  `serving_health` (how each backend served in the last minute, and which
  answer 5xx, logged rate-limited),
  `admin` (the HTTP API), `access` (token, Host/Origin checks), `webhooks`
  (push signatures, replays, rate limit), `statuspage`,
  `shadow_mismatches` (every proxy's sample, in one list), `printable`
  (escaped terminal output).
- Starting: `proxy_start` (a starting agent waits for its proxies; one that
  cannot start is a one-line error naming who holds its port,
  `port_holders`).
- Process: `supervising` (the agent's Ray watch and restart), `rayversions`
  (agent and cluster Ray versions agree), `quieting` (Ray's C++ log lines
  kept out), `proctitle`.
- Environments (docs/guides/environments.md): `cron` (five-field schedules, pure),
  `syncwindows` (whether a new commit may apply now, pure), `promotion`
  (the promotion gates, pure), `evidence` (the proxies' request and shadow
  counters a promotion is judged on), `promoting` (carrying a promotion
  out: a fast-forward push or a GitHub/GitLab pull request),
  `environment_duties` (what the agent of an environment does around its
  ticks: sync windows before an apply, promotion after),
  `environment_status` (what the status says of the environment, as typed
  values) and `environment_view` (that part of `gitops status` as text).
- `serving` and `model_slots`: the old names of the user API, which moved to
  its own package (`ray_gitops.serving`, `ray_gitops.model_slots`); they
  still work for one release and warn.
- `testing`: fakes other tests use (an in-memory source, a fake controller).
"""

from importlib.metadata import version

__version__ = version("ray-gitops")
