"""What every spec value is: frozen, no unknown keys, finite numbers; and two field markers.

`Value` is the base of the spec's models (`spec.backends`, `spec.routing`,
`spec.endpoints`, `spec.rollout_config`, `spec.state`). `SOURCE_FIELDS` are a
backend's fields that say where its config came from, never compared;
`ENVIRONMENT_OVERRIDABLE` marks the fields an environment file may set.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict

__all__ = [
    "Value",
    "SOURCE_FIELDS",
    "ENVIRONMENT_OVERRIDABLE",
]


# Where a backend's config came from, not what it is: never compared, never
# a reason to restart or update (set by the agent on each create or update).
SOURCE_FIELDS = frozenset({"working_dir", "commit"})


# A field declared with `json_schema_extra=ENVIRONMENT_OVERRIDABLE` may be set
# per environment (`environments/NAME.toml`, `gitops.specs.environments`);
# any other key there is an error. One declaration, one schema.
ENVIRONMENT_OVERRIDABLE: dict[str, Any] = {"x-environment": True}


class Value(BaseModel):
    # Numbers are finite everywhere: configs travel as JSON, and Ray rejects inf and nan.
    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)
