"""`gitops plan` says what a rolling update does to serving capacity, from the backend's [update] limits."""

from __future__ import annotations

import pytest

from gitops.reconcile.plans import Action, ActionKind, FieldChange
from vocabulary.spec.backends import BackendConfig, UpdateConfig


def restart(update: UpdateConfig | None, replicas: int = 2) -> Action:
    config = BackendConfig(name="b", version="v2", import_path="a:b", num_replicas=replicas, update=update)
    return Action(kind=ActionKind.UPDATE_BACKEND, name="b", backend=config, restarts=True,
                  changes=(FieldChange(field="version", old="v1", new="v2"),))


@pytest.mark.parametrize(
    ("update", "line"),
    [
        (None, "capacity stays at 2 replica(s), up to 1 extra while updating (max_surge = 1, max_unavailable = 0)"),
        (UpdateConfig(max_surge=0, max_unavailable=1),
         "capacity dips to 1 of 2 replica(s) while updating (max_surge = 0, max_unavailable = 1)"),
    ],
)
def test_a_restart_shows_the_capacity_it_keeps(update: UpdateConfig | None, line: str) -> None:
    assert restart(update).details() == ['version: "v1" → "v2"', line]


def test_an_in_place_update_has_no_capacity_line() -> None:
    config = BackendConfig(name="b", version="v1", import_path="a:b", num_replicas=3)
    action = Action(kind=ActionKind.UPDATE_BACKEND, name="b", backend=config,
                    changes=(FieldChange(field="num_replicas", old=2, new=3),))
    assert action.details() == ["num_replicas: 2 → 3"]
