"""Plan values: the ordered actions that take the cluster from actual to desired.

A `Plan` is produced by `gitops.planning.plan` (pure) and carried out by
`gitops.applying` (I/O). Each `Action` says what it does to which object,
carries the full new config for creates and updates, and knows whether it
restarts replicas. Rendering for humans and JSON lives beside the values.
"""

from __future__ import annotations

import enum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from controller.configs import BackendConfig, EndpointConfig

__all__ = ["ActionKind", "Action", "FieldChange", "Plan"]


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


class FieldChange(BaseModel):
    model_config = ConfigDict(frozen=True)

    field: str
    old: Any = None
    new: Any = None


class Action(BaseModel):
    """One idempotent controller call.

    `backend` / `endpoint` hold the new config for create and update;
    deletes carry only `name`. `restarts` is True exactly for a backend
    update that changes its version (a rolling update).
    """

    model_config = ConfigDict(frozen=True)

    kind: ActionKind
    name: str
    backend: BackendConfig | None = None
    endpoint: EndpointConfig | None = None
    restarts: bool = False
    changes: tuple[FieldChange, ...] = ()


class Plan(BaseModel):
    """Actions in apply order; empty when desired equals actual."""

    model_config = ConfigDict(frozen=True)

    actions: tuple[Action, ...] = Field(default_factory=tuple)

    def __bool__(self) -> bool:
        return bool(self.actions)

    def __len__(self) -> int:
        return len(self.actions)
