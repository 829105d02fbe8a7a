"""The steering stage: the backend each request goes to (`proxy.routes.snapshot.ServedEndpoint.pick`).

At `begin` by the endpoint's weights and header rules; again at `formed`
when its rules read the body (JSON match), for those endpoints only.
"""

from __future__ import annotations

from typing import Iterable

from proxy.pipeline.stage import Stage
from proxy.pipeline.transit import Transit
from proxy.routes.snapshot import ServedEndpoint
from vocabulary.request_path.choosing import Random

__all__ = ["Steering"]


class Steering(Stage):
    """Picks the request's backend: weights, header rules, sticky key, then JSON rules once its body is read."""

    def __init__(self, rng: Random) -> None:
        self._rng = rng

    def hooks(self, served: ServedEndpoint) -> Iterable[str]:
        return ("begin", "formed") if served.steering.reads_body else ("begin",)

    def begin(self, transit: Transit) -> None:
        transit.backend = transit.served.pick(transit.scope["headers"], self._rng)

    def formed(self, transit: Transit) -> None:
        assert transit.request is not None
        transit.backend = transit.served.pick(transit.scope["headers"], self._rng, transit.request[4])
