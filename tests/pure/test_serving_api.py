"""`ray_gitops.serving` as user code meets it: handles' answers and errors, the context."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from ray_gitops import serving
from ray_gitops.registry import install
from vocabulary.replicas.serving import HandleOutcome, ReplicaContext


class ScriptedCalls:
    """Answers every call with one scripted outcome; records what was asked."""

    def __init__(self, outcome: HandleOutcome, value: Any) -> None:
        self.reply = (outcome, value)
        self.asked: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = []
        self.published: dict[str, str] = {}  # backend -> the newest commit the controller published

    async def call(self, target: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[HandleOutcome, Any]:
        self.asked.append((target, args, kwargs))
        return self.reply

    def commit_of(self, backend: str) -> str | None:
        return self.published.get(backend)


def installed(outcome: HandleOutcome, value: Any) -> ScriptedCalls:
    calls = ScriptedCalls(outcome, value)
    install(ReplicaContext("pipeline", "pipeline#3", "v7", "c1"), calls)
    return calls


def test_a_handle_passes_its_arguments_and_returns_the_callees_value() -> None:
    calls = installed(HandleOutcome.OK, ["a", "b"])
    assert asyncio.run(serving.handle("words").remote("a b", pause_s=0)) == ["a", "b"]
    assert calls.asked == [("words", ("a b",), {"pause_s": 0})]


def test_a_full_callee_is_a_backpressure_error_naming_it() -> None:
    installed(HandleOutcome.BACKPRESSURE, "backend 'words' is at capacity")
    with pytest.raises(serving.BackpressureError, match="handle to 'words': backend 'words' is at capacity"):
        asyncio.run(serving.handle("words").remote())


def test_a_raising_callee_is_a_handle_error_with_its_traceback() -> None:
    installed(HandleOutcome.ERROR, "Traceback ...\nValueError: bad input")
    with pytest.raises(serving.HandleError, match="ValueError: bad input") as raised:
        asyncio.run(serving.handle("words").remote())
    assert not isinstance(raised.value, serving.BackpressureError)


def test_an_unknown_callee_is_a_handle_error_saying_so() -> None:
    installed(HandleOutcome.UNAVAILABLE, "there is no backend or endpoint named 'nope'")
    with pytest.raises(serving.HandleError, match="there is no backend or endpoint named 'nope'"):
        asyncio.run(serving.handle("nope").remote())


def test_the_context_names_the_backend_replica_version_and_commit() -> None:
    installed(HandleOutcome.OK, None)
    assert serving.context() == ReplicaContext(backend="pipeline", replica_id="pipeline#3", version="v7", commit="c1")


def test_the_context_follows_a_newer_commit_published_for_its_backend() -> None:
    calls = installed(HandleOutcome.OK, None)
    calls.published = {"pipeline": "c2", "words": "c9"}
    assert serving.context().commit == "c2"
