"""`__all__` of the agent-side modules names exactly what each module defines."""

from __future__ import annotations

import importlib

import pytest

MODULES = [
    "gitops.loop.agent", "gitops.reconcile.applying", "gitops.admin.api", "gitops.status.rollup",
    "gitops.loop.history", "gitops.admin.webhooks",
    "gitops.sources.repos", "gitops.sources.watching", "gitops.commands.run", "gitops.commands.remote",
]


@pytest.mark.parametrize("name", MODULES)
def test_every_exported_name_exists_and_every_public_definition_is_exported(name: str) -> None:
    module = importlib.import_module(name)
    exported = set(module.__all__)
    assert all(hasattr(module, item) for item in exported)
    defined = {
        key for key, value in vars(module).items()
        if not key.startswith("_") and getattr(value, "__module__", None) == name and callable(value)
    }
    assert defined <= exported, f"public but not in __all__: {sorted(defined - exported)}"
