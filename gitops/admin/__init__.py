"""The agent's admin API and how people and client commands reach it.

- `api`: the HTTP API (status, history, metrics, the verbs, the webhook)
  and the listener it is served on.
- `auth/`: who may use it and how they prove it: bearer tokens, named
  tokens with roles and scopes, OIDC, the page's sign-in and CSRF tokens,
  the Host and Origin checks, and the one table of the role each route needs.
- `webhooks`: push signatures (HMAC-SHA256), replays and a rate limit.
- `page`: the status page served at `/`: read it, and act from it.
- `page_view`: what the page offers its reader (buttons from the role table), its
  Content-Security-Policy, the history filters, a plan as diff lines.
- `events`: `GET /events`, the page's live updates (server-sent events), bounded.
- `shadow_mismatches`: `GET /shadow/mismatches`, every proxy's sample in one list.
- `address`: where client commands find the running agent's API.

Owns the HTTP side of the agent. Must not: decide or apply anything (it
asks the loop through the `api.AdminTarget` protocol), print to a terminal
(the CLI's verbs in gitops.commands do), or import the loop, the process
shell or the CLI. Inside, `api` is over `page`, which is over the rest,
which are over `auth/` (a layers contract in `pyproject.toml`).
"""
