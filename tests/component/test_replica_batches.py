"""A batched handler gets the whole list and answers each request in order."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest
from starlette.requests import Request

from replica.host import Replica
from vocabulary.request_path.wire import CallOutcome, CallResult, TimedRequest, make_request
from vocabulary.spec.backends import BackendConfig

MODULE = __name__


class Doubler:
    """Answers each body twice; records the sizes of the lists it received."""

    sizes: list[int] = []

    async def __call__(self, requests: list[Request]) -> list[str]:
        Doubler.sizes.append(len(requests))
        return [(await request.body()).decode() * 2 for request in requests]


class SyncDoubler:
    def __call__(self, requests: list[Request]) -> list[str]:
        return ["sync"] * len(requests)


class DropsOne:
    async def __call__(self, requests: list[Request]) -> list[str]:
        return ["x"] * (len(requests) - 1)


class Raises:
    async def __call__(self, requests: list[Request]) -> list[str]:
        raise ValueError("model exploded")


class OneUnserialisable:
    async def __call__(self, requests: list[Request]) -> list[Any]:
        return [object(), "fine"]


def batch(handler: str, bodies: list[bytes], limit_s: float = 10) -> list[CallResult]:
    async def scenario() -> list[CallResult]:
        replica = Replica(BackendConfig(name="model", version="v1", import_path=f"{MODULE}:{handler}"), "r1")
        await replica.initialize()
        items: list[TimedRequest] = [(make_request("POST", "/m", body=body), limit_s) for body in bodies]
        return await replica.handle_batch(items)

    return asyncio.run(scenario())


def test_the_handler_receives_the_whole_list_and_each_request_gets_its_own_answer() -> None:
    Doubler.sizes = []
    results = batch("Doubler", [b"a", b"b", b"c"])
    assert Doubler.sizes == [3]
    assert [(outcome, response[2]) for outcome, response in results] == [
        (CallOutcome.OK, b"aa"), (CallOutcome.OK, b"bb"), (CallOutcome.OK, b"cc"),
    ]


def test_a_sync_batched_handler_works_too() -> None:
    assert [response[2] for _, response in batch("SyncDoubler", [b"a", b"b"])] == [b"sync", b"sync"]


def test_a_wrong_length_result_fails_every_request_with_a_clear_log_line(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.ERROR, logger="replica.host"):
        results = batch("DropsOne", [b"a", b"b", b"c"])
    expected = "backend model: the batch handler returned 2 results for 3 requests"
    assert all(outcome == CallOutcome.ERROR and expected in text for outcome, text in results)
    assert len(results) == 3 and expected in caplog.text


def test_a_raising_batched_handler_fails_every_request_with_its_traceback() -> None:
    results = batch("Raises", [b"a", b"b"])
    assert all(outcome == CallOutcome.ERROR and "model exploded" in text for outcome, text in results)


def test_one_result_that_cannot_be_sent_fails_only_its_own_request() -> None:
    [(first, _), (second, response)] = batch("OneUnserialisable", [b"a", b"b"])
    assert (first, second, response[2]) == (CallOutcome.ERROR, CallOutcome.OK, b"fine")
