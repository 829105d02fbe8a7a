"""Starts a Ray worker that has a runtime environment, without importing Ray first.

The raylet starts every worker whose runtime environment is not empty (a
replica's `working_dir` or `env_vars`: every replica a repository deploys)
through a setup script: `python <setup_worker.py> <worker command>
--serialized-runtime-env-context=JSON --language=NAME`. Ray's own script
imports `ray` (about 0.4 s of CPU) only to read that JSON, set the variables
it names and exec the worker, which imports `ray` again: a replica's start
cost it twice. This one does the same with the standard library alone, for the
local Ray the agent starts (`controller.shell.ray_private.local_ray_params`
points the raylet at it). Its file name must stay `setup_worker.py`: the
raylet finds the script in a worker's command by that name, to leave it out
for workers without a runtime environment.

What it reproduces of Ray's `setup_worker.py` and
`ray._private.runtime_env.context.RuntimeEnvContext.exec_worker` (checked
against the installed Ray before it is used, and by a component test that
compares the commands both exec): the same parser, `${NAME}` expansion in
the context's variables, and `exec` of the worker with the context's command
prefix and Python under `bash -c`. Anything but a Python worker is handed to
Ray's own script unchanged.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import sys
from importlib.util import find_spec
from typing import Any, Mapping, NoReturn, Sequence

# The keys of a serialized RuntimeEnvContext (its constructor's parameters), which
# `ray_private.setup_worker_fits` checks against the installed Ray before this script is used.
CONTEXT_KEYS = frozenset({"command_prefix", "env_vars", "py_executable", "override_worker_entrypoint", "java_jars"})


def parser() -> argparse.ArgumentParser:
    """Ray's setup-script parser: the two options the raylet adds; the rest is the worker's command."""
    parsed = argparse.ArgumentParser(description="Set up the environment for a Ray worker and launch the worker.")
    parsed.add_argument("--serialized-runtime-env-context", type=str,
                        help="the serialized runtime env context")
    parsed.add_argument("--language", type=str, help="the language type of the worker")
    return parsed


def set_variables(env_vars: Mapping[str, str]) -> None:
    """Set the context's variables in this process's environment, in their order, each
    with `$NAME` / `${NAME}` expanded from the environment so far and a `${NAME}` it
    lacks made empty: Ray's `update_envs`."""
    for key, value in env_vars.items():
        os.environ[key] = re.sub(r"\$\{[A-Z0-9_]+\}", "", os.path.expandvars(value))


def worker_command(context: Mapping[str, Any], passthrough: Sequence[str], python: str) -> str:
    """The shell command that execs a Python worker for `context` (a deserialized RuntimeEnvContext)."""
    args = list(passthrough)
    if context.get("override_worker_entrypoint"):
        args[0] = context["override_worker_entrypoint"]
    executable = ["exec", context.get("py_executable") or python]
    return " ".join([*(context.get("command_prefix") or []), *executable, *(shlex.quote(a) for a in args)])


def main(argv: Sequence[str]) -> NoReturn:
    args, passthrough = parser().parse_known_args(argv)
    if args.language != "PYTHON" or sys.platform != "linux":
        _ray_own(argv)
    context = json.loads(args.serialized_runtime_env_context or "{}")
    set_variables(context.get("env_vars") or {})
    os.execvp("bash", ["bash", "-c", worker_command(context, passthrough, sys.executable)])


def _ray_own(argv: Sequence[str]) -> NoReturn:
    """Hand the worker to Ray's own setup script (a Java or C++ worker)."""
    spec = find_spec("ray")  # finds the package without running it
    assert spec is not None and spec.origin is not None
    script = os.path.join(os.path.dirname(spec.origin), "_private", "workers", "setup_worker.py")
    os.execv(sys.executable, [sys.executable, script, *argv])


if __name__ == "__main__":
    main(sys.argv[1:])
