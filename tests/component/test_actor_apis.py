"""The actor classes answer their protocols in `vocabulary.control.actor_apis`, and `Remote` calls them by them.

Ray calls an actor's method by its name with the caller's arguments, so a
method renamed (or a parameter added, renamed or reordered) on one side only
would fail only in a real-Ray run; these checks compare the real classes'
signatures (`inspect`) with the protocols'. Every public method of an actor
is in its protocol and the other way round, with the same parameters (name,
kind, whether it has a default), and a streaming method (an async generator)
is one on both sides.
"""

from __future__ import annotations

import asyncio
import inspect
from typing import Any, AsyncIterator

import pytest

from controller.actor import ControllerActor
from proxy.actor import ProxyActor
from replica.host import Replica
from vocabulary.control.actor_apis import ControllerAPI, ProxyAPI, Remote, ReplicaAPI
from vocabulary.control.goal_api import GoalAPI

PAIRS = [(Replica, ReplicaAPI), (ProxyActor, ProxyAPI), (ControllerActor, ControllerAPI)]


def _public_methods(cls: type) -> dict[str, Any]:
    """Methods a caller may name: defined on `cls` or its bases, not private, not the Protocol machinery."""
    found = {}
    for klass in reversed(cls.__mro__):
        if klass is object or klass.__module__ == "typing":
            continue
        for name, value in vars(klass).items():
            if not name.startswith("_") and inspect.isfunction(value):
                found[name] = value
    return found


def _shape(function: Any) -> list[tuple[str, Any, bool]]:
    parameters = list(inspect.signature(function).parameters.values())[1:]  # without self
    return [(p.name, p.kind, p.default is not inspect.Parameter.empty) for p in parameters]


def _streams(function: Any) -> bool:
    """A streaming method: an async generator on an actor, an AsyncIterator in a protocol."""
    return inspect.isasyncgenfunction(function) or "AsyncIterator" in str(inspect.signature(function).return_annotation)


def mismatches(actor: type, api: type) -> list[str]:
    """How `actor` fails `api`: one line per missing, extra or differing method."""
    ours, theirs = _public_methods(actor), _public_methods(api)
    problems = [f"{actor.__name__} lacks {name}" for name in sorted(theirs.keys() - ours.keys())]
    problems += [f"{api.__name__} lacks {name}" for name in sorted(ours.keys() - theirs.keys())]
    for name in sorted(ours.keys() & theirs.keys()):
        if _shape(ours[name]) != _shape(theirs[name]):
            ours_said, theirs_said = inspect.signature(ours[name]), inspect.signature(theirs[name])
            problems.append(f"{name}: {actor.__name__}{ours_said} vs {api.__name__}{theirs_said}")
        if _streams(ours[name]) != _streams(theirs[name]):
            problems.append(f"{name}: streams on one side only")
    return problems


@pytest.mark.parametrize(("actor", "api"), PAIRS, ids=[api.__name__ for _, api in PAIRS])
def test_each_actor_class_answers_its_protocol(actor: type, api: type) -> None:
    assert mismatches(actor, api) == []


def test_the_controller_api_includes_the_goal_api() -> None:
    assert set(_public_methods(GoalAPI)) <= set(_public_methods(ControllerAPI))


def test_a_method_renamed_on_one_side_only_is_found() -> None:
    methods = _public_methods(Replica)
    methods["handle_request_v2"] = methods.pop("handle_request")
    renamed = type("RenamedReplica", (), methods)
    problems = mismatches(renamed, ReplicaAPI)
    assert "RenamedReplica lacks handle_request" in problems
    assert "ReplicaAPI lacks handle_request_v2" in problems


def test_a_parameter_changed_on_one_side_only_is_found() -> None:
    class Changed:
        async def ready(self) -> str:
            return ""

        async def ping(self, verbose: bool) -> int:
            return 0

        def shutdown(self) -> AsyncIterator[None]:
            raise NotImplementedError

    problems = mismatches(Changed, ProxyAPI)
    assert any(p.startswith("ping:") for p in problems)
    assert "shutdown: streams on one side only" in problems


class _Method:
    def __init__(self, name: str, calls: list[tuple[str, tuple[Any, ...], dict[str, Any]]]) -> None:
        self.name, self.calls = name, calls

    def remote(self, *args: Any, **kwargs: Any) -> asyncio.Future[str]:
        self.calls.append((self.name, args, kwargs))
        done: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        done.set_result(f"{self.name} answered")
        return done


class _Handle:
    """A Ray actor handle's shape: an attribute per method, each with `.remote`."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = []

    def __getattr__(self, name: str) -> _Method:
        return _Method(name, self.calls)

    def __repr__(self) -> str:
        return "Actor(r1)"


def test_remote_calls_the_protocol_method_by_its_name_with_its_arguments() -> None:
    handle = _Handle()
    replica: Remote[ReplicaAPI] = Remote(handle)

    async def scenario() -> Any:
        return await replica.call(ReplicaAPI.data_address, for_node="n2")

    assert asyncio.run(scenario()) == "data_address answered"
    assert handle.calls == [("data_address", (), {"for_node": "n2"})]
    assert repr(replica) == "Actor(r1)"
    assert replica.actor is handle
