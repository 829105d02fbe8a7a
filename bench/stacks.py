"""The two systems as an operator runs them, for the update, rollout, fault and memory measurements.

- `Ours`: `gitops run` (as a user starts it, `tests.support.stack.AgentProcess`)
  on a throw-away git repository, joined to a local Ray this process starts;
  changes are git commits.
- `Serve`: Ray Serve 2.60 on a local Ray with its dashboard, driven as from CI:
  the whole config `PUT` to the REST API (`serve deploy` does the same PUT).

Both serve the same echo backend: it answers its code version and its
`user_config`, so a client sees when a change took effect. Process look-ups
stay inside this process's tree: other users' Ray processes are never touched.
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import os
import socket
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import httpx

from bench import machine

ROOT = Path(__file__).resolve().parent.parent

ECHO_APP = '''\
CODE = "{code}"


class Echo:
    def __init__(self, label="echo"):
        self.label = label
        self.config = None

    def reconfigure(self, config):
        self.config = config

    def __call__(self, request):
        return {{"label": self.label, "code": CODE, "config": self.config}}
'''

BACKEND = '''\
[backends.{name}]
import_path = "deployments.apps.echo:Echo"
init_args = ["{name}"]
num_replicas = {replicas}
user_config = {{ label = "{config}" }}
graceful_shutdown_timeout_s = 2
ray_actor_options = {{ num_cpus = 0 }}

'''

ENDPOINT = '''\
[endpoints.echo]
route = "/echo"
traffic = {{ {to} = 1.0 }}
'''


# Serve as a user starts it from CI here: no usage stats, no token auth (its REST API has none).
QUIET_RAY = {"RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0", "RAY_DEDUP_LOGS": "0"}


def own_ray() -> None:
    """Make this process's next `ray.init()` start a local Ray of its own.

    Without an address Ray 2.60 joins any Ray already running on the machine
    (found through /tmp/ray/ray_current_cluster): on a shared machine that is
    someone else's, or a dead one it waits for. Children inherit the setting.
    """
    os.environ["RAY_ADDRESS"] = "local"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def poll(check: Any, timeout_s: float, what: str, interval_s: float = 0.002) -> float:
    """Call `check` until it returns true; returns when (perf_counter). Errors count as not yet."""
    deadline = time.perf_counter() + timeout_s
    while time.perf_counter() < deadline:
        try:
            if check():
                return time.perf_counter()
        except (httpx.HTTPError, ValueError, KeyError):
            pass
        time.sleep(interval_s)
    raise RuntimeError(f"not within {timeout_s:.0f} s: {what}")


def answer(http: httpx.Client, url: str) -> dict[str, Any]:
    response = http.get(url)
    return response.json() if response.status_code == 200 else {}


@functools.cache
def serve_installed() -> bool:
    """Ray Serve with its dependencies (the `bench` extra's `ray[serve]`), not just Ray's own code.

    Importing it is the test: Ray always ships `ray.serve`'s code, and other
    extras bring some of its dependencies (fastapi, aiohttp) but not all (grpcio).
    """
    if not all(importlib.util.find_spec(name) is not None for name in ("fastapi", "aiohttp")):
        return False
    try:
        importlib.import_module("ray.serve")
    except ImportError:
        return False
    return True


class Ours:
    """`gitops run` serving /echo from backends blue (and green), `replicas` each."""

    name = "ours"

    def __init__(self, replicas: int = 1, two_backends: bool = False) -> None:
        from controller.cluster import init_ray
        from tests.conftest import GitRepo
        from tests.support.stack import AgentProcess

        import ray

        self._tmp = tempfile.TemporaryDirectory(prefix="bench-ours-")
        work = Path(self._tmp.name)
        own_ray()
        init_ray(namespace=f"bench-{uuid.uuid4().hex[:6]}")
        self.replicas = replicas
        self._backends = ("blue", "green") if two_backends else ("blue",)
        self.repo = GitRepo(work / "repo")
        self.repo.write("deployments/__init__.py", "")
        self.repo.write("deployments/apps/__init__.py", "")
        self._code, self._config, self._to = "0", "a", "blue"
        self._write()
        first = self.repo.commit("echo")
        self.agent = AgentProcess(self.repo.root, work, ray.get_runtime_context().gcs_address)
        self.agent.wait_applied(first)
        self.url = self.agent.proxy + "/echo"
        self.http = httpx.Client(timeout=5)

    def _write(self) -> None:
        self.repo.write("deployments/apps/echo.py", ECHO_APP.format(code=self._code))
        backends = "".join(BACKEND.format(name=b, replicas=self.replicas, config=self._config)
                           for b in self._backends)
        self.repo.write("deployments/echo.toml", backends + ENDPOINT.format(to=self._to))

    def change(self, *, code: str | None = None, config: str | None = None, to: str | None = None) -> tuple[float, str]:
        """Commit a change; returns (perf_counter just before `git commit`, the commit)."""
        self._code, self._config, self._to = code or self._code, config or self._config, to or self._to
        self._write()
        self.repo.git("add", "-A")
        started = time.perf_counter()
        self.repo.git("commit", "-q", "-m", "bench change")
        return started, self.repo.head()

    def wait_done(self, commit: str) -> float:
        """When the agent reports `commit` applied and Synced (perf_counter)."""
        return poll(lambda: (s := self.agent.get("/status"))["last_applied_revision"] == commit
                    and s["status"] == "Synced", 300, f"{commit[:7]} applied", interval_s=0.05)

    def _controller(self) -> Any:
        import ray

        from vocabulary.control.goal_api import CONTROLLER_NAME, DEFAULT_NAMESPACE

        return ray.get_actor(CONTROLLER_NAME, namespace=DEFAULT_NAMESPACE)

    def goal_api_answers(self, timeout_s: float = 2.0) -> bool:
        import ray

        try:
            ray.get(self._controller().get_status.remote(), timeout=timeout_s)
        except Exception:  # noqa: BLE001 — dead, restarting or not yet registered: not answering
            return False
        return True

    def pids(self) -> dict[str, list[int]]:
        import ray

        controller = ray.get(self._controller().process_info.remote())["pid"]
        return {
            "agent": [self.agent.process.pid],
            "controller": [int(controller)],
            "proxy": machine.find(os.getpid(), "ray::ProxyActor"),
            "replica": machine.find(os.getpid(), "ray::Replica"),
        }

    def close(self) -> None:
        from controller.cluster import shutdown_ray

        self.http.close()
        self.agent.stop()
        shutdown_ray()
        self._tmp.cleanup()


class Serve:
    """Ray Serve serving /echo (`bench.ops_apps:app`), `replicas` replicas, config by REST PUT."""

    name = "serve"

    def __init__(self, replicas: int = 1) -> None:
        import logging

        import ray

        os.environ.update(QUIET_RAY)  # also after `Ours` turned token auth on in this process
        own_ray()
        # Not controller.cluster.init_ray: Serve's REST API needs the dashboard it leaves out.
        self._dashboard_port, self._port = free_port(), free_port()
        ray.init(include_dashboard=True, dashboard_host="127.0.0.1", dashboard_port=self._dashboard_port,
                 logging_level=logging.ERROR, log_to_driver=False, namespace=f"bench-{uuid.uuid4().hex[:6]}")
        self.replicas = replicas
        self.api = f"http://127.0.0.1:{self._dashboard_port}/api/serve/applications/"
        self.url = f"http://127.0.0.1:{self._port}/echo"
        self.http = httpx.Client(timeout=10)
        self._code, self._config = "0", "a"
        poll(lambda: self.http.get(self.api).status_code == 200, 120, "Serve's REST API", interval_s=0.2)
        self.wait_done(self.change()[0])

    def config(self) -> dict[str, Any]:
        deployment = {
            "name": "Echo", "num_replicas": self.replicas, "max_ongoing_requests": 100,
            "user_config": {"label": self._config}, "graceful_shutdown_timeout_s": 2,
            "ray_actor_options": {"num_cpus": 0}, "logging_config": {"enable_access_log": False},
        }
        return {
            "http_options": {"host": "127.0.0.1", "port": self._port},
            "applications": [{
                "name": "echo", "route_prefix": "/echo", "import_path": "bench.ops_apps:app",
                "runtime_env": {"env_vars": {"BENCH_CODE": self._code}}, "deployments": [deployment],
            }],
        }

    def change(self, *, code: str | None = None, config: str | None = None, to: str | None = None) -> tuple[float, str]:
        """PUT the changed config; returns (perf_counter just before the PUT, "")."""
        self._code, self._config = code or self._code, config or self._config
        body = self.config()
        started = time.perf_counter()
        response = self.http.put(self.api, json=body)
        response.raise_for_status()
        return started, ""

    def wait_done(self, since: float) -> float:
        """When Serve reports the application RUNNING on the latest config (perf_counter)."""
        def running() -> bool:
            apps = self.http.get(self.api).json().get("applications", {})
            app = apps.get("echo", {})
            deployed = app.get("deployed_app_config") or {}
            env = (deployed.get("runtime_env") or {}).get("env_vars", {})
            return app.get("status") == "RUNNING" and env.get("BENCH_CODE") == self._code
        return poll(running, 300, "Serve application RUNNING", interval_s=0.05)

    def goal_api_answers(self, timeout_s: float = 2.0) -> bool:
        import ray

        try:
            controller = ray.get_actor("SERVE_CONTROLLER_ACTOR", namespace="serve")
            ray.get(controller.get_serve_instance_details.remote(), timeout=timeout_s)
        except Exception:  # noqa: BLE001 — dead, restarting or not yet registered: not answering
            return False
        return True

    def pids(self) -> dict[str, list[int]]:
        return {
            "controller": machine.find(os.getpid(), "ray::ServeController"),
            "proxy": machine.find(os.getpid(), "ray::ProxyActor"),
            "replica": machine.find(os.getpid(), "ray::ServeReplica"),
        }

    def close(self) -> None:
        from ray import serve

        from controller.cluster import shutdown_ray

        self.http.close()
        try:
            serve.shutdown()
        finally:
            shutdown_ray()


def start(system: str, replicas: int = 1, two_backends: bool = False) -> Ours | Serve:
    return Ours(replicas, two_backends) if system == "ours" else Serve(replicas)


# The measurements that run Ray Serve at the tiny size too (bench.report --tiny, as `make test` runs
# it): the others leave their Serve side to `make bench`, to keep `make test` within its time budget.
TINY_WITH_SERVE = ("proxy",)


def serve_measured(measurement: str, tiny: bool) -> bool:
    """Whether `measurement` runs Ray Serve beside ours: when it is installed, and at the tiny size
    only for `TINY_WITH_SERVE`."""
    return serve_installed() and (not tiny or measurement in TINY_WITH_SERVE)


def systems(measurement: str, tiny: bool = False) -> list[str]:
    """Ours always; Serve, first, when `serve_measured` (ours turns Ray's token auth on for the process)."""
    return ["serve", "ours"] if serve_measured(measurement, tiny) else ["ours"]
