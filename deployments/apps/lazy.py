"""A backend that costs nothing while idle: it scales to zero replicas.

Loading a model takes time (`load_s`, simulated here); `cold_start_timeout_s`
in deployments/lazy.toml lets the proxy hold the first request while the
autoscaler starts a replica, instead of refusing it.
"""

from __future__ import annotations

import os
import time

from starlette.requests import Request


class LazyModel:
    def __init__(self, load_s: float = 1.0) -> None:
        time.sleep(load_s)  # e.g. reading weights from disk
        self.started_at = time.time()

    async def __call__(self, request: Request) -> dict[str, float | int]:
        return {"pid": os.getpid(), "started_at": self.started_at}
