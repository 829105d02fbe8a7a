"""What the multi-node scenario scripts share (controller_multinode.py,
data_tcp_multinode.py): each runs in its own process, with its own
`ray.cluster_utils.Cluster`, and imports this as a sibling module before Ray.

Importing it sets Ray's environment for a quiet local cluster (only where the
caller has not set it), so it must come before `import ray`.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any, Callable

for key, value in {"RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0", "RAY_DEDUP_LOGS": "0"}.items():
    os.environ.setdefault(key, value)

# The scenarios' working dir under Ray: the apps they deploy import from here.
APPS = str(Path(__file__).parent)


def wait(check: Callable[[], Any], timeout_s: float) -> Any:
    """Poll `check` until it returns something truthy; past `timeout_s`, its
    last value (the scenario prints what it saw rather than failing here)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.2)
    return check()
