"""What the status page offers whoever reads it, and the page's filters. Pure.

- `PAGE_ACTIONS`: the page's buttons, each the admin route the CLI's verb
  calls (`POST /sync`, `/sync?override_window=1`, `/suspend`, `/resume`,
  `/rollback`), and `ROLLOUT_ACTIONS`, each running rollout's (`POST
  /rollouts/ENDPOINT/promote`, `/abort`), and `HISTORY_ACTIONS`, each history row's of
  an applied commit other than the current one (`POST /rollback?commit=SHA`, "roll back
  to this"). `offered` keeps those the principal may call, judged by the
  role table (`gitops.admin.auth.roles.ROUTES` through `refusal`, scopes
  included): the table is the one source, so a viewer's page holds no
  action at all. `actions_html` draws them: each a button that opens its
  confirm form (what it does, a reason, "Confirm" or "Cancel"); nothing
  is sent before the confirm. A rollout's and a history row's buttons are
  drawn by the page on their rows, for the forms it was given.
- `content_security_policy`: the page's policy (`default-src 'self'`,
  scripts and styles only with the response's nonce, no framing), and
  `PAGE_HEADERS`, the other headers the page goes with.
- `HISTORY_KINDS`, `filter_history` and `filter_ejections`: the history the
  page shows, by actor (an action's caller) and by kind (a commit's outcome,
  an action's verb, or `ejected`: the replicas proxies ejected as
  outliers), as `GET /history?actor=&kind=` answers it.
- `plan_lines`: a plan's text as diff lines, each with its sign.

Not here: serving (`gitops.admin.api`), the page's markup and script
(`gitops.admin.page`). Every text put into markup here is escaped.
"""

from __future__ import annotations

import html
from dataclasses import dataclass
from typing import Sequence

from gitops.admin.auth.roles import Principal, refusal, rule_for
from gitops.reconcile.outcomes import Action, Ejection, HistoryEntry, Outcome

__all__ = [
    "PageAction", "PAGE_ACTIONS", "ROLLOUT_ACTIONS", "HISTORY_ACTIONS", "APPLIED_RESULTS", "offered",
    "actions_html", "content_security_policy", "PAGE_HEADERS",
    "HISTORY_KINDS", "ACTION_VERBS", "EJECTED", "filter_history", "filter_ejections", "plan_lines",
]


@dataclass(frozen=True)
class PageAction:
    """One button: the route it posts to (as the CLI's verb does), what it says, when it shows."""

    key: str  # the element ids' stem: act-KEY, confirm-KEY
    path: str  # the route, relative to the page (no leading slash: a reverse proxy's prefix stays)
    label: str
    confirm: str  # what it does, asked before it is sent
    when: str  # "always", "running" (not suspended), "suspended", "held" (a sync window holds a commit),
    # "rollout" (a running rollout's row), "history" (an applied commit's history row)

    @property
    def route(self) -> str:
        """The route's path as the role table names it."""
        return "/" + self.path.partition("?")[0]

    @property
    def on_rollout(self) -> bool:
        """Whether it acts on one endpoint's rollout (its button is on that rollout's row)."""
        return "{endpoint}" in self.path

    @property
    def on_history(self) -> bool:
        """Whether it acts on one commit (its button is on that commit's history row)."""
        return "{commit}" in self.path

    @property
    def on_row(self) -> bool:
        """Whether the page draws its button on a row (a rollout's, a commit's), not in the bar."""
        return self.on_rollout or self.on_history


PAGE_ACTIONS: tuple[PageAction, ...] = (
    PageAction("sync", "sync", "Sync now", "Fetch the branch and apply its newest commit now.", "always"),
    PageAction("override", "sync?override_window=1", "Sync past the window",
               "Apply the commit the sync window holds now, past the window (recorded with your name).", "held"),
    PageAction("suspend", "suspend", "Suspend", "Stop reconciling: nothing is applied until someone resumes.",
               "running"),
    PageAction("resume", "resume", "Resume", "Reconcile again, from the branch's newest commit.", "suspended"),
    PageAction("rollback", "rollback", "Roll back",
               "Apply the last commit applied before the current one, and hold the newer commits back "
               "until a newer commit arrives.", "always"),
)

# A running (stepping or paused) rollout's buttons: on its row, for the endpoint it names.
ROLLOUT_ACTIONS: tuple[PageAction, ...] = (
    PageAction("promote", "rollouts/{endpoint}/promote", "Promote",
               "Move this endpoint's traffic to its target split now, skipping the steps and checks left.",
               "rollout"),
    PageAction("abort", "rollouts/{endpoint}/abort", "Abort",
               "Stop this rollout and send the endpoint's traffic back to where it was before it "
               "(the commit is recorded as aborted).", "rollout"),
)

