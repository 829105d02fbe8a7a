"""A proxy worker's listening socket leaves the port's group when the worker does.

The node's workers share the HTTP port by SO_REUSEPORT: the kernel hashes
each new connection to one listening socket of the group, and a socket
nobody accepts from holds its share until it closes. So the socket a worker
binds (`proxy.actor._bind`) must live in that worker's process alone: a
child process it starts (anything that execs) must not keep it listening
after the worker is gone.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from proxy.actor import _bind


def _listening(port: int) -> int:
    """Sockets the kernel lists as listening on loopback `port`."""
    with open("/proc/net/tcp") as table:
        rows = [line.split() for line in list(table)[1:]]
    return sum(1 for row in rows if int(row[1].rsplit(":", 1)[1], 16) == port and row[3] == "0A")


def test_a_child_of_a_worker_does_not_keep_the_worker_s_listening_socket(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir(mode=0o700)
    sock = _bind("127.0.0.1", 0, str(shared))
    sock.listen()
    port = sock.getsockname()[1]
    # close_fds=False: a child that inherits whatever the worker lets it (as os.system or any exec would).
    child = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE,
                             close_fds=False)
    try:
        assert _listening(port) == 1
        sock.close()  # the worker is gone
        assert _listening(port) == 0  # no socket left in the group for the kernel to send connections to
    finally:
        child.communicate(b"")
    assert child.returncode == 0
