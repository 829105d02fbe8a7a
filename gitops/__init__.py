"""ray-gitops agent side: specs, planning, applying, the agent loop and its CLI.

Nothing in this package defines or runs Ray actors. It reaches the
controller only through `controller.client` (the goal API over Ray calls)
and `controller.cluster` (starting or joining Ray); what else it shares
with the controller is vocabulary (`vocabulary.control.goal_api`,
`vocabulary.control.ownership`, `vocabulary.control.proxy_workers`). `__version__` is the
installed distribution's version, so `gitops --version` says what pip
installed.

Its rooms, top to bottom (each imports only the rooms below it: the
layers contract in pyproject.toml):

- The CLI: `cli` (argument parsing and dispatch), `__main__`, and
  `commands/` (one module per verb).
- The agent: `loop/` (the reconcile loop, its ticks, the history ledger, the
  state dir, metrics, secrets), `admin/` (the HTTP API, its access checks,
  webhooks, the status page), `process/` (Ray watch and restart, proxies at
  start, logs, traces, versions).
- Reporting and notifying: `status/` (what the agent says about itself, as
  values; pure) and `notifications/` (what the agent did, to webhooks, Slack
  and commit statuses).
- Specs: `specs/` (TOML to a desired state, or every error with
  FILE:LINE:COL).
- Where specs come from: `sources/` (the only git code); delivery between
  environments: `delivery/` (sync windows, promotion gates and evidence,
  carrying a promotion out; docs/guides/environments.md).
- One reconcile: `reconcile/` (desired x actual -> plan, applied against the
  goal API, its outcome; rollback and the prune guard).
- Words every room uses: `errors` (every error's kind: stalled or retry),
  `redaction` (secrets kept out of everything shown), `printable` (escaped
  terminal output).
- `serving` and `model_slots`: the old names of the user API, which moved to
  its own package (`ray_gitops.serving`, `ray_gitops.model_slots`); they
  still work for one release and warn.
- `testing`: fakes other tests use (an in-memory source, a fake controller).
"""

from importlib.metadata import version

__version__ = version("ray-gitops")
