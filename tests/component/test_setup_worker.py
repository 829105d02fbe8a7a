"""The setup script of the agent's local Ray (controller.shell.setup_worker) does what Ray's own does:
for each runtime-env context, the same variables set and the same worker command exec'd."""

from __future__ import annotations

import json
import os
from typing import Any

import pytest
from ray._private.runtime_env.context import RuntimeEnvContext
from ray._private.workers import setup_worker as rays
from ray.core.generated.common_pb2 import Language

from controller.shell import setup_worker
from controller.shell.ray_private import setup_worker_fits

WORKER = ["/venv/lib/ray/_private/workers/default_worker.py", "--node-ip-address=127.0.0.1",
          "--node-manager-port=RAY_NODE_MANAGER_PORT_PLACEHOLDER", "--object-store-name=/tmp/a b/plasma",
          "--worker-launch-time-ms=1", "--language=PYTHON"]
CONTEXTS = {
    "empty": {},
    "working dir and variables": {
        "env_vars": {"PYTHONPATH": "/tmp/ray/pkg_1:${PYTHONPATH}", "A": "${HOME}/x", "B": "$A-y",
                     "GONE": "${NO_SUCH_VARIABLE}z", "KEPT": "$no_such_lower", "QUOTED": "it's \"here\""},
    },
    "prefix and python": {"command_prefix": ["source", "/opt/env/activate", "1>&2", "&&"],
                          "py_executable": "/opt/env/bin/python3"},
    "entrypoint": {"override_worker_entrypoint": "/container/default_worker.py", "java_jars": ["/j"]},
}


class Exec(Exception):
    """What an exec would have run, in place of running it."""


def _run(monkeypatch: pytest.MonkeyPatch, start: Any) -> tuple[tuple[Any, ...], dict[str, str]]:
    """What `start` execs and the environment it leaves, from the same environment each time."""
    def execvp(file: str, args: list[str]) -> None:
        raise Exec(file, args)

    environ = {"PATH": "/usr/bin", "HOME": "/home/user", "PYTHONPATH": "/site"}
    monkeypatch.setattr(os, "execvp", execvp)
    monkeypatch.setattr(os, "environ", environ)  # what both read and write, a plain dict for the test
    with pytest.raises(Exec) as raised:
        start()
    return raised.value.args, environ


def test_the_installed_ray_gives_its_setup_script_what_ours_reads() -> None:
    assert setup_worker_fits()


@pytest.mark.parametrize("name", CONTEXTS)
def test_ours_sets_the_same_variables_and_execs_the_same_worker_as_rays(
        name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    argv = ["-s", *WORKER, f"--serialized-runtime-env-context={json.dumps(CONTEXTS[name])}", "--language=PYTHON"]

    def ray_own() -> None:
        args, rest = rays.parser.parse_known_args(argv)
        RuntimeEnvContext.deserialize(args.serialized_runtime_env_context).exec_worker(
            rest, Language.Value(args.language))

    theirs = _run(monkeypatch, ray_own)
    ours = _run(monkeypatch, lambda: setup_worker.main(argv))
    assert ours == theirs
    assert theirs[0][0] == "bash" and "exec" in theirs[0][1][2]  # the comparison saw a real exec


def test_a_worker_of_another_language_is_handed_to_rays_own_script(monkeypatch: pytest.MonkeyPatch) -> None:
    def execv(path: str, args: list[str]) -> None:
        raise Exec(path, args)

    monkeypatch.setattr(os, "execv", execv)
    argv = ["io.ray.runtime.runner.worker.DefaultWorker", "--serialized-runtime-env-context={}", "--language=JAVA"]
    with pytest.raises(Exec) as raised:
        setup_worker.main(argv)
    _, args = raised.value.args
    assert args[1] == rays.__file__ and args[2:] == argv
