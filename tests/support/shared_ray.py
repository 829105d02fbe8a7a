"""One Ray for all the xdist workers of a test run, held by a process of its own.

Each xdist worker of the real tier is a test session with a Ray of its own
(`ray_session`, tests/conftest.py) unless the runner gives the run one to
share: a Ray costs its start (about 3.5 s of CPU) and, with nothing
deployed, about a tenth of a core while it idles (its GCS, raylet,
dashboard, runtime-environment agent and autoscaler monitor: 11% of a core,
measured), so three workers paid that three times for the whole tier.

`shared_ray(cpus)` starts `python -m tests.support.shared_ray`, which starts a
local Ray as `gitops run` does (`controller.cluster.init_ray`: token auth,
the allow-listed environment, no log monitor, our worker setup script) with
`cpus` logical CPUs, prints what a process needs to join it and holds it
until its standard input closes. It yields those variables: the address in
`ADDRESS` (which `ray_session` joins, in a namespace of its own), and Ray's
token mode and token path (which the agents a test starts with
`--ray-address` inherit).
"""

from __future__ import annotations

import json
import os
import select
import shutil
import subprocess
import sys
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

__all__ = ["ADDRESS", "shared_ray"]

# The shared Ray's GCS address, for `ray_session` to join (never inherited by a replica: GITOPS_*).
ADDRESS = "GITOPS_TEST_RAY_ADDRESS"
_START_TIMEOUT_S = 120.0
_STOP_TIMEOUT_S = 60.0


@contextmanager
def shared_ray(cpus: int) -> Iterator[dict[str, str]]:
    """A Ray with `cpus` logical CPUs for the block; yields the variables that join a session to it."""
    state_dir = Path(tempfile.mkdtemp(prefix="gitops-shared-ray-"))
    holder = subprocess.Popen([sys.executable, "-m", "tests.support.shared_ray", str(state_dir), str(cpus)],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert holder.stdin is not None and holder.stdout is not None
    try:
        ready, _, _ = select.select([holder.stdout], [], [], _START_TIMEOUT_S)
        line = holder.stdout.readline() if ready else ""
        if not line:
            exited = holder.poll()
            why = f"its holder exited {exited}" if exited is not None else f"no answer in {_START_TIMEOUT_S:.0f} s"
            raise RuntimeError(f"the shared Ray did not start: {why}")
        yield json.loads(line)
    finally:
        holder.stdin.close()
        try:
            holder.wait(_STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            holder.kill()
            holder.wait()
        shutil.rmtree(state_dir, ignore_errors=True)


def _hold(state_dir: Path, cpus: int) -> None:
    import ray

    from controller.cluster import init_ray, shutdown_ray

    # The one line for the runner goes to a private copy of standard output; Ray's processes
    # inherit /dev/null there, so none can fill a pipe nobody reads any more.
    answer = os.fdopen(os.dup(1), "w")
    os.dup2(os.open(os.devnull, os.O_WRONLY), 1)
    os.environ["RAY_OVERRIDE_RESOURCES"] = json.dumps({"CPU": cpus})
    init_ray(address=None, namespace="gitops-test-shared", state_dir=state_dir)
    joining = {ADDRESS: ray.get_runtime_context().gcs_address,
               "RAY_AUTH_MODE": os.environ["RAY_AUTH_MODE"], "RAY_AUTH_TOKEN_PATH": os.environ["RAY_AUTH_TOKEN_PATH"]}
    answer.write(json.dumps(joining) + "\n")
    answer.close()
    sys.stdin.read()  # until the runner closes it (or exits)
    shutdown_ray()


if __name__ == "__main__":
    _hold(Path(sys.argv[1]), int(sys.argv[2]))
