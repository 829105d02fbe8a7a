"""`gitops run --ray-port / --ray-min-worker-port / --ray-max-worker-port`: checked before anything starts."""

from __future__ import annotations

import pytest

from gitops.errors import UsageError
from gitops.process.ray_ports import MIN_WORKER_PORTS, RayPorts, ray_ports

AGENT = {"--proxy-port": 8000, "--proxy-metrics-port": 8002, "--admin-port": 8001}


def test_no_flag_leaves_every_port_to_ray() -> None:
    chosen = ray_ports(None, None, None, joined=False, taken=AGENT)
    assert chosen == RayPorts() and not chosen.chosen


def test_the_ports_asked_are_the_ports_given() -> None:
    assert ray_ports(6380, 20000, 20099, joined=False, taken=AGENT) == RayPorts(6380, (20000, 20099))
    assert ray_ports(6380, None, None, joined=False, taken=AGENT) == RayPorts(6380, None)
    assert ray_ports(None, 20000, 20000 + MIN_WORKER_PORTS - 1, joined=False, taken=AGENT).workers == (
        20000, 20000 + MIN_WORKER_PORTS - 1
    )


@pytest.mark.parametrize(
    "port, low, high, said",
    [
        (80, None, None, "--ray-port must be 1024 to 65535, not 80"),
        (70000, None, None, "--ray-port must be 1024 to 65535, not 70000"),
        (None, 20000, None, "--ray-min-worker-port and --ray-max-worker-port go together: give both"),
        (None, None, 20100, "--ray-min-worker-port and --ray-max-worker-port go together: give both"),
        (None, 20100, 20000, "--ray-min-worker-port 20100 to --ray-max-worker-port 20000 is 0 ports: give at "
                             f"least {MIN_WORKER_PORTS} (each Ray worker process, replicas included, holds one)"),
        (None, 20000, 20003, "--ray-min-worker-port 20000 to --ray-max-worker-port 20003 is 4 ports: give at "
                             f"least {MIN_WORKER_PORTS} (each Ray worker process, replicas included, holds one)"),
        (None, 500, 2000, "--ray-min-worker-port must be 1024 to 65535, not 500"),
        (8001, None, None, "--ray-port 8001 is also --admin-port: give each its own port"),
        (None, 7990, 8100, "--proxy-port 8000 is inside --ray-min-worker-port..--ray-max-worker-port (7990-8100): "
                           "Ray's workers would take it"),
        (20050, 20000, 20099, "--ray-port 20050 is inside --ray-min-worker-port..--ray-max-worker-port "
                              "(20000-20099)"),
    ],
)
def test_a_bad_value_is_a_usage_error_naming_the_flag(port: int | None, low: int | None, high: int | None,
                                                      said: str) -> None:
    with pytest.raises(UsageError) as raised:
        ray_ports(port, low, high, joined=False, taken=AGENT)
    assert str(raised.value) == said and raised.value.exit_code == 2


def test_a_joined_cluster_keeps_its_own_ports() -> None:
    with pytest.raises(UsageError, match=r"^--ray-port sets the ports of the Ray this agent starts: with "
                                         r"--ray-address, set them on the cluster's `ray start`"):
        ray_ports(6380, None, None, joined=True, taken=AGENT)
    assert ray_ports(None, None, None, joined=True, taken=AGENT) == RayPorts()
