"""What a stage of the request path is, and the chain of them one endpoint's requests pass.

A stage owns one concern (limits, token budgets, steering, tracing, capture,
shadows, counting; each a module of `proxy.pipeline.stages`) and sees a request at up to five moments, its hooks, each a plain
call given the request's `Transit` (Envoy's filters decode, then encode;
here nothing is awaited):

- `begin`: the route is resolved, before the body is read (a `Refusal`
  raised here is answered at once, and not counted);
- `formed`: the body is read and the wire request formed, before it is sent;
- `streaming`: a streamed answer's head came back, before it is relayed;
- `answered(status, headers, payload)`: the answer went out (a stream's at
  its end, with its final code, its head's headers and no payload); the
  payload is a `BodyView` (`proxy.observability.bodies`): the pieces the
  client was sent, which a stage reads without joining or copying them whole
  (a stage that never reads it says so, `reads_answers`: a chain none of
  whose stages read it is given `EMPTY`, and no view is made per answer);
- `left`: the client left before its answer (499).

A stage says per endpoint which hooks it takes (`hooks`): none when its
feature is off for that endpoint. `Chain` holds, per hook, the bound methods
of the stages that take it, in the order the stages were given (the one
order, `proxy.app.ProxyApp`'s `stages`), built once per route table: a stage
that is off is not in the chain at all, so it costs its endpoint's requests
nothing, not a call. Pure.
"""

from __future__ import annotations

from typing import Callable, Iterable, Sequence

from proxy.observability.bodies import BodyView
from proxy.pipeline.transit import Transit
from proxy.routes.snapshot import ServedEndpoint

__all__ = ["Stage", "Chain", "HOOKS", "Headers", "chains"]

Headers = list[tuple[bytes, bytes]]
HOOKS = ("begin", "formed", "streaming", "answered", "left")


class Stage:
    """One concern of the request path; override the hooks it needs and name them in `hooks`."""

    # Whether its `answered` reads the answer's body (False: it is given `EMPTY` when no other stage reads it).
    reads_answers = True

    def hooks(self, served: ServedEndpoint) -> Iterable[str]:
        """The hooks this stage takes for `served`'s requests (none: it is off for them)."""
        return ()

    def begin(self, transit: Transit) -> None:
        pass

    def formed(self, transit: Transit) -> None:
        pass

    def streaming(self, transit: Transit) -> None:
        pass

    def answered(self, transit: Transit, status: int, headers: Headers, payload: BodyView) -> None:
        pass

    def left(self, transit: Transit) -> None:
        pass


class Chain:
    """One endpoint's stages, per hook, in order: only those on for it."""

    __slots__ = ("begin", "formed", "streaming", "answered", "left", "reads_answers")

    def __init__(self, stages: Sequence[Stage], served: ServedEndpoint) -> None:
        taken = [(stage, frozenset(stage.hooks(served))) for stage in stages]

        def chained(hook: str) -> tuple[Callable[..., None], ...]:
            return tuple(getattr(stage, hook) for stage, hooks in taken if hook in hooks)

        self.begin: tuple[Callable[[Transit], None], ...] = chained("begin")
        self.formed: tuple[Callable[[Transit], None], ...] = chained("formed")
        self.streaming: tuple[Callable[[Transit], None], ...] = chained("streaming")
        self.answered: tuple[Callable[[Transit, int, Headers, BodyView], None], ...] = chained("answered")
        self.left: tuple[Callable[[Transit], None], ...] = chained("left")
        # Whether an `answered` stage reads the answer's body: else no view of it is made per answer (a view
        # per answer was 1.2% of a noop GET's instructions in the proxy, whose only `answered` stage is counting).
        self.reads_answers = any(stage.reads_answers for stage, hooks in taken if "answered" in hooks)

    def stages(self, hook: str) -> list[str]:
        """The names of the stages that take `hook`, in order (for the status and tests)."""
        return [type(method.__self__).__name__ for method in getattr(self, hook)]


def chains(stages: Sequence[Stage], endpoints: Iterable[ServedEndpoint]) -> dict[str, Chain]:
    """Each endpoint's chain, by its name."""
    return {served.name: Chain(stages, served) for served in endpoints}
