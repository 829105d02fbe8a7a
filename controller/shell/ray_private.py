"""Every use of Ray's private API (`ray._private`), in one place.

Owns what the supported Ray range (docs/guides/operations.md, "Ray versions") has no public call
for, so a Ray upgrade that moves one of them breaks here and nowhere else:
- `upload_working_dir`: package and upload a local `working_dir` to the GCS
  (Ray takes local directories only at job level);
- `available_resources_per_node`: what each node has free now;
- `session_dir`: this Ray session's directory, through the public runtime
  context where Ray has `get_session_name` (2.53 and later);
- `started_local_ray`, `kill_local_ray`: whether this process started its
  local Ray, and killing what it started;
- `mute_pushed_errors`: stop this driver printing the errors Ray pushes to it;
- `local_ray_params`: what `ray.init` cannot say of the local Ray it starts
  and `ray start` can: the GCS port, the worker port range, the log monitor;
  and the script that starts its workers with a runtime environment
  (`controller.shell.setup_worker`, used where `setup_worker_fits` says it
  does what Ray's own would).

Every other module uses Ray's public API only (a pure test checks it).
"""

from __future__ import annotations

import inspect
import logging
import os
from contextlib import contextmanager
from typing import Any, Iterator

import ray
from ray._private.runtime_env.working_dir import upload_working_dir_if_needed

from controller.shell import setup_worker

__all__ = [
    "upload_working_dir", "available_resources_per_node", "session_dir", "started_local_ray", "kill_local_ray",
    "mute_pushed_errors", "local_ray_params", "setup_worker_fits",
]

# Honour the export's .gitignore files on every supported Ray: later releases
# ask for it with a required `include_gitignore`, 2.52 has no such keyword
# and always honours them.
_TAKES_GITIGNORE = "include_gitignore" in inspect.signature(upload_working_dir_if_needed).parameters


def upload_working_dir(working_dir: str, logger: logging.Logger) -> str:
    """The URI of `working_dir` packaged and uploaded to the GCS (once per content)."""
    env = {"working_dir": working_dir}
    if _TAKES_GITIGNORE:
        packed = upload_working_dir_if_needed(env, logger=logger, include_gitignore=True)
    else:
        packed = upload_working_dir_if_needed(env, logger=logger)  # type: ignore[call-arg]  # Ray 2.52's signature
    uri: str = packed["working_dir"]
    return uri


def available_resources_per_node() -> dict[str, dict[str, float]]:
    """Each node's free resources, by node id, as the GCS last heard them."""
    per_node: dict[str, dict[str, float]] = ray._private.state.available_resources_per_node()
    return per_node


def session_dir() -> str:
    """This Ray session's directory (removed with the session); Ray gives every
    node the head's temp dir, so the path is the same on every node."""
    context = ray.get_runtime_context()
    if hasattr(context, "get_session_name"):
        return os.path.join(context.get_temp_dir(), context.get_session_name())
    node = ray._private.worker.global_worker.node
    if node is None:
        raise RuntimeError("Ray is not initialized in this process")
    path: str = node.get_session_dir_path()
    return path


def started_local_ray() -> bool:
    """This process started the local Ray it is connected to (it did not join one)."""
    node: Any = ray._private.worker.global_worker.node
    return node is not None and bool(node.head)


def kill_local_ray() -> None:
    """Kill what this process's local Ray started (GCS, raylet, dashboard),
    without asking the parts anything."""
    node = ray._private.worker.global_worker.node
    if node is not None:
        node.kill_all_processes(check_alive=False, allow_graceful=False)


def mute_pushed_errors() -> None:
    """From now on, this driver prints none of the errors Ray pushes to it.

    Ray prints them through the function that prints its workers' logs, which
    its own switch turns off (the agent runs with `log_to_driver=False`, so it
    prints nothing else)."""
    import ray._private.worker

    ray._private.worker._worker_logs_enabled = False


@contextmanager
def local_ray_params(gcs_port: int | None, worker_ports: tuple[int, int] | None, log_monitor: bool) -> Iterator[None]:
    """While in the block, a local Ray that `ray.init` starts listens with its
    GCS on `gcs_port` and gives its workers ports in `worker_ports` (both
    included), and runs a log monitor only when `log_monitor`: the parameters
    `ray start --port --min-worker-port --max-worker-port --include-log-monitor`
    set, which `ray.init` builds without them. Its workers with a runtime
    environment start through `controller.shell.setup_worker` where it fits
    this Ray (a replica's start then takes about a third less CPU: Ray's own
    script imports all of Ray before the worker does)."""
    from ray._private import parameter

    original = parameter.RayParams

    class _Chosen(original):  # type: ignore[misc, valid-type]
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            if gcs_port is not None:
                kwargs["gcs_server_port"] = gcs_port
            if worker_ports is not None:
                kwargs["min_worker_port"], kwargs["max_worker_port"] = worker_ports
            kwargs["include_log_monitor"] = log_monitor
            if setup_worker_fits():
                kwargs["setup_worker_path"] = setup_worker.__file__
            super().__init__(*args, **kwargs)

    parameter.RayParams = _Chosen  # type: ignore[misc]
    try:
        yield
    finally:
        parameter.RayParams = original  # type: ignore[misc]


def setup_worker_fits() -> bool:
    """Whether `controller.shell.setup_worker` reads what the installed Ray's raylet gives its
    setup script: the same two options, and a runtime-env context of the same fields."""
    from ray._private.runtime_env.context import RuntimeEnvContext
    from ray._private.workers import setup_worker as rays

    options = {option for action in rays.parser._actions for option in action.option_strings}
    fields = set(inspect.signature(RuntimeEnvContext.__init__).parameters) - {"self"}
    ours = {option for action in setup_worker.parser()._actions for option in action.option_strings}
    return options == ours and fields == set(setup_worker.CONTEXT_KEYS)
