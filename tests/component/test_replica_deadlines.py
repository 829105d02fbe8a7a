"""A replica serving requests and handle calls that carry a deadline (issue 46 item 3), without Ray: the
seconds left are re-anchored on its clock and read by `ray_gitops.serving.time_left()`; one that arrives with
none left is not started; user code still running at the deadline is cancelled and its answer dropped
(504, or `DeadlineExceeded` for a handle call); a handle call made with the deadline passed is not made."""

from __future__ import annotations

import asyncio
import random
import time
from typing import Any

import pytest
from starlette.requests import Request

from ray_gitops import serving
from ray_gitops.registry import begin_deadline
from replica.handles import HandleRouter
from replica.host import Replica
from vocabulary.replicas.serving import DeadlineExceeded, Handle, HandleError, HandleOutcome
from vocabulary.request_path.deadlines import Deadline, with_deadline
from vocabulary.request_path.wire import make_request
from vocabulary.spec.backends import BackendConfig

pytestmark = pytest.mark.component

MODULE = __name__


class Patient:
    """Answers what `time_left()` said, after sleeping `?s=` seconds; counts the calls cancelled under it."""

    def __init__(self) -> None:
        self.started = 0
        self.cancelled = 0

    async def __call__(self, request: Any) -> Any:
        self.started += 1
        seconds = float(request.query_params.get("s", "0")) if isinstance(request, Request) else float(request)
        seen = serving.time_left()
        try:
            await asyncio.sleep(seconds)
        except asyncio.CancelledError:
            self.cancelled += 1
            raise
        return {"left": seen}


async def patient() -> Replica:
    replica = Replica(BackendConfig(name="patient", version="v1", import_path=f"{MODULE}:Patient"), "patient#1")
    await replica.initialize()
    return replica


def test_the_handler_reads_the_seconds_left_on_its_own_clock() -> None:
    async def scenario() -> tuple[Any, Any, int]:
        replica = await patient()
        carried = await replica.handle_request(with_deadline(make_request("GET", "/x"), 0.5))
        plain = await replica.handle_request(make_request("GET", "/x"))
        return carried, plain, replica.late_answers

    carried, plain, late = asyncio.run(scenario())
    assert carried[0] == 200 and 0.4 < float(carried[2].split(b":")[1].rstrip(b"}")) <= 0.5
    assert plain[0] == 200 and plain[2] == b'{"left":null}'  # no deadline came: time_left() is None
    assert late == 0


def test_a_request_that_arrives_with_no_time_left_is_not_started() -> None:
    async def scenario() -> tuple[Any, Replica]:
        replica = await patient()
        return await replica.handle_request(with_deadline(make_request("GET", "/x"), 0.0)), replica

    answer, replica = asyncio.run(scenario())
    assert answer[0] == 504 and b"passed before the replica started it" in answer[2]
    assert replica._handler.started == 0 and replica.late_answers == 1


def test_user_code_still_running_at_the_deadline_is_cancelled_and_its_answer_dropped() -> None:
    async def scenario() -> tuple[Any, float, Replica]:
        replica = await patient()
        started = time.monotonic()
        answer = await replica.handle_request(with_deadline(make_request("GET", "/x", b"s=5"), 0.1))
        return answer, time.monotonic() - started, replica

    answer, took, replica = asyncio.run(scenario())
    assert answer[0] == 504 and b"passed while the replica ran it" in answer[2]
    assert took < 1.0 and replica._handler.cancelled == 1 and replica.late_answers == 1
    assert replica.num_ongoing() == 0


def test_a_handle_call_carries_its_deadline_into_the_callee_and_is_cancelled_at_it() -> None:
    async def scenario() -> tuple[Any, Replica, BaseException | None]:
        replica = await patient()
        within = await replica.handle_call(("0",), {}, None, deadline_s=0.3)
        try:
            await replica.handle_call(("5",), {}, None, deadline_s=0.1)
        except DeadlineExceeded as error:
            return within, replica, error
        return within, replica, None

    within, replica, error = asyncio.run(scenario())
    assert 0.2 < within["left"] <= 0.3
    assert error is not None and "passed; the call was cancelled" in str(error)
    assert replica._handler.cancelled == 1


def test_a_handle_call_that_arrives_with_no_time_left_is_not_started() -> None:
    async def scenario() -> Replica:
        replica = await patient()
        with pytest.raises(DeadlineExceeded, match="passed before the call started"):
            await replica.handle_call(("0",), {}, None, deadline_s=0.0)
        return replica

    assert asyncio.run(scenario())._handler.started == 0


def test_a_handle_call_made_after_the_deadline_is_not_made_and_raises_deadline_exceeded() -> None:
    router = HandleRouter("handles:test", "nowhere", random.Random(0))

    async def scenario() -> tuple[Any, Any]:
        begin_deadline(Deadline.after(0.0, time.monotonic()))
        return await router.call("callee", ("x",), {}), router._held

    (outcome, why), held = asyncio.run(scenario())
    assert outcome is HandleOutcome.DEADLINE and "it was not made" in why
    assert held == {}  # not even subscribed: nothing was asked of the controller

    class Calls:
        async def call(self, target: str, args: Any, kwargs: Any) -> tuple[HandleOutcome, Any]:
            return HandleOutcome.DEADLINE, why

        def commit_of(self, backend: str) -> str | None:
            return None

    with pytest.raises(DeadlineExceeded) as raised:
        asyncio.run(Handle("callee", Calls()).remote("x"))
    assert isinstance(raised.value, HandleError) and isinstance(raised.value, TimeoutError)
    assert "handle to 'callee'" in str(raised.value)


def test_outside_a_request_with_a_deadline_time_left_is_none() -> None:
    assert asyncio.run(_time_left_in_a_fresh_task()) is None


async def _time_left_in_a_fresh_task() -> float | None:
    return serving.time_left()
