"""The token budget stage: an endpoint's `[limits] tokens_per_minute`, a tenant over its LLM tokens
is answered 429 in OpenAI's error shape while other tenants are served.

On for an endpoint with a token budget only (`ServedEndpoint.token_budget`):
elsewhere it is in no chain and costs nothing. Once the body is read
(`formed`), the request's estimate (`proxy.routes.token_budgets.estimate`)
is taken from its tenant's budget in the proxy's buckets (the request
limits' own: this process's, or the node's shared table,
`proxy.shell.shared_buckets`), or the request is refused: 429 with
`Retry-After` and an OpenAI error body, no replica called (counted as an
answer of the endpoint, as a 413 is). A streamed answer's chunks are watched
for `usage` as they are relayed (`Transit.observe`); once answered, the debit
is settled (`proxy.routes.token_budgets.settlement`). Arithmetic and parsing
are `proxy.routes.token_budgets`'; the counts go to the recorder.
"""

from __future__ import annotations

import time
from typing import Callable, Iterable

from proxy.observability.bodies import BodyView
from proxy.pipeline.stage import Headers, Stage
from proxy.pipeline.transit import CLIENT_LEFT, Debit, Refusal, Transit
from proxy.routes.rate_limits import AmbiguousTenant, Buckets
from proxy.routes.snapshot import ServedEndpoint
from proxy.routes.token_budgets import (
    UsageWatch, estimate, refusal_body, retry_after_s, settlement, tenant_label,
)

__all__ = ["TokenBudgeting"]

_JSON = (b"content-type", b"application/json")


class TokenBudgeting(Stage):
    """Takes each request's estimated tokens from its tenant's budget, or refuses it; settles on the usage."""

    def __init__(
        self, buckets: Buckets, admitted: Callable[[str, str, int], None], charged: Callable[[str, str, int], None],
        refused: Callable[[str, str], None],
    ) -> None:
        """`admitted(endpoint, tenant, tokens)`: a request was admitted on `tokens`;
        `charged(endpoint, tenant, tokens)`: an answer's usage said `tokens`;
        `refused(endpoint, tenant)`: a request was refused for tokens (tenant: its metric label)."""
        self._buckets = buckets
        self._admitted = admitted
        self._charged = charged
        self._refused = refused

    def hooks(self, served: ServedEndpoint) -> Iterable[str]:
        return ("formed", "streaming", "answered") if served.token_budget is not None else ()

    def formed(self, transit: Transit) -> None:
        budget, scope, request = transit.served.token_budget, transit.scope, transit.request
        assert budget is not None and request is not None
        try:
            slot = budget.slot(scope["query_string"], scope["headers"])
        except AmbiguousTenant as error:  # its key sent twice: which tenant it is cannot be told
            raise Refusal(400, f"Bad Request: {error}") from None
        needed = estimate(request[4], budget.capacity)
        tenant = tenant_label(slot)
        wait_s = self._buckets.take(slot, budget.rate, budget.capacity, time.monotonic(), needed)
        if wait_s:
            self._refused(budget.endpoint, tenant)
            retry_after = retry_after_s(wait_s)
            raise Refusal(
                429, "Too Many Requests", [_JSON, (b"retry-after", str(retry_after).encode())],
                refusal_body(budget, needed, retry_after),
            )
        self._admitted(budget.endpoint, tenant, needed)
        transit.debit = Debit(slot, tenant, needed)

    def streaming(self, transit: Transit) -> None:
        debit, held = transit.debit, transit.held
        if debit is None or held is None:
            return
        watch = debit.watch = UsageWatch()
        watch.feed(held.start.first_chunk)
        transit.observe(watch.feed)

    def answered(self, transit: Transit, status: int, headers: Headers, payload: BodyView) -> None:
        debit, budget = transit.debit, transit.served.token_budget
        if debit is None or budget is None:  # refused before it was admitted
            return
        watch = debit.watch
        if watch is None:  # a whole answer: read in the pieces the client was sent
            watch = UsageWatch()
            for piece in payload.pieces:
                watch.feed(piece)
        if watch.total is not None:
            self._charged(budget.endpoint, debit.tenant, watch.total)
        amount = settlement(debit.estimated, watch.total, status, CLIENT_LEFT)
        if amount:
            self._buckets.charge(debit.slot, budget.rate, budget.capacity, time.monotonic(), amount)
