"""A stand-in for a tensor-parallel engine, for tests/real/test_placement.py: the replica
says where it runs and what GPUs it sees, and starts one worker task that asks for a GPU
as an engine's worker would (it must run inside the replica's placement group)."""

from __future__ import annotations

import os

import ray
from ray.util import get_current_placement_group


@ray.remote(num_gpus=1, num_cpus=0)
def engine_worker() -> dict:
    group = get_current_placement_group()
    return {
        "node": ray.get_runtime_context().get_node_id(),
        "cuda": os.environ.get("CUDA_VISIBLE_DEVICES", ""),
        "group": group.id.hex() if group else None,
    }


class Engine:
    def __init__(self) -> None:
        self.worker = ray.get(engine_worker.remote(), timeout=60)

    async def __call__(self, request):
        group = get_current_placement_group()
        return {
            "pid": os.getpid(),
            "node": ray.get_runtime_context().get_node_id(),
            "cuda": os.environ.get("CUDA_VISIBLE_DEVICES", ""),
            "gpu_ids": [str(g) for g in ray.get_gpu_ids()],
            "group": group.id.hex() if group else None,
            "worker": self.worker,
        }
