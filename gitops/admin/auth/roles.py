"""Who may call which admin route: the roles, the one route table, scopes.

Pure. `ROUTES` maps every route of the admin API (method and path as the
router declares it) to the least role it needs; a route the table does not
name needs `admin`, so a route added without a row is closed, not open, and
`tests/security/test_admin_roles.py` walks the router to prove every
route has its row. Roles are ordered: `viewer` reads (status, history,
plans, logs, traces), `operator` also acts (sync, suspend, resume, roll
back, override a window, promote or abort a rollout), `admin` also reads what holds clients' data (the
shadow sample, the audit export with callers' addresses). The status
page draws a button only where this table lets its reader call the route
(`gitops.admin.page_view.offered`).

A principal may carry one scope: `environment=NAME` (only an agent serving
that environment accepts it) or `endpoint=NAME` (its acting rights hold
only on routes that name that endpoint; reads are not narrowed).
Must not: read headers, files or keys (`gitops.admin.auth.access` and
`gitops.admin.auth.tokens` find the principal); it only judges one.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

__all__ = ["Role", "Rule", "Principal", "Scope", "ROUTES", "OPEN", "rule_for", "refusal"]


class Role(enum.IntEnum):
    """Ordered: each role has every right of the ones below it."""

    VIEWER = 1
    OPERATOR = 2
    ADMIN = 3

    @classmethod
    def parse(cls, text: str) -> Role:
        try:
            return cls[text.strip().upper()]
        except KeyError:
            raise ValueError(f"unknown role {text!r} (viewer, operator or admin)") from None

    @property
    def label(self) -> str:
        return self.name.lower()


OPEN = None  # a route anyone who passes the Host check may call (its own guard, or nothing secret)


@dataclass(frozen=True)
class Rule:
    """One route's row: the role it needs (None: open) and, for an action on one
    endpoint, the path or query parameter naming it."""

    role: Role | None
    mutating: bool = False
    target: str | None = None


# The one table. Method "GET" also covers HEAD.
ROUTES: dict[tuple[str, str], Rule] = {
    ("GET", "/healthz"): Rule(OPEN),
    ("GET", "/metrics"): Rule(OPEN),
    ("POST", "/hooks/git"): Rule(OPEN),  # guarded by its HMAC signature
    ("GET", "/login"): Rule(OPEN),  # the status page's sign-in at the OIDC issuer (404 without one)
    ("GET", "/login/callback"): Rule(OPEN),  # the issuer's answer: state and PKCE verifier checked
    ("GET", "/"): Rule(Role.VIEWER),
    ("GET", "/status"): Rule(Role.VIEWER),
    ("GET", "/history"): Rule(Role.VIEWER),
    ("GET", "/session"): Rule(Role.VIEWER),  # who the caller is, and a sign-in's CSRF token
    ("GET", "/logs/{backend}"): Rule(Role.VIEWER),
    ("GET", "/traces"): Rule(Role.VIEWER),
    ("GET", "/events"): Rule(Role.VIEWER),  # the status page's live updates (server-sent events)
    ("GET", "/plan"): Rule(Role.VIEWER),  # the plan of the head that waits unapplied
    ("POST", "/sync"): Rule(Role.OPERATOR, mutating=True),
    ("POST", "/suspend"): Rule(Role.OPERATOR, mutating=True),
    ("POST", "/resume"): Rule(Role.OPERATOR, mutating=True),
    ("POST", "/rollback"): Rule(Role.OPERATOR, mutating=True),
    ("POST", "/rollouts/{endpoint}/promote"): Rule(Role.OPERATOR, mutating=True, target="endpoint"),
    ("POST", "/rollouts/{endpoint}/abort"): Rule(Role.OPERATOR, mutating=True, target="endpoint"),
    ("GET", "/shadow/mismatches"): Rule(Role.ADMIN),
    ("GET", "/audit"): Rule(Role.ADMIN),  # every action with its caller's address
}

_CLOSED = Rule(Role.ADMIN, mutating=True)


def rule_for(method: str, path: str | None) -> Rule:
    """The row of a route (`path` as the router declares it); admin-only when none."""
    if path is None:
        return _CLOSED
    return ROUTES.get(("GET" if method == "HEAD" else method, path), _CLOSED)


@dataclass(frozen=True)
class Scope:
    kind: str  # "environment" or "endpoint"
    name: str

    KINDS = ("environment", "endpoint")

    @classmethod
    def parse(cls, text: str) -> Scope:
        kind, sep, name = text.partition("=")
        if not sep or kind not in cls.KINDS or not name:
            raise ValueError(f"scope {text!r} is not environment=NAME or endpoint=NAME")
        return cls(kind, name)

    def __str__(self) -> str:
        return f"{self.kind}={self.name}"


@dataclass(frozen=True)
class Principal:
    """Who a request is: a token's name or an OIDC subject, its role, its scope."""

    name: str
    role: Role
    scope: Scope | None = None
    via: str = "token"  # "token", "oidc" or "loopback"


def refusal(principal: Principal, rule: Rule, *, environment: str | None, target: str | None) -> str | None:
    """Why `principal` may not call a route of `rule` (None: it may). `environment` is
    the agent's, `target` the endpoint the request names (if the route names one)."""
    if rule.role is None:
        return None
    if principal.role < rule.role:
        return f"{principal.name} is {principal.role.label}; this needs {rule.role.label}"
    scope = principal.scope
    if scope is None:
        return None
    if scope.kind == "environment" and scope.name != environment:
        return f"{principal.name} is scoped to environment {scope.name}; this agent serves {environment or 'none'}"
    if scope.kind == "endpoint" and rule.mutating and target != scope.name:
        return f"{principal.name} is scoped to endpoint {scope.name}; this action is not on it"
    return None
