"""A replica whose backend sets `ray_actor_options.memory` caps its own process before user code loads:
a constructor allocating past it fails the start with a clear reason, one
allocating within it starts. Each case runs in a process of its own (the cap
is an rlimit of the whole process, never this test runner's)."""

from __future__ import annotations

import subprocess
import sys

import pytest

MiB = 2**20
SCRIPT = '''
import asyncio, resource, sys
from replica.host import MemoryLimitExceeded, Replica, private_memory_bytes
from vocabulary.spec.backends import BackendConfig

class Hog:
    def __init__(self, size):
        self.blob = bytearray(size)

    def __call__(self, request):
        return "ok"

async def main(size, limit):
    config = BackendConfig(name="hog", version="v1", import_path="__main__:Hog", init_args=(size,),
                           ray_actor_options={"memory": limit})
    replica = Replica(config, "hog#1")
    held = private_memory_bytes()
    try:
        await replica.initialize()
    except MemoryLimitExceeded as err:
        print("refused:", err)
    else:
        print("started")
    soft, _ = resource.getrlimit(resource.RLIMIT_DATA)
    print("cap above what it held:", soft - held)

asyncio.run(main(int(sys.argv[1]), int(sys.argv[2])))
'''


def _start(size: int, limit: int) -> list[str]:
    done = subprocess.run([sys.executable, "-c", SCRIPT, str(size), str(limit)],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="RLIMIT_DATA counts memory on Linux only")
def test_a_constructor_allocating_past_the_limit_fails_the_start_naming_the_limit() -> None:
    refused, cap = _start(512 * MiB, 64 * MiB)
    assert refused == ("refused: __main__:Hog allocated past the replica's memory limit "
                       f"(ray_actor_options.memory = {64 * MiB} bytes) in its constructor")
    # The cap is what the process held before user code plus the limit (give or take what loading took).
    assert abs(int(cap.rsplit(" ", 1)[1]) - 64 * MiB) <= 16 * MiB, cap


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="RLIMIT_DATA counts memory on Linux only")
def test_a_constructor_allocating_within_the_limit_starts() -> None:
    assert _start(16 * MiB, 64 * MiB)[0] == "started"
