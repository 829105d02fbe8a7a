"""Several proxy workers per node: the fleet keeps each as a proxy of its own."""

from __future__ import annotations

import asyncio

from controller.actor import ControllerActor
from controller.state.backend_state import Probe, ProbeStatus
from controller.state.proxy_fleet import (
    PingProxy,
    ProxyFleet,
    ProxyRestarted,
    ProxySpec,
    StartProxy,
    StopProxy,
    workers_on,
)
from controller.testing import FakeAdapter, MemoryStorage
from tests.support.goals import poll, stop
from vocabulary.control.proxy_workers import DEFAULT_MAX_CONNECTIONS, DEFAULT_WORKERS_CAP, MAX_PROXY_WORKERS
from vocabulary.control.status import ProxyState

SPEC = ProxySpec("proxy.actor:ProxyActor", "controller", "127.0.0.1", 8000, workers=3)
OK = Probe(ProbeStatus.OK)
DEAD = Probe(ProbeStatus.DEAD, "actor died")
N1 = {"n1": "10.0.0.1"}
IDS = ["n1", "n1:1", "n1:2"]


def _running(fleet: ProxyFleet, now: float = 1.0, pids: tuple[int, ...] = (100, 101, 102)) -> list:
    fleet.tick(0.0, N1, {})
    return fleet.tick(now, N1, {key: Probe(ProbeStatus.OK, incarnation=pid) for key, pid in zip(IDS, pids)})


def test_each_node_gets_its_workers_each_started_as_its_own_actor() -> None:
    fleet = ProxyFleet(SPEC)
    effects = fleet.tick(0.0, N1, {})
    assert effects == [StartProxy("n1", SPEC, w, "10.0.0.1") for w in range(3)]
    assert [e.actor_name for e in effects] == ["gitops-proxy-n1", "gitops-proxy-n1-1", "gitops-proxy-n1-2"]
    assert [e.proxy_id for e in effects] == IDS


def test_status_lists_every_worker_under_its_proxy_id_all_at_the_node_s_address() -> None:
    fleet = ProxyFleet(SPEC)
    _running(fleet)
    status = fleet.proxy_status()
    assert list(status) == IDS
    assert [(p.worker, p.state, p.address) for p in status.values()] == [
        (w, ProxyState.RUNNING, "127.0.0.1:8000") for w in range(3)]
    assert fleet.serving() == fleet.live() == IDS


def test_a_dead_worker_is_replaced_alone_while_the_others_keep_running() -> None:
    fleet = ProxyFleet(SPEC)
    _running(fleet)
    alive = Probe(ProbeStatus.OK, incarnation=100)
    assert fleet.tick(2.0, N1, {"n1": alive, "n1:1": DEAD, "n1:2": Probe(ProbeStatus.OK, incarnation=102)}) == [
        StopProxy("n1", "actor died", 1)]
    assert fleet.serving() == ["n1", "n1:2"]
    assert fleet.tick(3.0, N1, {"n1": alive}) == [PingProxy("n1", 0), StartProxy("n1", SPEC, 1, "10.0.0.1")]
    fleet.tick(4.0, N1, {"n1:1": Probe(ProbeStatus.OK, incarnation=201)})
    restarts = {key: p.restarts for key, p in fleet.proxy_status().items()}
    assert restarts == {"n1": 0, "n1:1": 1, "n1:2": 0}


def test_restarts_are_counted_per_worker() -> None:
    fleet = ProxyFleet(SPEC)
    _running(fleet)
    effects = fleet.tick(4.0, N1, {"n1": Probe(ProbeStatus.OK, incarnation=100),
                                   "n1:2": Probe(ProbeStatus.OK, incarnation=302)})
    assert ProxyRestarted("n1", 1, 102, 302, 2) in effects
    assert [p.restarts for p in fleet.proxy_status().values()] == [0, 0, 1]


def test_a_gone_node_stops_every_worker() -> None:
    fleet = ProxyFleet(SPEC)
    _running(fleet)
    assert fleet.tick(2.0, {}, {}) == [StopProxy("n1", worker=w) for w in range(3)]
    assert fleet.proxy_status() == {}


