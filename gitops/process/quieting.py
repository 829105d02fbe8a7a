"""Keeps Ray's raw C++ log lines out of the agent's output.

Ray's core (the driver's core worker, talking to raylets and the GCS) writes
its own log lines straight to file descriptor 2, in its own format, e.g.
`[2026-11-23 17:51:55,636 E 19993 20056] task_manager.cc:1545: Failed to
push error to driver for task ...`, over and over while a node or the GCS
is away. `quiet_ray_output` puts a pipe in front of fd 2: lines in Ray's
format are counted and dropped (Ray keeps them in its own log files, under
the session's logs directory), everything else passes through unchanged.
What such an event means for the user is the agent's to say, once, in its
own format (a replica restart, Ray lost). `is_ray_line` is pure.

`controller.cluster.mute_pushed_errors` does the same for the errors Ray's GCS pushes to a
driver when a task of one of its actors fails ("Task ProxyActor.ready
failed. There are infinite retries remaining", with the actor's
traceback), which Ray prints on the driver's stdout: the agent says what
such a failure means (`gitops.process.proxy_start`, a replica's startup failure);
the traceback stays in the actor's own log file.
"""

from __future__ import annotations

import atexit
import os
import re
import sys
import threading

__all__ = ["is_ray_line", "quiet_ray_output"]

_DRAIN_S = 2.0

_RAY_LINE = re.compile(rb"^\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} [DIWEF] \d+ \d+\] [\w./-]+\.(?:cc|h):\d+: ")


def is_ray_line(line: bytes) -> bool:
    """Whether `line` is one of Ray's C++ log lines."""
    return _RAY_LINE.match(line) is not None


def quiet_ray_output() -> None:
    """From now on, Ray's C++ lines written to fd 2 are dropped; the rest still reaches stderr.

    At exit fd 2 is given back and everything still in the pipe is written
    out first, so a last error line is never lost.
    """
    read_end, write_end = os.pipe()
    original = os.dup(2)
    os.dup2(write_end, 2)
    os.close(write_end)

    def pump() -> None:
        with os.fdopen(read_end, "rb") as lines:
            for line in lines:
                if not is_ray_line(line):
                    os.write(original, line)

    thread = threading.Thread(target=pump, name="stderr-filter", daemon=True)
    thread.start()

    def drain() -> None:
        sys.stderr.flush()
        os.dup2(original, 2)  # closes the pipe's last write end: the pump reads to its end
        thread.join(_DRAIN_S)

    atexit.register(drain)
