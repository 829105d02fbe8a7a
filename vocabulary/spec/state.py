"""A whole serving configuration (`ServingState`): desired (from git) or actual (the controller's).

Backends, endpoints, and the secrets and models declared in git. Values only.
"""

from __future__ import annotations

from pydantic import Field

from vocabulary.spec.backends import BackendConfig, ModelConfig, SecretConfig
from vocabulary.spec.base import Value
from vocabulary.spec.endpoints import EndpointConfig

__all__ = [
    "ServingState",
]


class ServingState(Value):
    """A whole serving configuration: desired (from git) or actual (controller)."""

    backends: dict[str, BackendConfig] = Field(default_factory=dict)
    endpoints: dict[str, EndpointConfig] = Field(default_factory=dict)
    # Declared in git only (the agent decrypts them); the controller keeps none.
    secrets: dict[str, SecretConfig] = Field(default_factory=dict)
    # Declared in git; the controller keeps each in its backends' model_sources.
    models: dict[str, ModelConfig] = Field(default_factory=dict)
