"""The admission stage: an endpoint's `[limits]`, a tenant over its rate is answered 429
(400 when its key comes twice, naming the key).

On for an endpoint whose limits have a request rate (`requests_per_s`) only;
its token budget is `proxy.pipeline.stages.budget`'s. The buckets are the proxy's
(`proxy.routes.rate_limits.LocalBuckets`, or a node's shared ones,
`proxy.shell.shared_buckets`); the refusal is raised at `begin`, before the
body is read, and is not counted as an answer of the endpoint.
"""

from __future__ import annotations

import math
import time
from typing import Callable, Iterable

from proxy.pipeline.stage import Stage
from proxy.pipeline.transit import Refusal, Transit
from proxy.routes.rate_limits import AmbiguousTenant, Buckets
from proxy.routes.snapshot import ServedEndpoint

__all__ = ["Admission"]


class Admission(Stage):
    """Takes a token from the request's tenant's bucket, or refuses it (429, Retry-After)."""

    def __init__(self, buckets: Buckets, rate_limited: Callable[[str], None]) -> None:
        """`rate_limited(endpoint)`: a request of it was refused."""
        self._buckets = buckets
        self._rate_limited = rate_limited

    def hooks(self, served: ServedEndpoint) -> Iterable[str]:
        return ("begin",) if served.limits is not None else ()

    def begin(self, transit: Transit) -> None:
        limit = transit.served.limits
        assert limit is not None
        scope = transit.scope
        try:
            slot = limit.slot(scope["query_string"], scope["headers"])
        except AmbiguousTenant as error:  # its key sent twice: which tenant it is cannot be told
            raise Refusal(400, f"Bad Request: {error}") from None
        wait_s = self._buckets.take(slot, limit.rate, limit.burst, time.monotonic())
        if wait_s:
            self._rate_limited(limit.endpoint)
            raise Refusal(429, "Too Many Requests", [(b"retry-after", str(max(1, math.ceil(wait_s))).encode())])
