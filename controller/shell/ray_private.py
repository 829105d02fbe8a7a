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
- `mute_pushed_errors`: stop this driver printing the errors Ray pushes to it.

Every other module uses Ray's public API only (a pure test checks it).
"""

from __future__ import annotations

import inspect
import logging
import os
from typing import Any

import ray
from ray._private.runtime_env.working_dir import upload_working_dir_if_needed

__all__ = [
    "upload_working_dir", "available_resources_per_node", "session_dir", "started_local_ray", "kill_local_ray",
    "mute_pushed_errors",
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
