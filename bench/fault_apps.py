"""The fault backend: a replica that fails a share of its requests, for traffic-policy tests and demos.

`Faulty(mode, fraction, claim, seed)` answers every request 200 with its replica's
id (`{"replica": ..., "faulty": ...}`), except on **one replica** of the
backend, which fails `fraction` of its requests as `mode` says:

- `"5xx"`: answers 500 (`FAULT_STATUS`), as a half-broken model server does;
- `"stall"`: never answers (an `await` that does not end) while its health
  check passes, as a thrashing GPU does: the proxy's deadline ends the call;
- `"ok"`: fails nothing (the same backend, healthy, for a baseline).

Which replica fails is deterministic: the first to start claims the file
`claim` (created exclusively; it holds the replica's id), so exactly one
replica of the backend is faulty, and its replacement (the file exists by
then) is healthy, as a replaced bad replica should be. Which of its requests
fail is drawn from a generator seeded with `seed`: the same sequence each run,
failing independently as real faults do (an evenly spread 0.5, every second
request, would never fail twice in a row for one proxy worker, and would
hide from a detector of errors in a row).

The same settings may come as the backend's `user_config` (a table of
`mode`, `fraction`, `claim`, `seed`), which replicas take in place: a
backend deployed healthy (`mode = "ok"`) turns faulty at the moment its
`user_config` changes, without a restart (tests/reliability's scenario 13).

Used by tests/real/test_traffic_policy.py through a repository's own
`deployments` module; imported by Ray workers through the driver's import
path. Measures nothing.
"""

from __future__ import annotations

import asyncio
import os
import random
from typing import Any

from ray_gitops.serving import context

__all__ = ["Faulty", "MODES", "FAULT_STATUS"]

MODES = ("ok", "5xx", "stall")
FAULT_STATUS = 500


class Faulty:
    def __init__(self, mode: str = "5xx", fraction: float = 0.5, claim: str = "", seed: int = 46) -> None:
        self.replica_id = context().replica_id
        self.claimed = False
        self._configure(mode, fraction, claim, seed)

    def reconfigure(self, config: dict[str, Any] | None) -> None:
        """The backend's `user_config`: `mode`, `fraction`, `claim`, `seed`, taken in place."""
        if config:
            self._configure(**config)

    def _configure(self, mode: str = "5xx", fraction: float = 0.5, claim: str = "", seed: int = 46) -> None:
        if mode not in MODES:
            raise ValueError(f"mode must be one of {', '.join(MODES)} (got {mode!r})")
        if not 0 <= fraction <= 1:
            raise ValueError(f"fraction must be between 0 and 1 (got {fraction})")
        self.mode = mode
        self.fraction = fraction
        if mode != "ok" and not self.claimed:
            self.claimed = _claim(claim, self.replica_id)
        self.faulty = mode != "ok" and self.claimed
        self._draws = random.Random(seed)

    def _fails(self) -> bool:
        """Whether this request is one of the `fraction` that fail (seeded: the same sequence each run)."""
        return self._draws.random() < self.fraction

    async def __call__(self, request: Any) -> Any:
        from starlette.responses import JSONResponse

        body = {"replica": self.replica_id, "faulty": self.faulty}
        if self.faulty and self._fails():
            if self.mode == "stall":
                await asyncio.Event().wait()  # never answers; the health check still passes
            return JSONResponse(body, status_code=FAULT_STATUS)
        return body


def _claim(path: str, replica_id: str) -> bool:
    """Whether this replica is the first to claim `path` (no path: every replica is faulty)."""
    if not path:
        return True
    try:
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
    except FileExistsError:
        return False
    with os.fdopen(fd, "w") as claimed:
        claimed.write(replica_id)
    return True
