"""Scenario 14: clients with a 200 ms deadline call a composition chain whose callee takes 5 s (issue 46).

A caller backend calls a callee backend through a handle (`tests/real/apps/deadline_chain.py`); the steady
load goes through the chain, each request asking the callee for 10 ms. The "fault": 20 requests, one
after another, ask the callee for 5 s with `X-Request-Timeout: 0.2`. Each is answered 504 at its deadline;
each call that reached the callee (on a loaded machine a few spend their 200 ms on the way and are not
started) saw at most 0.2 s left (`serving.time_left()`) and was cancelled there instead of running its
5 s, and the steady load meanwhile loses nothing. Recorded: the time to each 504 (its median and worst in
the note); no recovery is measured (nothing broke).
"""

from __future__ import annotations

import statistics
import time
from typing import Any

import httpx

from tests.support.collector import settled
from tests.support.load import SteadyLoad
from tests.support.scenario import record_run, under_load
from tests.support.serving import Serving
from tests.support.stack import eventually, met, quick_backend, run
from vocabulary.spec.endpoints import EndpointConfig

SLOW = 20
DEADLINE_S = 0.2


def test_a_chain_whose_callee_takes_5_s_answers_a_200_ms_deadline_at_it_and_stops_the_callee(
    serving: Serving, backend: str, window_s: float
) -> None:
    callee = f"{backend}-callee"
    met(serving.client, run(serving.client.apply_backend(quick_backend(callee, "deadline_chain:Callee"))), 90)
    serving.deploy(backend, 1, import_path="deadline_chain:Caller", init_args=(callee,))
    for name, target in ((backend, backend), (callee, callee)):
        met(serving.client, run(serving.client.apply_endpoint(
            EndpointConfig(name=name, route=f"/{name}", traffic={target: 1.0}, timeout_s=10)
        )), 60)
    took: list[float] = []
    codes: list[int] = []
    own_pauses: list[float] = []  # this process's garbage collections while it timed (tests.support.collector)

    def deadlines(_: SteadyLoad) -> None:
        with httpx.Client(base_url=serving.url, timeout=30) as client, settled() as pauses:
            for _ in range(SLOW):
                started = time.perf_counter()
                answer = client.get(f"/{backend}?s=5", headers={"X-Request-Timeout": str(DEADLINE_S)})
                took.append(time.perf_counter() - started)
                codes.append(answer.status_code)
        own_pauses.extend(pauses)
        return None

    try:
        report, _ = under_load(f"{serving.url}/{backend}?s=0.01", window_s, deadlines)
        def ended_with_a_deadline() -> list[dict[str, Any]] | None:
            # The proxy answers 504 at the deadline; the callee records its cancellation a moment later. A
            # request whose deadline passed on its way (a loaded machine) never reaches the callee at all.
            reached = [c for c in httpx.get(f"{serving.url}/{callee}", timeout=10).json()["calls"]
                       if c["left"] is not None]
            return reached if reached and all(c["ended"] is not None for c in reached) else None

        calls = eventually(ended_with_a_deadline, 10, what="the callee's calls with a deadline ended")
        median_ms, worst_ms = statistics.median(took) * 1000, max(took) * 1000
        record_run(
            "14", "a chain's callee takes 5 s; 20 clients' 200 ms deadlines end at the callee", report, None,
            serving.leaked(),
            note=f"504 after {median_ms:.0f} ms (median), {worst_ms:.0f} ms (worst); the callee cancelled at the "
                 f"deadline {sum(c['ended'] == 'cancelled' for c in calls)} of the {len(calls)} times {SLOW} requests reached it",
        )
        assert codes == [504] * SLOW, codes
        assert max(took) < 1.0, (took, f"collector pauses of the timing process: {own_pauses}")
        assert SLOW // 2 <= len(calls) <= SLOW, calls
        assert all(c["ended"] == "cancelled" and 0 < c["left"] <= DEADLINE_S for c in calls), calls
        assert max(c["ran_s"] for c in calls) < 0.5, calls
        assert report.failed == 0, report.summary()
    finally:
        met(serving.client, run(serving.client.delete_endpoint(callee)), 60)
        met(serving.client, run(serving.client.delete_backend(callee)), 60)
