"""The request path's chain of stages (`proxy.pipeline.stage`): per endpoint, per hook, the stages
that are on for it, in the order given; a stage off for an endpoint is in none of its hooks."""

from __future__ import annotations

from typing import Iterable

from proxy.pipeline.stage import HOOKS, Chain, Stage, chains
from proxy.pipeline.transit import Transit
from proxy.routes.snapshot import ServedEndpoint
from vocabulary.spec.endpoints import EndpointConfig, LimitsConfig


def served(name: str = "e", **fields: object) -> ServedEndpoint:
    return ServedEndpoint.from_config(EndpointConfig(name=name, route=f"/{name}", traffic={"b": 1.0}, **fields))


class Noting(Stage):
    """Takes the hooks it is told, for endpoints with limits only when `limited_only`."""

    def __init__(self, name: str, hooks: Iterable[str], limited_only: bool = False) -> None:
        self.name, self._hooks, self._limited_only = name, tuple(hooks), limited_only
        self.seen: list[str] = []

    def hooks(self, served: ServedEndpoint) -> Iterable[str]:
        return () if self._limited_only and served.limits is None else self._hooks

    def begin(self, transit: Transit) -> None:
        self.seen.append(f"{self.name}.begin")


class First(Noting):
    pass


class Second(Noting):
    pass


class Third(Noting):
    pass


def test_each_hook_holds_the_stages_that_take_it_in_the_order_given() -> None:
    stages = [First("a", ("begin", "answered")), Second("b", ("formed", "answered", "left")), Third("c", HOOKS)]
    chain = Chain(stages, served())
    assert chain.stages("begin") == ["First", "Third"]
    assert chain.stages("formed") == ["Second", "Third"]
    assert chain.stages("streaming") == ["Third"]
    assert chain.stages("answered") == ["First", "Second", "Third"]
    assert chain.stages("left") == ["Second", "Third"]
    # The order is the list's, whatever it is.
    assert Chain(list(reversed(stages)), served()).stages("answered") == ["Third", "Second", "First"]


def test_a_stage_off_for_an_endpoint_is_in_none_of_its_hooks_and_is_never_called() -> None:
    limiting = First("limits", HOOKS, limited_only=True)
    steering = Second("steer", ("begin",))
    built = chains([limiting, steering], [served("open"), served("limited", limits=LimitsConfig(requests_per_s=5))])
    assert not any("First" in built["open"].stages(hook) for hook in HOOKS)
    assert built["open"].stages("begin") == ["Second"]
    assert built["limited"].stages("begin") == ["First", "Second"]
    for hook in built["open"].begin:
        hook(None)  # type: ignore[arg-type]
    assert limiting.seen == [] and steering.seen == ["steer.begin"]


def test_a_stage_taking_no_hook_is_a_noop_by_default() -> None:
    chain = Chain([Stage()], served())
    assert all(getattr(chain, hook) == () for hook in HOOKS)
