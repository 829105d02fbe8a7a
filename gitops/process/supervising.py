"""Keeps `gitops run --ray-address` running when its Ray cluster restarts,
and ends `gitops run` without it when the Ray it started itself dies.

A Ray driver cannot outlive its cluster: once the cluster's GCS or the
node's raylet is gone, the driver's Ray calls hang or the process is ended.
So `gitops run` joined to a cluster runs the agent in a child process, the
child watches Ray (`watch_ray`: the GCS port and the local raylet socket
answer) and exits with `RAY_LOST_EXIT` when they stop answering, and the
parent starts it again, with backoff (`restart_delay_s`, pure): the new
agent joins the cluster as soon as it is back, starts the controller (which
starts the proxies) and re-applies the newest commit from git. Each loss and
restart is one log line in the agent's format. An agent that started its
own Ray (no `--ray-address`) watches it the same way; when it dies the agent
says so in one line, kills what is left of that Ray and exits with
`RAY_LOST_EXIT`, for its process supervisor (systemd `Restart=on-failure`,
a container's restart policy) to start it again with a fresh Ray, since a
driver cannot start a new Ray under itself. Owns that loop only; the
agent is unchanged. Must not: restart an agent that failed for another
reason (bad flags, a taken port, a refused join: the user must see that at
once) or one stopped by the user; once restarting, it keeps trying while the
cluster is still away.
"""

from __future__ import annotations

import ctypes
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from typing import Callable, Sequence

from gitops.redaction import redact

__all__ = ["ARGV_ENV", "CHILD_ENV", "RAY_LOST_EXIT", "restart_delay_s", "supervise", "watch_ray"]

RAY_LOST_EXIT = 75  # EX_TEMPFAIL: the child lost Ray; start it again
_WATCH_PERIOD_S = 1.0
_MISSES_BEFORE_LOST = 2

CHILD_ENV = "GITOPS_SUPERVISED"  # set in the child: it runs the agent itself
# The child's true command line travels here, so that its argv (which `ps`
# shows to everyone) carries no credential; `gitops.cli.main` reads it back.
ARGV_ENV = "GITOPS_SUPERVISED_ARGV"
_RESTARTS_ENV = "GITOPS_AGENT_RESTARTS"
_LOG = logging.getLogger("gitops.run")
_HEALTHY_S = 60.0  # ... and one that lived this long starts the backoff again from the base
_BASE_S, _MAX_S = 0.5, 10.0


def restart_delay_s(failures: int, base_s: float = _BASE_S, max_s: float = _MAX_S) -> float:
    """Seconds to wait before start number `failures` + 1 of a failing agent."""
    return min(base_s * 2 ** max(failures - 1, 0), max_s)


def supervise(argv: Sequence[str], ray_address: str) -> int:
    """Run `gitops run` (argv) in a child until it ends cleanly; returns its exit code."""
    stopping = False
    child: subprocess.Popen[bytes] | None = None

    def forward(signum: int, _frame: object) -> None:
        nonlocal stopping
        stopping = True
        if child is not None and child.poll() is None:
            child.send_signal(signum)

    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, forward)
    restarts, failures = 0, 0
    while True:
        started = time.monotonic()
        child = subprocess.Popen(
            [sys.executable, "-m", "gitops", *(redact(arg) for arg in argv)],
            env={**os.environ, CHILD_ENV: "1", _RESTARTS_ENV: str(restarts), ARGV_ENV: json.dumps(list(argv))},
            preexec_fn=_die_with_parent,
        )
        code = child.wait()
        lived_s = time.monotonic() - started
        if stopping or code == 0 or (code != RAY_LOST_EXIT and restarts == 0):
            return code
        failures = 1 if lived_s >= _HEALTHY_S else failures + 1
        delay = restart_delay_s(failures)
        restarts += 1
        _LOG.warning(
            f"gitops: lost Ray at {ray_address} (the agent process exited with {_exit_text(code)}); "
            f"Ray restarted or unreachable: starting the agent again in {delay:.1f} s (restart {restarts}), "
            "it re-creates the controller and proxies and re-applies the newest commit"
        )
        time.sleep(delay)
        if stopping:
            return code


_PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:
    """Run in the child before it starts: the kernel kills it when the
    supervisor dies, so a supervisor killed with SIGKILL leaves no orphan
    agent holding the state dir's lock (Linux; elsewhere a no-op)."""
    if sys.platform == "linux":
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


def _exit_text(code: int) -> str:
    if code == RAY_LOST_EXIT:
        return "Ray unreachable"
    return f"signal {signal.Signals(-code).name}" if code < 0 else f"code {code}"


def watch_ray(
    gcs_address: str, raylet_socket: str | None, exit_process: Callable[[int], None] = os._exit,
    embedded: Callable[[], None] | None = None,
) -> threading.Event:
    """In the agent (child): end the process when Ray stops answering (a daemon thread).

    Ray's own calls would hang on a cluster that went away, and cannot be
    cancelled; ending the process is the one clean way out. `embedded`: the
    agent started this Ray; called before exiting, to kill what is left of it.
    Returns the event that ends the watch: set it before stopping Ray on purpose.
    """
    stopped = threading.Event()
    host, _, port = gcs_address.rpartition(":")

    def answers() -> bool:
        try:
            socket.create_connection((host, int(port)), timeout=1.0).close()
            if raylet_socket:
                with socket.socket(socket.AF_UNIX) as unix:
                    unix.settimeout(1.0)
                    unix.connect(raylet_socket)
        except OSError:
            return False
        return True

    def watch() -> None:
        misses = 0
        while misses < _MISSES_BEFORE_LOST:
            if stopped.wait(_WATCH_PERIOD_S):
                return
            misses = 0 if answers() else misses + 1
        if stopped.is_set():
            return
        if embedded is None:
            _LOG.warning(f"gitops: Ray at {gcs_address} stopped answering; this agent process ends to start afresh")
        else:
            _LOG.error(
                f"gitops: the Ray this agent started (GCS {gcs_address}) died; serving stopped. Exiting with "
                f"{RAY_LOST_EXIT} so that a process supervisor starts the agent again with a fresh Ray"
            )
            embedded()
        exit_process(RAY_LOST_EXIT)

    threading.Thread(target=watch, name="ray-watch", daemon=True).start()
    return stopped
