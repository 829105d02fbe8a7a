"""Helpers shared by the real-tier tests (and the benchmarks built on them).

Owned here: how a test starts a controller at test speed and waits on it
(`start_controller`, `met`, `eventually`, `named_actors`, `proxy_url`), the test-speed
backend every controller test deploys from tests/real/apps (`quick_backend`),
loopback ports free or taken (`free_port`, `free_port_range`, `occupied_port`),
and `gitops run` as a user starts it, joined to the session's Ray
(`AgentProcess`), and the other verbs as a user types them in the spec
repository, which finds that agent through its state dir (`gitops_cli`). A plain module rather than fixtures: each test module
decides its own fixture scope and cleanup.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable, Coroutine, Iterator, Sequence, TypeVar

import httpx
import ray

from controller.client import ControllerClient, start_or_connect
from controller.state.proxy_fleet import PROXY_PREFIX
from vocabulary.control import goal_api
from vocabulary.control.goal_api import CONTROLLER_NAME, namespace_of
from vocabulary.control.goals import GoalState
from vocabulary.spec.backends import BackendConfig

__all__ = [
    "APPS",
    "FAST_CONTROLLER_OPTIONS",
    "PROXY_CLASS",
    "run",
    "eventually",
    "named_actors",
    "start_controller",
    "proxy_url",
    "met",
    "quick_backend",
    "free_port",
    "free_port_range",
    "occupied_port",
    "AgentProcess",
    "gitops_cli",
    "agent_namespace",
]

T = TypeVar("T")

# User code of the controller tests, shipped to replicas as their working_dir.
APPS = str(Path(__file__).resolve().parents[1] / "real" / "apps")

# Ticks, polls and backoffs short enough that a goal is met in about a
# second, yet long enough not to starve the two cores other tests share.
# The startup limit is a liveness bound, not a speed target: on the 2-core CI
# machine with three test workers starting Ray workers at once, a replica of
# four took over 30 s to become ready (routing policies, CI on e97e98f). Tests
# of the limit itself set the backend's own startup_timeout_s.
FAST_CONTROLLER_OPTIONS: dict[str, Any] = {
    "tick_s": 0.1,
    "proxy_check_s": 0.3,
    "longpoll_timeout_s": 5.0,
    "startup_timeout_s": 90.0,
    "backoff_base_s": 0.2,
    "backoff_max_s": 1.0,
    "unschedulable_grace_s": 0.5,
}
PROXY_CLASS = goal_api.PROXY_CLASS


def agent_namespace() -> str:
    """The Ray namespace of an agent started without --namespace here: GITOPS_NAMESPACE, which each
    session on a shared Ray sets to one of its own (tests/conftest.py), else ray-gitops's default."""
    return namespace_of(None, os.environ)


def run(coro: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(coro)


def eventually(
    check: Callable[[], T], timeout_s: float = 30.0, interval_s: float = 0.05, *,
    what: str = "", retry_on: tuple[type[Exception], ...] = (),
) -> T:
    """Poll `check` until it returns something truthy, and return that.

    Exceptions in `retry_on` (e.g. a server not listening yet) count as not
    yet. Past the deadline it fails the test, naming `what` or the check.
    """
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            value = check()
        except retry_on:
            value = None
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"not true within {timeout_s}s: {what or check}")
        time.sleep(interval_s)


def named_actors(namespace: str, prefix: str) -> set[str]:
    """Names of the live named actors in `namespace` that start with `prefix`."""
    return {
        actor["name"] for actor in ray.util.list_named_actors(all_namespaces=True)
        if actor["namespace"] == namespace and actor["name"].startswith(prefix)
    }


def start_controller(namespace: str, proxies: bool = False, proxy_port: int = 0, **options: Any) -> ControllerClient:
    """A controller of its own in `namespace`, at test speed; the caller shuts it down.

    Proxies (one per node, on loopback) only when asked: most controller
    tests are about replicas and need no HTTP.
    """
    settings = {**FAST_CONTROLLER_OPTIONS, "proxy_class": PROXY_CLASS if proxies else None, **options}
    return start_or_connect(namespace=namespace, proxy_host="127.0.0.1", proxy_port=proxy_port, options=settings)


def proxy_url(namespace: str) -> str:
    """`http://HOST:PORT` of the first proxy the controller in `namespace` started, once it is ready."""
    names = eventually(lambda: named_actors(namespace, PROXY_PREFIX), 60)
    assert names, "the controller started no proxy"
    return "http://" + str(ray.get(ray.get_actor(min(names), namespace=namespace).ready.remote(), timeout=30))


