"""A replica keeps the latest exception its handler raised and answers it to health checks."""

from __future__ import annotations

import asyncio

import pytest
from starlette.requests import Request

from replica.host import Replica
from vocabulary.request_path.wire import make_request
from vocabulary.spec.backends import BackendConfig

MODULE = __name__


class Boom:
    async def __call__(self, request: Request) -> str:
        if request.url.path == "/ok":
            return "fine"
        return str(1 / 0)


def test_a_raising_handler_is_the_replicas_latest_error_with_its_file_and_line() -> None:
    async def scenario():
        replica = Replica(BackendConfig(name="boom", version="v1", import_path=f"{MODULE}:Boom"), "boom#1")
        await replica.initialize()
        assert await replica.check_health() is None
        with pytest.raises(ZeroDivisionError):
            await replica.handle_request(make_request("GET", "/boom"))
        await replica.handle_request(make_request("GET", "/ok"))  # a success keeps the latest error
        return await replica.check_health()

    latest = asyncio.run(scenario())
    line = Boom.__call__.__code__.co_firstlineno + 3
    assert (latest.type, latest.message, latest.replica_id) == ("ZeroDivisionError", "division by zero", "boom#1")
    assert latest.where == f"tests/component/test_replica_errors.py:{line}"
