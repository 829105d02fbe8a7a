"""Plan values: the ordered actions that take the cluster from actual to desired.

A `Plan` is produced by `gitops.reconcile.planner.plan` (pure) and carried out by
`gitops.reconcile.applying` (I/O). Each `Action` says what it does to which object,
carries the full new config for creates and updates, and knows whether it
restarts replicas. Rendering for humans (like `terraform plan`) and JSON
lives beside the values, and `PendingPlan`, the rendered plan of the branch's
head that waits unapplied (a sync window, a suspension or a quarantine holds it;
the status page shows it); nothing here decides what goes into a plan.
"""

from __future__ import annotations

import enum
import json
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from vocabulary.spec.backends import BackendConfig, UpdateConfig
from vocabulary.spec.endpoints import EndpointConfig
from vocabulary.replicas.model_digests import short

__all__ = ["ActionKind", "Action", "FieldChange", "Plan", "PlanSummary", "PendingPlan"]


class ActionKind(str, enum.Enum):
    CREATE_BACKEND = "create_backend"
    UPDATE_BACKEND = "update_backend"
    CREATE_ENDPOINT = "create_endpoint"
    UPDATE_ENDPOINT = "update_endpoint"
    DELETE_ENDPOINT = "delete_endpoint"
    DELETE_BACKEND = "delete_backend"

    @property
    def is_backend(self) -> bool:
        return self in (ActionKind.CREATE_BACKEND, ActionKind.UPDATE_BACKEND, ActionKind.DELETE_BACKEND)

    @property
    def verb(self) -> str:
        """`create`, `update` or `delete`."""
        return self.value.split("_", 1)[0]

    @property
    def noun(self) -> str:
        """`backend` or `endpoint`."""
        return self.value.split("_", 1)[1]


_SYMBOLS = {"create": "+", "update": "~", "delete": "-"}


class FieldChange(BaseModel):
    """One field of an update: `old` and `new` are JSON values.

    `field` is a top-level config field, or `autoscaling.<key>` when both
    sides autoscale, so a bound change reads as one line.
    """

    model_config = ConfigDict(frozen=True)

    field: str
    old: Any = None
    new: Any = None

    def render(self) -> str:
        if self.field.startswith("secret "):  # `gitops.reconcile.planner.secret_changes`: a name and how, no value
            return f"~ {self.field} ({self.new})"
        if self.field.startswith("model ") and self.field.endswith(" sha256"):  # `gitops.reconcile.planner.model_changes`
            if self.old is None or self.new is None:
                sign, name = "+" if self.old is None else "-", self.field.removesuffix(" sha256")
                return f"{sign} {name} sha256 {short(self.new or self.old)}"
            return f"~ {self.field} {short(self.old)} → {short(self.new)}"
        return f"{self.field}: {_json(self.old)} → {_json(self.new)}"


class Action(BaseModel):
    """One idempotent controller call.

    `backend` / `endpoint` hold the new config for create and update;
    deletes carry only `name`. `restarts` is True exactly for a backend
    update that changes its version (a rolling update). `reason` is empty
    unless the planner moved the action out of its usual place for safety;
    then it says why (shown to humans, kept in JSON). `after` names earlier
    actions of the plan whose goals must be met before this one starts: the
    callees a backend `uses`, or for a backend delete the callers leaving
    with it. `code_changes` names the code files whose change made a new
    version, when whoever planned knew both commits (`gitops plan --from`).
    """

    model_config = ConfigDict(frozen=True)

    kind: ActionKind
    name: str
    backend: BackendConfig | None = None
    endpoint: EndpointConfig | None = None
    restarts: bool = False
    changes: tuple[FieldChange, ...] = ()
    reason: str = ""
    after: tuple[str, ...] = ()
    code_changes: tuple[str, ...] = ()

    def backend_config(self) -> BackendConfig:
        """The config a backend create or update carries (ValueError if it carries none)."""
        if self.backend is None:
            raise ValueError(f"{self.kind.value} {self.name}: the action carries no backend config")
        return self.backend

    def endpoint_config(self) -> EndpointConfig:
        """The config an endpoint create or update carries (ValueError if it carries none)."""
        if self.endpoint is None:
            raise ValueError(f"{self.kind.value} {self.name}: the action carries no endpoint config")
        return self.endpoint

    def headline(self) -> str:
        """`+ backend echo-v2`, `~ backend echo-v1 (restart)`, `- endpoint old`."""
        line = f"{_SYMBOLS[self.kind.verb]} {self.kind.noun} {self.name}"
        if self.kind is ActionKind.UPDATE_BACKEND:
            line += " (restart)" if self.restarts else " (in place)"
        if self.reason:
            line += f"  # {self.reason}"
        elif self.after:
            line += f"  # after {', '.join(self.after)}"
        return line

    def details(self) -> list[str]:
        """Indented lines under the headline: changed fields (and the capacity
        a rolling update keeps), or a new object's gist."""
        if self.changes:
            lines = [change.render() for change in self.changes]
            if self.code_changes:
                lines.append(f"code changed: {', '.join(self.code_changes)}")
            return lines + [_capacity(self.backend)] if self.restarts and self.backend else lines
        if self.backend is not None and self.kind is ActionKind.CREATE_BACKEND:
            return _backend_gist(self.backend)
        if self.endpoint is not None and self.kind is ActionKind.CREATE_ENDPOINT:
            return _endpoint_gist(self.endpoint)
        return []


