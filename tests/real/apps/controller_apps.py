"""User code for the controller's real-tier tests, shipped as a working_dir.

Behaviour is chosen by init args / user_config so one module covers every
scenario: a healthy echo, a constructor that raises, a health check that
flips to failing through a marker file, a slow request for draining.
"""

from __future__ import annotations

import asyncio
import os


class Echo:
    def __init__(self, tag: str = "v1") -> None:
        self.tag = tag
        self.config = None

    def reconfigure(self, user_config) -> None:
        self.config = user_config

    async def __call__(self, request):
        if request.query_params.get("sleep"):
            await asyncio.sleep(float(request.query_params["sleep"]))
        return {"tag": self.tag, "config": self.config, "pid": os.getpid()}

    def check_health(self) -> None:
        marker = (self.config or {}).get("unhealthy_if") if isinstance(self.config, dict) else None
        if marker and os.path.exists(marker):
            raise RuntimeError(f"unhealthy: {marker} exists")


class Broken:
    def __init__(self) -> None:
        raise RuntimeError("model file missing: weights.bin")


def hello(request):
    return "hello"