def test_zero_workers_means_the_node_s_cpus_capped() -> None:
    fleet = ProxyFleet(ProxySpec("proxy.actor:ProxyActor", "controller", "127.0.0.1", 8000, workers=0))
    effects = fleet.tick(0.0, {"small": "10.0.0.1", "big": "10.0.0.2"}, {}, {"small": 2, "big": 64})
    assert sorted(e.proxy_id for e in effects) == ["big", "big:1", "big:2", "big:3", "small", "small:1"]
    assert (workers_on(0, None), workers_on(0, 1), workers_on(2, 64)) == (1, 1, 2)
    assert workers_on(0, 64) == DEFAULT_WORKERS_CAP == 4


def test_a_node_told_more_workers_than_the_default_cap_runs_them_up_to_the_bound() -> None:
    assert (workers_on(16, 16), workers_on(1000, 16)) == (16, MAX_PROXY_WORKERS)


def test_the_controller_runs_as_many_workers_as_the_node_has_cpus_and_sums_their_loads() -> None:
    async def scenario():
        adapter = FakeAdapter(cpus=3)
        options = {"tick_s": 0.01, "proxy_check_s": 0.01, "proxy_workers": 0}
        ctl = ControllerActor("ns", options, storage=MemoryStorage(), adapter=adapter)
        for key in ("node-1", "node-1:1", "node-1:2"):
            adapter.proxy_calls[key] = OK
        running = await poll(ctl, lambda s: [p.state for p in s.proxies.values()] == [ProxyState.RUNNING] * 3)
        await ctl.report_load("node-1", {"b": (2, 1)})
        await ctl.report_load("node-1:1", {"b": (3, 0)})
        loads = await ctl.get_load()
        await stop(ctl)
        return running, loads, adapter.applied

    running, loads, applied = asyncio.run(scenario())
    assert list(running.proxies) == ["node-1", "node-1:1", "node-1:2"]
    assert [e.worker for e in applied if isinstance(e, StartProxy)] == [0, 1, 2]
    assert loads == {"node-1": {"b": (2, 1)}, "node-1:1": {"b": (3, 0)}}  # one report per worker, none overwritten


def test_the_route_table_tells_every_proxy_how_many_nodes_share_the_limits() -> None:
    async def routes_nodes(ctl: ControllerActor) -> int:
        answer = await ctl.listen_for_change({"routes": -1})
        return int(answer["routes"][1].nodes)

    async def scenario() -> list[int]:
        adapter = FakeAdapter(other_nodes={"node-2": "10.0.0.2", "node-3": "10.0.0.3"})
        ctl = ControllerActor("ns", {"tick_s": 0.01, "proxy_check_s": 0.01, "proxy_workers": 1},
                              storage=MemoryStorage(), adapter=adapter)
        seen = [await routes_nodes(ctl)]
        adapter.dead_nodes.add("node-3")
        await poll(ctl, lambda s: len(s.proxies) == 2)
        seen.append(await routes_nodes(ctl))
        await stop(ctl)
        return seen

    assert asyncio.run(scenario()) == [3, 2]


def test_the_controller_starts_its_proxies_with_the_connections_it_was_told() -> None:
    async def scenario() -> list[StartProxy]:
        adapter = FakeAdapter(cpus=1)
        options = {"tick_s": 0.01, "proxy_check_s": 0.01, "proxy_max_connections": 6000}
        ctl = ControllerActor("ns", options, storage=MemoryStorage(), adapter=adapter)
        adapter.proxy_calls["node-1"] = OK
        await poll(ctl, lambda s: [p.state for p in s.proxies.values()] == [ProxyState.RUNNING])
        await stop(ctl)
        return [e for e in adapter.applied if isinstance(e, StartProxy)]

    [start] = asyncio.run(scenario())
    assert start.spec.max_connections == 6000
    assert ProxySpec("p:P", "c", "h", 1).max_connections == DEFAULT_MAX_CONNECTIONS == 4096
