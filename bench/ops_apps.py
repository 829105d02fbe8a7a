"""The echo backend Ray Serve runs in `bench.stacks.Serve`: its code version and user_config.

The code version comes from the runtime_env (`BENCH_CODE`), so changing it is
a code change to Serve (replicas replaced); `user_config` changes in place.
"""

from __future__ import annotations

import os
from typing import Any

from ray import serve


class Echo:
    def __init__(self) -> None:
        self.config: Any = None

    def reconfigure(self, config: Any) -> None:
        self.config = config

    def __call__(self, request: Any) -> dict[str, Any]:
        return {"label": "echo", "code": os.environ.get("BENCH_CODE", "0"), "config": self.config}


# Applied, not decorated: mypy keeps a decorated class's own type, which has no `bind`.
app = serve.deployment()(Echo).bind()