def met(client: ControllerClient, goal_id: str, timeout_s: float = 120.0) -> None:
    result = run(client.wait_for_goal(goal_id, timeout_s))
    assert result.state == GoalState.MET, result


def quick_backend(name: str, import_path: str, **fields: Any) -> BackendConfig:
    """A backend from tests/real/apps that takes no CPU and checks health and stops fast.

    `fields` are BackendConfig fields and override these defaults.
    """
    # A health check answers in milliseconds, but on a loaded 2-core CI machine one can wait seconds
    # for its turn: 5 s replaced healthy replicas under their callers (a 502 in the routing tests).
    # No test waits for a check to time out; replicas that die are seen at once.
    defaults: dict[str, Any] = {
        "version": "v1",
        "num_replicas": 1,
        "working_dir": APPS,
        "ray_actor_options": {"num_cpus": 0},
        "health_check_period_s": 1.0,
        "health_check_timeout_s": 20.0,
        "graceful_shutdown_timeout_s": 1.0,
    }
    return BackendConfig(name=name, import_path=import_path, **{**defaults, **fields})


def _above_ephemeral() -> tuple[int, int] | None:
    """The ports above the kernel's ephemeral range (61000-65535 with Linux's default 32768-60999),
    when there are enough of them."""
    try:
        high = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[1])
    except (OSError, IndexError, ValueError):
        return None
    if 65536 - (high + 1) < 2000:
        return None
    return _slice_of_this_worker(high + 1, 65536)


def _slice_of_this_worker(low: int, high: int) -> tuple[int, int]:
    """This pytest-xdist worker's share of `low`..`high` (all of it outside xdist): a port one worker
    picked and has not bound yet is never another's pick."""
    worker, count = os.environ.get("PYTEST_XDIST_WORKER", ""), os.environ.get("PYTEST_XDIST_WORKER_COUNT", "")
    if not worker.startswith("gw") or not worker[2:].isdigit() or not count.isdigit() or int(count) < 1:
        return low, high
    index, width = int(worker[2:]) % int(count), (high - low) // int(count)
    return low + index * width, low + (index + 1) * width


# Where `free_port` picks: above the ephemeral ports, as a port that `bind(0)` handed out becomes, once
# closed, any process's next outgoing connection's own port (CI met a test's proxy port taken by a Ray
# worker's connection between the check and the proxy's bind), and away from Ray's worker ports
# (10002-19999 by default) and `free_port_range`'s; each xdist worker in its own slice of them.
_SINGLE_PORTS = _above_ephemeral()
# Every port `free_port` handed out in this process: never handed out twice, as the three ports of
# one agent are picked before any is bound (CI met an agent whose admin and proxy metrics ports were
# the same random pick, and its second listener found the port taken by its first).
_HANDED_OUT: set[int] = set()


def free_port() -> int:
    """A loopback port nothing listens on or connects from now, and never handed out before by this
    process (above the ephemeral range when the kernel leaves room there)."""
    import random

    if _SINGLE_PORTS is not None:
        for _ in range(200):
            port = random.randrange(*_SINGLE_PORTS)
            if port in _HANDED_OUT:
                continue
            with socket.socket() as probe:
                try:
                    probe.bind(("127.0.0.1", port))
                except OSError:
                    continue
                _HANDED_OUT.add(port)
                return port
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def free_port_range(count: int) -> tuple[int, int]:
    """`count` consecutive ports free on every address, below the kernel's ephemeral
    range (so `free_port` of a parallel test never hands one out): lowest, highest."""
    import random

    for _ in range(200):
        low = random.randrange(20000, 32000 - count)
        probes: list[socket.socket] = []
        try:
            for port in range(low, low + count):
                probe = socket.socket()
                probes.append(probe)
                probe.bind(("0.0.0.0", port))
        except OSError:
            continue
        finally:
            for probe in probes:
                probe.close()
        return low, low + count - 1
    raise RuntimeError(f"no {count} consecutive free ports found")


