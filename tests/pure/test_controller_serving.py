"""The controller's status carries each backend's last minute of requests, and `replica_output` asks its replicas.

In-process `ControllerActor` with a fake adapter (the real path is tests/real/test_backend_errors.py).
"""

from __future__ import annotations

import asyncio

import pytest

from controller.actor import ControllerActor
from controller.testing import FakeAdapter, MemoryStorage
from tests.support.goals import OPTIONS, stop
from vocabulary.control.request_stats import RequestStats
from vocabulary.spec.backends import BackendConfig


async def with_backend(adapter: FakeAdapter) -> ControllerActor:
    ctl = ControllerActor("ns", dict(OPTIONS), storage=MemoryStorage(), adapter=adapter)
    goal = await ctl.apply_backend(BackendConfig(name="boom", version="1", import_path="m:f", num_replicas=1))
    await ctl.wait_for_goal(goal, 5.0)
    return ctl


def test_the_status_has_each_backends_requests_and_5xx_of_the_window() -> None:
    async def scenario():
        ctl = await with_backend(FakeAdapter())
        counted = RequestStats(requests=3, errors=0)
        await ctl.report_load("proxy-1", {"boom": (0, 0)}, {"boom": counted.model_dump(mode="json")})
        await asyncio.sleep(0.3)  # a tick samples the totals
        later = RequestStats(requests=13, errors=4)
        by_endpoint = {"api": RequestStats(requests=5).model_dump(mode="json")}
        await ctl.report_load("proxy-1", {"boom": (0, 0)}, {"boom": later.model_dump(mode="json")}, by_endpoint)
        await asyncio.sleep(0.3)
        by_endpoint = {"api": RequestStats(requests=12, errors=1).model_dump(mode="json")}
        await ctl.report_load("proxy-1", {"boom": (0, 0)}, {"boom": later.model_dump(mode="json")}, by_endpoint)
        status = await ctl.get_status()
        await stop(ctl)
        return status

    status = asyncio.run(scenario())
    assert status.serving_window_s > 0
    # The window began at the controller's first tick, before either report: all of them count.
    assert (status.serving["boom"].requests, status.serving["boom"].errors) == (13, 4)
    # Per endpoint a proxy's first report is where it starts from (these totals begin afresh with the controller).
    assert (status.endpoint_serving["api"].requests, status.endpoint_serving["api"].errors) == (7, 1)


def test_a_backend_whose_replicas_all_run_a_new_version_is_counted_from_then_on() -> None:
    """The 5xx its old code answered are not held against the version that serves now."""
    async def scenario():
        ctl = await with_backend(FakeAdapter())
        await asyncio.sleep(2.2)  # a sample (every 2 s) sees its replica at version 1
        erring = RequestStats(requests=13, errors=4)
        await ctl.report_load("proxy-1", {"boom": (0, 0)}, {"boom": erring.model_dump(mode="json")})
        await asyncio.sleep(2.2)  # and a sample holds its 5xx before version 2 starts
        goal = await ctl.apply_backend(BackendConfig(name="boom", version="2", import_path="m:f", num_replicas=1))
        await ctl.wait_for_goal(goal, 5.0)  # the tick that met it saw every replica at version 2
        fixed = RequestStats(requests=18, errors=4)  # five more answers, none 5xx
        await ctl.report_load("proxy-1", {"boom": (0, 0)}, {"boom": fixed.model_dump(mode="json")})
        status = await ctl.get_status()
        await stop(ctl)
        return status

    status = asyncio.run(scenario())
    assert (status.serving["boom"].requests, status.serving["boom"].errors) == (5, 0)
    assert 0 < status.serving_windows["boom"] < status.serving_window_s


