"""Who may call the admin API, and how they prove it.

- `access`: the checks every request passes before any route runs: bearer
  tokens, Host allow-list, Origin check.
- `roles`: the roles and the one table of the role each route needs, scopes.
- `tokens`: the named tokens' file (`NAME ROLE SHA256 [SCOPE]`), read again on change.
- `oidc`: OIDC bearer tokens (JWTs): the issuer's keys, the checks, groups to roles.
- `login`: the status page's sign-in (authorization code + PKCE) and its sessions.
- `csrf`: the page's CSRF tokens, bound to the principal.

Owns finding a request's principal and judging it against the route table.
Must not: import anything else of `gitops.admin` (the API, the page and the
webhooks import these, never the other way; a layers contract in
`pyproject.toml` keeps it), serve a route, or keep a bearer's value.
"""
