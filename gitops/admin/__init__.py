"""The agent's admin API and how people and client commands reach it.

- `api`: the HTTP API (status, history, metrics, the verbs, the webhook)
  and the listener it is served on.
- `access`: who may use it: bearer tokens, Host allow-list, Origin check.
- `roles`: the roles and the one table of the role each route needs, scopes.
- `oidc`: OIDC bearer tokens (JWTs): the issuer's keys, the checks, groups to roles.
- `tokens`: the named tokens' file (`NAME ROLE SHA256 [SCOPE]`), read again on change.
- `webhooks`: push signatures (HMAC-SHA256), replays and a rate limit.
- `login`: the status page's sign-in (authorization code + PKCE) and its sessions.
- `page`: the status page served at `/`: read it, and act from it.
- `page_view`: what the page offers its reader (buttons from the role table), its
  Content-Security-Policy, the history filters, a plan as diff lines.
- `csrf`: the page's CSRF tokens, bound to the principal.
- `events`: `GET /events`, the page's live updates (server-sent events), bounded.
- `shadow_mismatches`: `GET /shadow/mismatches`, every proxy's sample in one list.
- `address`: where client commands find the running agent's API.

Owns the HTTP side of the agent. Must not: decide or apply anything (it
asks the loop through the `api.AdminTarget` protocol), print to a terminal
(the CLI's verbs in gitops.commands do), or import the loop, the process
shell or the CLI.
"""
