"""The proxy fleet as a table: (now, alive nodes, probes) steps in, effects and status out."""

from __future__ import annotations

import pytest

from controller.state.backend_state import Probe, ProbeStatus
from controller.state.proxy_fleet import PingProxy, ProxyFleet, ProxyRestarted, ProxySpec, StartProxy, StopProxy
from vocabulary.control.proxy_workers import NODE_IP
from vocabulary.control.status import ProxyState, ProxyStatus

SPEC = ProxySpec("proxy.actor:ProxyActor", "controller", "127.0.0.1", 8000)
OK = Probe(ProbeStatus.OK)
PENDING = Probe(ProbeStatus.PENDING)
TAKEN = Probe(ProbeStatus.FAILED, "OSError: port 8000 taken")
DEAD = Probe(ProbeStatus.DEAD, "actor died")
START, PING, GONE = StartProxy("n1", SPEC, node_ip="10.0.0.1"), PingProxy("n1"), StopProxy("n1")
STOP, DIED = StopProxy("n1", TAKEN.error), StopProxy("n1", DEAD.error)
N1 = {"n1": "10.0.0.1"}
N1_N2 = {"n1": "10.0.0.1", "n2": "10.0.0.2"}

CASES = [
    # name, steps [(now, alive, probes, effects)], final status of n1 (state, failures, last_error) or None
    ("an alive node gets a proxy", [(0.0, N1, {}, [START])], (ProxyState.STARTING, 0, "")),
    ("a proxy whose call is in flight stays as it was",
     [(0.0, N1, {}, [START]), (1.0, N1, {"n1": PENDING}, [])], (ProxyState.STARTING, 0, "")),
    ("a ready proxy runs and is pinged",
     [(0.0, N1, {}, [START]), (1.0, N1, {"n1": OK}, [PING])], (ProxyState.RUNNING, 0, "")),
    ("a running proxy is pinged once per period",
     [(0.0, N1, {}, [START]), (1.0, N1, {"n1": OK}, [PING]), (2.9, N1, {"n1": OK}, []),
      (3.0, N1, {"n1": OK}, [PING])], (ProxyState.RUNNING, 0, "")),
    ("a proxy that fails to start is stopped and waits out a backoff",
     [(0.0, N1, {}, [START]), (1.0, N1, {"n1": TAKEN}, [STOP]), (1.4, N1, {}, []),
      (1.5, N1, {}, [START])], (ProxyState.STARTING, 1, TAKEN.error)),
    ("the backoff doubles with each failure",
     [(0.0, N1, {}, [START]), (1.0, N1, {"n1": TAKEN}, [STOP]), (1.5, N1, {}, [START]),
      (2.0, N1, {"n1": TAKEN}, [STOP]), (2.9, N1, {}, []), (3.0, N1, {}, [START])],
     (ProxyState.STARTING, 2, TAKEN.error)),
    ("a proxy that dies while running is replaced",
     [(0.0, N1, {}, [START]), (1.0, N1, {"n1": OK}, [PING]), (2.0, N1, {"n1": DEAD}, [DIED])],
     (ProxyState.BACKOFF, 1, "actor died")),
    ("running again clears the failures but keeps the last error",
     [(0.0, N1, {}, [START]), (1.0, N1, {"n1": TAKEN}, [STOP]), (1.5, N1, {}, [START]),
      (2.0, N1, {"n1": OK}, [PING])], (ProxyState.RUNNING, 0, TAKEN.error)),
    ("a removed node's proxy is stopped and forgotten",
     [(0.0, N1, {}, [START]), (1.0, {}, {}, [GONE])], None),
    ("a removed node waiting out a backoff has nothing to stop",
     [(0.0, N1, {}, [START]), (1.0, N1, {"n1": TAKEN}, [STOP]), (1.2, {}, {}, [])], None),
]


@pytest.mark.parametrize("name,steps,final", CASES, ids=[c[0] for c in CASES])
def test_proxy_fleet(name, steps, final):
    fleet = ProxyFleet(SPEC)
    for now, alive, probes, effects in steps:
        assert fleet.tick(now, alive, probes) == effects, f"at {now}"
    status = fleet.proxy_status().get("n1")
    expected = None if final is None else ProxyStatus(
        actor_name="gitops-proxy-n1", state=final[0], failures=final[1], last_error=final[2],
        address="127.0.0.1:8000")
    assert status == expected