class PlanSummary(BaseModel):
    """How many calls of each verb a plan makes; what history and metrics record."""

    model_config = ConfigDict(frozen=True)

    create: int = 0
    update: int = 0
    restart: int = 0
    delete: int = 0

    def text(self) -> str:
        if not (self.create or self.update or self.delete):
            return "No changes."
        update = f"{self.update} to update"
        if self.restart:
            update += f" ({self.restart} restart{'' if self.restart == 1 else 's'})"
        return f"Plan: {self.create} to create, {update}, {self.delete} to delete."


class Plan(BaseModel):
    """Actions in apply order; empty when desired equals actual."""

    model_config = ConfigDict(frozen=True)

    actions: tuple[Action, ...] = Field(default_factory=tuple)

    def __bool__(self) -> bool:
        return bool(self.actions)

    def __len__(self) -> int:
        return len(self.actions)

    def summary(self) -> PlanSummary:
        verbs = [action.kind.verb for action in self.actions]
        return PlanSummary(
            create=verbs.count("create"),
            update=verbs.count("update"),
            restart=sum(1 for action in self.actions if action.restarts),
            delete=verbs.count("delete"),
        )

    def render_text(self) -> str:
        """The plan for humans, in apply order, ending with the summary line."""
        lines: list[str] = []
        for action in self.actions:
            lines.append(action.headline())
            lines.extend(f"    {detail}" for detail in action.details())
        if lines:
            lines.append("")
        lines.append(self.summary().text())
        return "\n".join(lines) + "\n"

    def to_json(self) -> dict[str, Any]:
        """JSON-serialisable form: `{"actions": [...], "summary": {...}}`."""
        return {
            "actions": [action.model_dump(mode="json") for action in self.actions],
            "summary": self.summary().model_dump(mode="json"),
        }

    def render_json(self) -> str:
        return json.dumps(self.to_json(), indent=2, sort_keys=False) + "\n"


@dataclass(frozen=True)
class PendingPlan:
    """The plan of the branch's head that waits, not applied, and `why`: a sync window
    holds it (`held: ...`), the agent is suspended (`suspended`) or a rollback holds it
    back (`quarantined: ...`). What applying it would do now."""

    commit: str
    why: str
    text: str  # `Plan.render_text`


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, sort_keys=True)


def _backend_gist(config: BackendConfig) -> list[str]:
    if config.autoscaling is not None:
        scale = f"autoscaling: {_json(config.autoscaling.model_dump(mode='json'))}"
    else:
        scale = f"num_replicas: {config.num_replicas}"
    models = [f"model {name} sha256 {short(model.sha256)}" for name, model in sorted(config.model_sources.items())]
    return [f"version: {_json(config.version)}", f"import_path: {_json(config.import_path)}", scale, *models]


def _capacity(config: BackendConfig) -> str:
    """What a rolling update does to the serving capacity, from the backend's [update] limits."""
    update = config.update or UpdateConfig()
    target = config.autoscaling.min_replicas if config.autoscaling else config.num_replicas
    limits = f"max_surge = {update.max_surge}, max_unavailable = {update.max_unavailable}"
    lowest = max(target - update.max_unavailable, 0)
    if lowest < target:
        return f"capacity dips to {lowest} of {target} replica(s) while updating ({limits})"
    return f"capacity stays at {target} replica(s), up to {update.max_surge} extra while updating ({limits})"


def _endpoint_gist(config: EndpointConfig) -> list[str]:
    lines = [f"route: {_json(config.route)}", f"traffic: {_json(config.traffic)}"]
    if config.shadow:
        lines.append(f"shadow: {_json(config.shadow)}")
    return lines