def test_replica_output_asks_every_replica_of_the_backend() -> None:
    async def scenario():
        adapter = FakeAdapter()
        ctl = await with_backend(adapter)
        [replica] = (await ctl.get_status()).backends["boom"].replicas
        adapter.output[replica.replica_id] = ("loading model",)
        found = await ctl.replica_output("boom")
        with pytest.raises(ValueError, match="unknown backend 'nope'"):
            await ctl.replica_output("nope")
        await stop(ctl)
        return replica.replica_id, found

    replica_id, found = asyncio.run(scenario())
    assert [(o.replica_id, o.out) for o in found] == [(replica_id, ("loading model",))]


def test_replica_output_ends_with_the_replaced_replicas_also_of_a_backend_deleted_since() -> None:
    """Issue 49 row 3: replicas that failed to start have no output of their own to read; how each
    ended is shown, also once the failed commit's backend was deleted."""
    async def scenario():
        adapter = FakeAdapter(start_error="RuntimeError: model weights: sha256 mismatch (deployments/hello.py:12)")
        ctl = ControllerActor("ns", dict(OPTIONS), storage=MemoryStorage(), adapter=adapter)
        config = BackendConfig(name="broken", version="1", import_path="m:f", num_replicas=1)
        goal = await ctl.apply_backend(config)
        await ctl.wait_for_goal(goal, 10.0)
        while_there = await ctl.replica_output("broken")
        await ctl.wait_for_goal(await ctl.delete_backend("broken"), 10.0)
        gone = await ctl.replica_output("broken")
        with pytest.raises(ValueError, match="unknown backend 'nope'"):
            await ctl.replica_output("nope")
        await stop(ctl)
        return while_there, gone

    while_there, gone = asyncio.run(scenario())
    ended = [o for o in while_there if o.ended]
    assert ended and all(
        (o.ended, o.err) == ("failed to start", ("RuntimeError: model weights: sha256 mismatch (deployments/hello.py:12)",))
        for o in ended
    )
    assert [o.replica_id for o in gone] == [o.replica_id for o in ended] and all(o.ended for o in gone)


def test_a_handler_error_older_than_the_window_is_no_longer_shown() -> None:
    from controller.loop import _recent_error_only
    from vocabulary.control.status import BackendStatus, HandlerError

    raised = HandlerError(type="KeyError", message="'x'", where="deployments/a.py:3", at=1000.0)
    status = BackendStatus(version="1", target_replicas=1, latest_error=raised)
    assert _recent_error_only(status, 1030.0).latest_error == raised
    assert _recent_error_only(status, 1100.0).latest_error is None


def test_a_replica_a_proxy_reports_stalled_is_replaced_though_its_health_check_passes() -> None:
    async def scenario():
        ctl = await with_backend(FakeAdapter())
        [hung] = (await ctl.get_status()).backends["boom"].replicas
        seen = "2 calls ran out their timeout and the replica answered nothing for 2.0s"
        await ctl.report_load("proxy-1", {"boom": (2, 0)}, {}, {}, stalled={"boom": {hung.replica_id: seen}})
        # A second proxy's report of the same replica, and an unknown backend's, change nothing more.
        await ctl.report_load("proxy-2", {"boom": (1, 0)}, {}, {}, stalled={"boom": {hung.replica_id: seen}, "gone": {"x": "y"}})
        for _ in range(50):
            status = (await ctl.get_status()).backends["boom"]
            running = [r for r in status.replicas if r.state.value == "RUNNING"]
            if running and running[0].replica_id != hung.replica_id:
                break
            await asyncio.sleep(0.1)
        failures = (await ctl.get_status()).replica_failures
        await stop(ctl)
        return hung.replica_id, status, running, failures

    hung_id, status, running, failures = asyncio.run(scenario())
    assert [r.replica_id for r in running] != [hung_id] and len(running) == 1
    assert dict((reason.value, n) for reason, n in status.restarts.items()) == {"stalled": 1}
    assert status.last_error.startswith("2 calls ran out their timeout")
    [failure] = failures
    assert (failure.replica_id, failure.reason) == (hung_id, "stalled")
    assert failure.message().startswith(f"replica {hung_id} of backend boom stalled: 2 calls ran out")