def test_a_proxy_bound_to_every_interface_is_reached_at_its_node_s_ip():
    fleet = ProxyFleet(ProxySpec("proxy.actor:ProxyActor", "controller", "0.0.0.0", 8000))
    fleet.tick(0.0, {"n1": "10.0.0.1", "n2": "10.0.0.2"}, {})
    assert {node: proxy.address for node, proxy in fleet.proxy_status().items()} == {
        "n1": "10.0.0.1:8000", "n2": "10.0.0.2:8000"}


def test_proxies_told_node_ip_bind_their_node_s_address_and_are_reached_there():
    fleet = ProxyFleet(ProxySpec("proxy.actor:ProxyActor", "controller", NODE_IP, 8000))
    started = fleet.tick(0.0, {"n1": "127.0.0.3", "n2": "127.0.0.2"}, {})
    assert {e.node_id: e.spec.listen_host(e.node_ip) for e in started if isinstance(e, StartProxy)} == {
        "n1": "127.0.0.3", "n2": "127.0.0.2"}
    assert {node: proxy.address for node, proxy in fleet.proxy_status().items()} == {
        "n1": "127.0.0.3:8000", "n2": "127.0.0.2:8000"}
    assert ProxySpec("proxy.actor:ProxyActor", "controller", "0.0.0.0", 8000).listen_host("127.0.0.3") == "0.0.0.0"


def test_a_proxy_bound_to_one_ipv6_address_is_reached_there_in_brackets():
    fleet = ProxyFleet(ProxySpec("proxy.actor:ProxyActor", "controller", "::1", 8000))
    fleet.tick(0.0, N1, {})
    assert fleet.proxy_status()["n1"].address == "[::1]:8000"


def test_backoff_is_capped_at_thirty_seconds():
    fleet = ProxyFleet(SPEC)
    now = 0.0
    for _ in range(10):
        fleet.tick(now, N1, {})  # starts
        now += 0.1
        fleet.tick(now, N1, {"n1": TAKEN})  # fails
        now += 30.0
    assert fleet.tick(now - 0.1, N1, {}) == [] and fleet.tick(now, N1, {}) == [START]


def test_goals_wait_for_starting_proxies_but_only_running_ones_serve():
    fleet = ProxyFleet(SPEC)
    fleet.tick(0.0, N1_N2, {})
    fleet.tick(1.0, N1_N2, {"n1": OK})
    assert (fleet.live(), fleet.serving()) == (["n1", "n2"], ["n1"])


def test_a_proxy_in_backoff_is_neither_live_nor_serving():
    fleet = ProxyFleet(SPEC)
    fleet.tick(0.0, N1, {})
    fleet.tick(1.0, N1, {"n1": TAKEN})
    assert (fleet.live(), fleet.serving()) == ([], [])


def test_a_controller_without_proxies_starts_none():
    assert ProxyFleet(None).tick(0.0, N1, {}) == []


def _pinged(fleet: ProxyFleet, now: float, pid: int) -> list:
    return fleet.tick(now, N1, {"n1": Probe(ProbeStatus.OK, incarnation=pid)})


def test_a_proxy_answering_from_a_new_process_counts_one_restart():
    fleet = ProxyFleet(SPEC)
    fleet.tick(0.0, N1, {})
    _pinged(fleet, 1.0, 100)
    assert _pinged(fleet, 1.5, 100) == []
    assert _pinged(fleet, 4.0, 200) == [ProxyRestarted("n1", 1, 100, 200), PING]
    assert fleet.proxy_status()["n1"].restarts == 1


def test_a_proxy_replaced_after_dying_counts_as_restarted():
    fleet = ProxyFleet(SPEC)
    fleet.tick(0.0, N1, {})
    _pinged(fleet, 1.0, 100)
    fleet.tick(2.0, N1, {"n1": DEAD})
    fleet.tick(3.0, N1, {})
    assert _pinged(fleet, 4.0, 300)[0] == ProxyRestarted("n1", 1, 100, 300)


def test_a_proxy_asked_for_any_free_port_is_reached_at_the_one_its_ready_call_answered():
    fleet = ProxyFleet(ProxySpec("proxy.actor:ProxyActor", "controller", "0.0.0.0", 0))
    fleet.tick(0.0, N1, {})
    starting = fleet.proxy_status()["n1"].address
    fleet.tick(1.0, N1, {"n1": Probe(ProbeStatus.OK, port=41234)})
    fleet.tick(4.0, N1, {"n1": Probe(ProbeStatus.OK, incarnation=7)})  # a ping's answer keeps the port
    assert (starting, fleet.proxy_status()["n1"].address) == ("", "10.0.0.1:41234")
