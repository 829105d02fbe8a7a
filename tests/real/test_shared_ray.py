"""The Ray the runner holds for the real tier's workers: sessions in two processes join the same
one, with the logical CPUs asked for, and it is gone when its block ends."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

from tests.support.shared_ray import ADDRESS, shared_ray

ROOT = Path(__file__).resolve().parents[2]

# A session as `ray_session` joins it: its own namespace; one detached actor by name, then what it sees.
SESSION = """
import json, os, sys
import ray
from controller.cluster import init_ray
init_ray(address=os.environ["GITOPS_TEST_RAY_ADDRESS"], namespace=sys.argv[1])

@ray.remote(num_cpus=0)
class Marker:
    def ping(self):
        return 1

marker = Marker.options(name=sys.argv[1], lifetime="detached").remote()
ray.get(marker.ping.remote())
names = sorted(a["namespace"] for a in ray.util.list_named_actors(all_namespaces=True))
print(json.dumps({"cpus": ray.cluster_resources().get("CPU"), "namespaces": names}))
"""


def _session(env: dict[str, str], namespace: str) -> dict:
    done = subprocess.run([sys.executable, "-c", SESSION, namespace], env={**os.environ, **env}, cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.splitlines()[-1])


def _listening(address: str) -> bool:
    host, port = address.rsplit(":", 1)
    with socket.socket() as probe:
        probe.settimeout(2)
        return probe.connect_ex((host, int(port))) == 0


def test_two_sessions_join_one_ray_with_the_cpus_asked_and_it_stops_with_its_block() -> None:
    with shared_ray(5) as env:
        assert env["RAY_AUTH_MODE"] == "token" and Path(env["RAY_AUTH_TOKEN_PATH"]).is_file()
        first = _session(env, "first-worker")
        second = _session(env, "second-worker")
        address = env[ADDRESS]
        assert _listening(address)

    assert first["cpus"] == second["cpus"] == 5.0
    assert "first-worker" in second["namespaces"]  # the first session's actor, seen from the second's
    assert not _listening(address)
    assert not Path(env["RAY_AUTH_TOKEN_PATH"]).exists()  # its state dir went with it
