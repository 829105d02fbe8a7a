"""The user API's old names (`gitops.serving`, `gitops.model_slots`) still work for one
release, and importing them warns (a DeprecationWarning pointing at the importing line)."""

from __future__ import annotations

import asyncio
import sys
from typing import Any

import pytest

from ray_gitops import model_slots, registry, serving
from vocabulary.replicas.serving import HandleOutcome, ReplicaContext

MOVED = [("gitops.serving", serving), ("gitops.model_slots", model_slots)]


def import_afresh(name: str) -> Any:
    """`import name` as user code writes it (here, not in importlib: the warning points at this line)."""
    sys.modules.pop(name, None)  # a module warns when it is first imported
    __import__(name)
    return sys.modules[name]


@pytest.mark.parametrize(("old", "new"), MOVED)
def test_an_old_name_warns_at_the_import_that_uses_it_and_is_the_moved_module(old: str, new: Any) -> None:
    with pytest.warns(DeprecationWarning, match=rf"{old} moved to {new.__name__}") as caught:
        module = import_afresh(old)
    assert module is new
    assert [warning.filename for warning in caught] == [__file__]


class Calls:
    async def call(self, target: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[HandleOutcome, Any]:
        return HandleOutcome.OK, (target, args)

    def commit_of(self, backend: str) -> str | None:
        return None


def test_user_code_written_against_the_old_names_still_runs() -> None:
    with pytest.warns(DeprecationWarning):
        old_serving = import_afresh("gitops.serving")
    with pytest.warns(DeprecationWarning):
        old_slots = import_afresh("gitops.model_slots")
    registry.install(ReplicaContext("b", "b#1", "v1", "c1"), Calls())
    assert old_serving.context() == ReplicaContext("b", "b#1", "v1", "c1")
    assert asyncio.run(old_serving.handle("words").remote("x")) == ("words", ("x",))

    async def load(model_id: str) -> str:
        return model_id.upper()

    slots = old_slots.ModelSlots(load, 1)
    assert asyncio.run(slots.get("a")) == "A" and slots.loaded() == ["a"]
