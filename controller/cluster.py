"""Starting or joining Ray, quietly, with Ray's token authentication on.

Owns the process-wide Ray connection settings: an embedded local Ray with no
dashboard, no usage stats and enough worker start-up concurrency for a burst
of replicas, or a join of an existing cluster. Nothing else here: actors
live in other modules.

Authentication (Ray's token auth, `RAY_AUTH_MODE=token`): an embedded Ray
uses the token in `<state dir>/ray_token` (mode 0600), made on the first
start and found again on every restart; `RAY_AUTH_TOKEN_PATH` points Ray and
every process it starts (GCS, raylet, workers) at it, so only holders of the
token can connect, submit work or call the controller. A join
(`--ray-address`) authenticates as the cluster's other nodes do, with the
`RAY_AUTH_MODE` and `RAY_AUTH_TOKEN` / `RAY_AUTH_TOKEN_PATH` of the
environment, which this module leaves as they are.

Environment: an embedded Ray's processes, replicas included, start with
`vocabulary.replicas.replica_env.inherited` of this process's environment (an
allow-list: never the agent's `GITOPS_*` settings and secrets), not all of
it. The variables left out are taken away only while `ray.init` starts GCS
and raylet (the raylet passes its environment on to every worker it
starts) and put back right after, for the agent itself. A joined cluster's
processes have the environment their nodes were started with.

Ports: an embedded Ray's GCS and worker ports are Ray's random choice unless
`gitops run --ray-port` / `--ray-min-worker-port` / `--ray-max-worker-port`
(`gitops.process.ray_ports`) chose them.
"""

from __future__ import annotations

import logging
import os
import secrets
import signal
import stat
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Iterable, Iterator, Mapping

from vocabulary.replicas.replica_env import inherited
from vocabulary.control.goal_api import DEFAULT_NAMESPACE

__all__ = [
    "init_ray", "shutdown_ray", "ray_token_path", "ray_endpoints", "descendants", "mute_pushed_errors", "TOKEN_FILE",
]

TOKEN_FILE = "ray_token"

_QUIET_ENV = {
    "RAY_USAGE_STATS_ENABLED": "0",
    "RAY_worker_maximum_startup_concurrency": "16",
    # Ray prints a deduplication notice and progress bars otherwise.
    "RAY_DEDUP_LOGS": "0",
    # Ray 2.60's default; older releases of the supported range warn on every
    # start until it is set, and would hide GPUs from num_gpus=0 actors.
    "RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO": "0",
}


def init_ray(
    address: str | None = None,
    namespace: str = DEFAULT_NAMESPACE,
    state_dir: Path | None = None,
    replica_env: Iterable[str] = (),
    gcs_port: int | None = None,
    worker_ports: tuple[int, int] | None = None,
) -> None:
    """Connect this process to Ray: join `address`, or start a local instance.

    A local instance's token is kept in `state_dir` (without one, Ray's own
    default, `~/.ray/auth_token`); its processes inherit only the allow-listed
    part of this process's environment, plus the names `replica_env` adds; its
    GCS listens on `gcs_port` and its workers take ports in `worker_ports`
    (lowest, highest) when given, else on ports Ray picks; it runs no log
    monitor, which only relays workers' output to a driver that asks for it.
    """
    import ray

    from controller.shell.ray_private import local_ray_params

    for key, value in _QUIET_ENV.items():
        os.environ.setdefault(key, value)
    if ray.is_initialized():
        return
    options: dict = {
        "namespace": namespace,
        "logging_level": logging.ERROR,
        "log_to_driver": False,
    }
    if address is None:
        _embedded_token_auth(state_dir)
        # "local": always a new instance; Ray would otherwise join whatever
        # `ray start` left in /tmp/ray/ray_current_cluster on this machine.
        options["address"] = "local"
        options["include_dashboard"] = False
    else:
        options["address"] = address
    try:
        with _only(inherited(os.environ, replica_env) if address is None else os.environ):
            # No log monitor: it only relays workers' output to a driver that asks (this one does
            # not: `log_to_driver`), and it globs the session's log directory ten times a second,
            # at a cost that grows with every worker started (150 s of CPU in a test session of
            # about 400 replicas).
            with local_ray_params(gcs_port, worker_ports, log_monitor=False) if address is None else nullcontext():
                ray.init(**options)
    except ConnectionError as error:
        if _refused_for_auth(error):
            raise ConnectionError(
                f"Ray at {address} refused this process's token: start it with the RAY_AUTH_MODE=token and "
                "RAY_AUTH_TOKEN or RAY_AUTH_TOKEN_PATH the cluster uses"
            ) from None
        raise