@contextlib.contextmanager
def occupied_port() -> Iterator[int]:
    """A loopback port something else already listens on, for the duration."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        yield int(taken.getsockname()[1])


class AgentProcess:
    """`gitops run --ray-address <address>` on loopback ports, short intervals.

    Joined to an existing Ray (the test session's), as a user starts it;
    `stop()` ends it and shuts down the controller it left running.
    `extra_args` are appended to the command line (e.g. `--log-format json`).
    `cwd` is where it runs (default: here); Ray puts a driver's directory on
    its workers' import path, so a repository whose code is the `deployments`
    package (the layout `gitops init` makes) needs one outside this checkout,
    whose own `deployments` package would be imported instead.
    """

    def __init__(
        self, repo: Path, workdir: Path, ray_address: str, extra_args: Sequence[str] = (), cwd: Path | None = None
    ) -> None:
        self.admin_port, self.proxy_port, self.metrics_port = free_port(), free_port(), free_port()
        self.admin = f"http://127.0.0.1:{self.admin_port}"
        self.proxy = f"http://127.0.0.1:{self.proxy_port}"
        self.log_path = workdir / "agent.log"
        self._log = self.log_path.open("w")
        self.process = subprocess.Popen(
            [
                sys.executable, "-m", "gitops", "run",
                "--repo", str(repo), "--path", "deployments",
                "--ray-address", ray_address,
                "--proxy-port", str(self.proxy_port),
                "--proxy-metrics-port", str(self.metrics_port),
                "--admin-port", str(self.admin_port),
                "--interval", "0.5", "--resync-interval", "2",
                "--state-dir", str(workdir / "state"),
                *extra_args,
            ],
            stdout=self._log,
            stderr=subprocess.STDOUT,
            cwd=cwd,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        self.http = httpx.Client(timeout=10)

    def log_tail(self, lines: int = 30) -> str:
        return "\n".join(self.log_path.read_text().splitlines()[-lines:])

    def get(self, path: str) -> Any:
        return self.http.get(self.admin + path).json()

    def metrics(self) -> str:
        return self.http.get(self.admin + "/metrics").text

    def wait(self, what: str, done: Callable[[], bool], timeout_s: float = 90) -> float:
        """Poll `done` until true; returns the seconds it took.

        An agent still starting (connection refused) or answering without
        the field yet counts as not done; an agent that exited fails at once.
        """
        start = time.monotonic()
        while True:
            assert self.process.poll() is None, f"gitops run exited:\n{self.log_tail()}"
            try:
                if done():
                    return time.monotonic() - start
            except (httpx.TransportError, ValueError, KeyError):
                pass
            assert time.monotonic() - start < timeout_s, f"timed out waiting for {what}:\n{self.log_tail()}"
            time.sleep(0.1)

    def wait_applied(self, commit: str) -> None:
        self.wait(
            f"{commit[:7]} applied",
            lambda: (s := self.get("/status"))["last_applied_revision"] == commit and s["status"] == "Synced",
        )

    def wait_applied_though_erring(self, commit: str) -> None:
        """Wait until `commit` is applied, whatever the status says of its backends' answers: a test
        that makes 5xx on purpose sees BackendErrors (not Synced) for the minute they are counted."""
        self.wait(f"{commit[:7]} applied", lambda: self.get("/status")["last_applied_revision"] == commit)

    def wait_attempted(self, commit: str) -> None:
        """Wait until `commit` is in the history, applied or not (an invalid commit never applies)."""
        self.wait(
            f"{commit[:7]} attempted",
            lambda: any(entry["commit"] == commit for entry in _history_entries(self.get("/history"))),
        )

    def stop(self) -> None:
        self.http.close()
        self.process.send_signal(signal.SIGINT)
        try:
            self.process.wait(20)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(5)
        self._log.close()
        _shutdown_controller()


def gitops_cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """`gitops ARGS...` run in `cwd` with neither GITOPS_AGENT nor GITOPS_TOKEN set, so the
    command finds its agent as a user's would: through the state dir of the repository it stands in."""
    env = {k: v for k, v in os.environ.items() if k not in ("GITOPS_AGENT", "GITOPS_TOKEN")}
    return subprocess.run([sys.executable, "-m", "gitops", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=240)


def _history_entries(history: Any) -> list[dict[str, Any]]:
    return history if isinstance(history, list) else history.get("entries", [])


def _shutdown_controller() -> None:
    """A joined cluster keeps serving after the agent stops: stop what it ran."""
    try:
        handle = ray.get_actor(CONTROLLER_NAME, namespace=agent_namespace())
    except ValueError:
        return
    ControllerClient(handle, agent_namespace()).shutdown()
