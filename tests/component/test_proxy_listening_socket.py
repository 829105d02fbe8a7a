"""A proxy worker's listening socket leaves the port's group when the worker does.

The node's workers share the HTTP port by SO_REUSEPORT: the kernel hashes
each new connection to one listening socket of the group, and a socket
nobody accepts from holds its share until it closes. So the socket a worker
binds (`proxy.actor._bind`) must live in that worker's process alone: a
child process it starts (anything that execs) must not keep it listening
after the worker is gone.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from proxy.actor import _bind


def _listening(port: int, inode: int) -> int:
    """Sockets the kernel lists as listening on 127.0.0.1:`port` with our socket's inode
    (other work on this machine may listen on the same port number elsewhere)."""
    with open("/proc/net/tcp") as table:
        rows = [line.split() for line in list(table)[1:]]
    here = f"0100007F:{port:04X}"
    return sum(1 for row in rows if row[1] == here and row[3] == "0A" and int(row[9]) == inode)


def test_a_child_of_a_worker_does_not_keep_the_worker_s_listening_socket(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir(mode=0o700)
    sock = _bind("127.0.0.1", 0, str(shared))
    sock.listen()
    port, inode = sock.getsockname()[1], os.fstat(sock.fileno()).st_ino
    # close_fds=False: a child that inherits whatever the worker lets it (as os.system or any exec would).
    child = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE,
                             close_fds=False)
    try:
        assert _listening(port, inode) == 1
        sock.close()  # the worker is gone
        # No socket left in the group for the kernel to send connections to (on a loaded
        # machine the kernel's table may lag the close by a moment: asked again for up to 2 s).
        deadline = time.monotonic() + 2.0
        while _listening(port, inode) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert _listening(port, inode) == 0
    finally:
        child.communicate(b"")
    assert child.returncode == 0