# An applied commit's history row (not the current one's): roll back to that commit.
HISTORY_ACTIONS: tuple[PageAction, ...] = (
    PageAction("rollback-to", "rollback?commit={commit}", "Roll back to",
               "Apply this commit's state again, and hold every commit attempted after it back "
               "until a newer commit arrives.", "history"),
)
# A history row of one of these results is a commit `gitops rollback COMMIT` may go back to.
APPLIED_RESULTS = tuple(outcome.value for outcome in Outcome if outcome.ok)

ACTION_VERBS = ("sync", "suspend", "resume", "rollback", "promote", "abort")
EJECTED = "ejected"  # the kind of a replica's outlier ejection (`Ejection`), neither a commit's nor an action's
HISTORY_KINDS = tuple(outcome.value for outcome in Outcome) + ACTION_VERBS + (EJECTED,)


def offered(principal: Principal, environment: str | None) -> tuple[PageAction, ...]:
    """The page's actions `principal` may take on an agent serving `environment`; a rollout's
    for an endpoint-scoped principal only on its endpoint (the page shows them on that row only)."""
    scoped = principal.scope.name if principal.scope is not None and principal.scope.kind == "endpoint" else None
    return tuple(
        action for action in (*PAGE_ACTIONS, *ROLLOUT_ACTIONS, *HISTORY_ACTIONS)
        if refusal(principal, rule_for("POST", action.route), environment=environment,
                   target=scoped if action.on_rollout else None) is None
    )


def actions_html(actions: Sequence[PageAction]) -> str:
    """The buttons and their confirm forms; empty without actions (the page is then read-only)."""
    if not actions:
        return ""
    buttons, forms = [], []
    for action in actions:
        key, label = html.escape(action.key), html.escape(action.label)
        if not action.on_row:  # a rollout's or a commit's button is drawn on its row
            buttons.append(f'<button type="button" class="act" id="act-{key}" data-key="{key}" '
                           f'data-when="{html.escape(action.when)}">{label}…</button>')
        what = f'{label} <span class="target"></span>?' if action.on_row else f"{label}?"
        forms.append(
            f'<form class="confirm" id="confirm-{key}" data-path="{html.escape(action.path)}" hidden>'
            f"<p><strong>{what}</strong> {html.escape(action.confirm)}</p>"
            f'<label>reason <input name="reason" maxlength="500" placeholder="optional, kept in history"></label> '
            f'<button type="submit" class="go" id="go-{key}">Confirm: {label}</button> '
            f'<button type="button" class="cancel">Cancel</button></form>'
        )
    return ('<div id="action-buttons">' + " ".join(buttons) + "</div>\n" + "\n".join(forms)
            + '\n<div id="action-result" role="status"></div>')


def content_security_policy(nonce: str) -> str:
    """Only the page's own scripts and styles (with this response's nonce) run; nothing frames it."""
    return "; ".join([
        "default-src 'self'", f"script-src 'nonce-{nonce}'", f"style-src 'nonce-{nonce}'",
        "img-src 'self' data:", "connect-src 'self'", "object-src 'none'", "base-uri 'none'",
        "form-action 'self'", "frame-ancestors 'none'",
    ])


PAGE_HEADERS = {
    "Cache-Control": "no-store",
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
}


def filter_history(entries: Sequence[HistoryEntry], actions: Sequence[Action], *, actor: str | None,
                   kind: str | None, limit: int) -> tuple[list[HistoryEntry], list[Action]]:
    """The commits' rows and the actions the page shows: an actor's are only actions
    (a commit has no caller); a kind is a commit outcome or an action's verb."""
    if kind is not None and kind not in HISTORY_KINDS:
        raise ValueError(f"kind must be one of {', '.join(HISTORY_KINDS)}")
    shown_entries = [] if actor is not None or kind in ACTION_VERBS else [
        entry for entry in entries if kind is None or entry.result.value == kind]
    shown_actions = [] if kind is not None and kind not in ACTION_VERBS else [
        action for action in actions
        if (actor is None or action.actor == actor) and (kind is None or action.verb == kind)]
    return shown_entries[:limit], shown_actions[:limit]


def filter_ejections(ejections: Sequence[Ejection], *, actor: str | None, kind: str | None,
                     limit: int) -> list[Ejection]:
    """The ejections the page shows: none for an actor (a proxy ejects, nobody calls it) or another kind."""
    if actor is not None or (kind is not None and kind != EJECTED):
        return []
    return list(ejections[:limit])


def plan_lines(text: str) -> list[tuple[str, str]]:
    """A plan's text as diff lines: ("+", line) creates, ("-", line) deletes, ("~", line)
    updates and their changed fields, ("", line) the rest (the summary)."""
    lines: list[tuple[str, str]] = []
    sign = ""
    for line in text.splitlines():
        stripped = line.lstrip()
        if line and not line[0].isspace():
            sign = line[0] if line[:2] in ("+ ", "- ", "~ ") else ""
            lines.append((sign, line))
        elif stripped[:2] in ("+ ", "- ", "~ "):
            lines.append((stripped[0], line))
        else:
            lines.append((sign if stripped else "", line))
    return lines
