"""Any proxy worker of a node answers the node's shadow mismatches, never a dead worker's.

The other worker is a real process recording into the same private directory,
as a second proxy worker of the node does; this test's process is the worker
that is asked.
"""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import time
from pathlib import Path

from proxy.observability.node_mismatches import NodeMismatchLog
from proxy.observability.shadow_compare import Mismatch
from proxy.shell.shared_ports import private_dir

ROOT = Path(__file__).resolve().parents[2]
OTHER_WORKER = """
import asyncio, sys
from proxy.observability.node_mismatches import NodeMismatchLog
from proxy.observability.shadow_compare import Mismatch

async def main():
    log = NodeMismatchLog(sys.argv[1])
    for at in (10.0, 30.0):
        log.record(Mismatch(at, "api", "v2", f"/other/{at:g}", 200, 500, "status"))
    await asyncio.sleep(0.5)  # past the write delay
    print("recorded", flush=True)
    sys.stdin.read()

asyncio.run(main())
"""


def other_worker(directory: Path) -> subprocess.Popen[str]:
    process = subprocess.Popen([sys.executable, "-c", OTHER_WORKER, str(directory)], cwd=ROOT,
                               stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert process.stdout is not None and process.stdout.readline() == "recorded\n"
    return process


def own_log(directory: Path) -> NodeMismatchLog:
    log = NodeMismatchLog(str(directory))

    async def record() -> None:
        log.record(Mismatch(20.0, "api", "v2", "/own", 200, 200, "$.n: 1 != 2"))

    asyncio.run(record())
    return log


def test_the_asked_worker_answers_every_live_worker_s_mismatches_newest_first(tmp_path: Path) -> None:
    directory = tmp_path / "node"
    private_dir(str(directory))
    other = other_worker(directory)
    try:
        log = own_log(directory)
        assert [m.path for m in log.recent()] == ["/other/30", "/own", "/other/10"]
    finally:
        other.kill()
        other.wait()


def test_a_dead_worker_s_mismatches_go_with_it_and_its_file_is_removed(tmp_path: Path) -> None:
    directory = tmp_path / "node"
    private_dir(str(directory))
    other = other_worker(directory)
    other.send_signal(signal.SIGKILL)
    other.wait()
    log = own_log(directory)
    assert [m.path for m in log.recent()] == ["/own"]
    assert [p.name for p in directory.glob("mismatches_*.json")] == []  # this worker's own is not written yet


def test_a_worker_s_mismatches_reach_its_file_shortly_after_they_happen(tmp_path: Path) -> None:
    directory = tmp_path / "node"
    private_dir(str(directory))

    async def scenario() -> list[str]:
        log = NodeMismatchLog(str(directory))
        log.record(Mismatch(1.0, "api", "v2", "/a", 200, 500, "status"))
        log.record(Mismatch(2.0, "api", "v2", "/b", 200, 500, "status"))
        deadline = time.monotonic() + 10
        while not list(directory.glob("mismatches_*.json")) and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        return [p.read_text() for p in directory.glob("mismatches_*.json")]

    written = asyncio.run(scenario())
    assert len(written) == 1 and '"/b"' in written[0] and '"/a"' in written[0]
