"""Private directories no other local user can squat or swap (issue 27, row 11).

Run as a separate process with its own temp dir (TMPDIR), where another user
(uid 65534, as root can arrange) made the names this user's processes would
use first: the old `gitops-proxy-ports-<uid>` and the private base's first
candidate. A proxy worker must still claim its port, its group must still
get a shared directory, and a replica's data socket must go under the same
private base: all of it 0700, owned by this user, never the squatter's.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SQUATTER = 65534

SCRIPT = """
import json, os, socket
from proxy.shell import shared_ports
from replica.host import _socket_bases
from datalink.private_dirs import private_base

probe = socket.socket(); probe.bind(("127.0.0.1", 0)); port = probe.getsockname()[1]; probe.close()
fd = shared_ports.claim("127.0.0.1", port, "group-a")
group = shared_ports.group_dir("group-a")
base = private_base().path
info = os.stat(base)
print(json.dumps({"claimed": fd >= 0, "base": base, "group": group, "socket_base": _socket_bases()[0],
                  "base_uid": info.st_uid, "base_mode": info.st_mode & 0o777,
                  "group_mode": os.stat(group).st_mode & 0o777}))
"""


@pytest.mark.skipif(os.getuid() != 0, reason="making a directory as another user needs root")
def test_row11_names_another_user_made_first_do_not_stop_proxy_workers_and_private_dirs_stay_ours(
    tmp_path: Path,
) -> None:
    temp = tmp_path / "tmp"
    temp.mkdir()
    temp.chmod(0o1777)  # a temp dir as /tmp is: world-writable, sticky
    uid = os.getuid()
    for name in (f"gitops-proxy-ports-{uid}", f"ray-gitops-{uid}"):
        squatted = temp / name
        squatted.mkdir(mode=0o777)
        squatted.chmod(0o777)
        os.chown(squatted, SQUATTER, SQUATTER)
    env = {**os.environ, "TMPDIR": str(temp), "PYTHONPATH": str(ROOT)}
    env.pop("XDG_RUNTIME_DIR", None)
    done = subprocess.run([sys.executable, "-c", SCRIPT], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["claimed"] is True
    # Passed over the squatted name for the next candidate, which is this user's and nobody else's.
    assert seen["base"] == str(temp / f"ray-gitops-{uid}-1"), seen
    assert seen["base_uid"] == uid and seen["base_mode"] == 0o700, seen
    assert seen["group"].startswith(seen["base"] + os.sep) and seen["group_mode"] == 0o700, seen
    # The replica's data socket goes there too, not into Ray's session dir.
    assert seen["socket_base"] == seen["base"], seen
    for name in (f"gitops-proxy-ports-{uid}", f"ray-gitops-{uid}"):
        assert list((temp / name).iterdir()) == []  # nothing of ours went into the squatter's directories


def test_row11_a_symlink_or_a_public_directory_is_never_taken_as_the_private_base(tmp_path: Path) -> None:
    from datalink.private_dirs import private_base

    uid = os.getuid()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir(mode=0o700)
    (tmp_path / f"ray-gitops-{uid}").symlink_to(elsewhere)  # planted: points at a directory of theirs
    public = tmp_path / f"ray-gitops-{uid}-1"
    public.mkdir()
    public.chmod(0o755)
    base = private_base(environ={}, temp_dir=str(tmp_path))
    try:
        assert base.path == str(tmp_path / f"ray-gitops-{uid}-2")
        assert os.fstat(base.fd).st_mode & 0o777 == 0o700
    finally:
        os.close(base.fd)