@contextmanager
def _only(environment: Mapping[str, str]) -> Iterator[None]:
    """This process's environment without what `environment` leaves out, for the block.

    Variables set meanwhile (Ray sets its own) stay; the ones taken away come back.
    """
    removed = {name: value for name, value in os.environ.items() if name not in environment}
    for name in removed:
        del os.environ[name]
    try:
        yield
    finally:
        os.environ.update(removed)


def ray_token_path(state_dir: Path) -> Path:
    """The embedded cluster's token file (absolute), created (0600) if it is not there yet."""
    path = state_dir.absolute() / TOKEN_FILE  # Ray's workers start in other directories
    state_dir.mkdir(parents=True, exist_ok=True)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        if stat.S_IMODE(path.stat().st_mode) & 0o077:
            path.chmod(0o600)
        if path.read_text().strip():
            return path
        fd = os.open(path, os.O_WRONLY | os.O_TRUNC)
    with os.fdopen(fd, "w") as file:
        file.write(secrets.token_hex(32))  # 256 bits, as Ray's own generator
    return path


def _embedded_token_auth(state_dir: Path | None) -> None:
    from ray._raylet import AuthenticationTokenLoader, Config  # type: ignore[attr-defined]  # compiled; not in its .pyi

    os.environ["RAY_AUTH_MODE"] = "token"
    if state_dir is not None:
        os.environ["RAY_AUTH_TOKEN_PATH"] = str(ray_token_path(state_dir))
        os.environ.pop("RAY_AUTH_TOKEN", None)  # it would win over the file
    # Ray read its config when first imported; make it see token mode and this token.
    Config.initialize("")
    AuthenticationTokenLoader.instance().reset_cache()


def _refused_for_auth(error: BaseException | None) -> bool:
    """Whether Ray's connection error comes from its token check (Ray nests the reason)."""
    while error is not None:
        if type(error).__name__ == "AuthenticationError" or "InvalidAuthToken" in str(error):
            return True
        error = error.__cause__ or error.__context__
    return False


def shutdown_ray() -> None:
    import ray

    if ray.is_initialized():
        ray.shutdown()


def kill_embedded_ray() -> None:
    """After the Ray this process started lost a part (its GCS or raylet died):
    kill what is left of it, without asking the dead parts anything, so no
    orphan outlives the agent. Ray's node kills what it started (GCS, raylet,
    dashboard); the raylet's own children (its agents, the workers) are this
    process's descendants too, and are killed with them."""
    from controller.shell.ray_private import kill_local_ray, started_local_ray

    if not started_local_ray():
        return
    left = descendants(os.getpid())
    kill_local_ray()
    for pid in left:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:  # gone already
            continue


def descendants(pid: int) -> set[int]:
    """Every process below `pid`, from /proc (empty where there is none)."""
    children: dict[int, list[int]] = {}
    proc = Path("/proc")
    for entry in proc.iterdir() if proc.is_dir() else ():
        if entry.name.isdigit():
            try:
                parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(parent, []).append(int(entry.name))
    found, todo = set(), [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.add(child)
            todo.append(child)
    return found


def ray_endpoints() -> tuple[str, str]:
    """This process's Ray: the GCS address and the local raylet's socket (for a liveness watch)."""
    import ray

    context = ray.get_runtime_context()
    node_id = context.get_node_id()
    raylet = next(node["RayletSocketName"] for node in ray.nodes() if node["NodeID"] == node_id)
    return context.gcs_address, raylet


def local_node_ip() -> str:
    """The address Ray knows this process's node by (where `--proxy-host node-ip` listens here)."""
    import ray

    return ray.util.get_node_ip_address()


def mute_pushed_errors() -> None:
    """From now on, this driver prints none of the errors Ray pushes to it (a
    failed actor task's traceback): the agent says what such a failure means."""
    from controller.shell.ray_private import mute_pushed_errors as mute

    mute()
